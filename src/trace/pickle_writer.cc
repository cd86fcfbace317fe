#include "trace/pickle_writer.h"

#include <bit>
#include <cstring>
#include <limits>

#include "base/utf8.h"
#include "trace/pickle_opcodes.h"

namespace perftracker::trace {
namespace {

using internal::Op;

// The protocol written: the oldest with the binary opcodes used here (NEWTRUE, LONG1), which
// every Python 3 loads.
constexpr char kProtocol = 2;

void Put(std::string* out, Op op) { out->push_back(static_cast<char>(op)); }

// V's N low bytes, least significant first (pickle's binary integers).
void PutLittleEndian(std::string* out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

PickleWriter::PickleWriter() {
  Put(&out_, Op::kPROTO);
  out_.push_back(kProtocol);
}

void PickleWriter::Item() {
  if (open_.empty())
    ++top_;
  else
    ++open_.back().items;
}

void PickleWriter::OpenDict() {
  Item();
  Put(&out_, Op::kEMPTY_DICT);
  Put(&out_, Op::kMARK);
  open_.push_back({Kind::kDict});
}

void PickleWriter::OpenList() {
  Item();
  Put(&out_, Op::kEMPTY_LIST);
  Put(&out_, Op::kMARK);
  open_.push_back({Kind::kList});
}

void PickleWriter::OpenTuple() {
  Item();
  Put(&out_, Op::kMARK);
  open_.push_back({Kind::kTuple});
}

void PickleWriter::Close() {
  if (open_.empty()) {
    misused_ = true;
    return;
  }
  const Open o = open_.back();
  if (o.kind == Kind::kDict && o.items % 2 != 0) misused_ = true;
  open_.pop_back();
  // MARK ... SETITEMS / APPENDS add the items since the mark to the container below it;
  // MARK ... TUPLE makes the tuple of them.
  Put(&out_, o.kind == Kind::kDict   ? Op::kSETITEMS
             : o.kind == Kind::kList ? Op::kAPPENDS
                                     : Op::kTUPLE);
}

void PickleWriter::String(std::string_view s) {
  Item();
  std::string text;
  AppendValidUtf8(s, &text);
  Put(&out_, Op::kBINUNICODE);
  PutLittleEndian(&out_, text.size(), 4);
  out_.append(text);
}

void PickleWriter::Int(int64_t v) {
  Item();
  if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    Put(&out_, Op::kBININT);
    PutLittleEndian(&out_, static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    return;
  }
  // LONG1: a length byte, then the two's complement, least significant byte first.
  Put(&out_, Op::kLONG1);
  out_.push_back(8);
  PutLittleEndian(&out_, static_cast<uint64_t>(v), 8);
}

void PickleWriter::Float(double v) {
  Item();
  Put(&out_, Op::kBINFLOAT);
  const uint64_t bits = std::bit_cast<uint64_t>(v);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void PickleWriter::Bool(bool v) {
  Item();
  Put(&out_, v ? Op::kNEWTRUE : Op::kNEWFALSE);
}

void PickleWriter::None() {
  Item();
  Put(&out_, Op::kNONE);
}

StatusOr<std::string> PickleWriter::Finish() {
  if (misused_ || !open_.empty() || top_ != 1)
    return Internal(
        "pickle writer: a container left open, a dict key without its value, or not one value "
        "at the top");
  Put(&out_, Op::kSTOP);
  return std::move(out_);
}

}  // namespace perftracker::trace
