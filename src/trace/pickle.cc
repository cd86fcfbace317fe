#include "trace/pickle.h"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <type_traits>
#include <unordered_map>

#include "base/limits.h"
#include "trace/pickle_opcodes.h"

namespace perftracker::trace {
namespace {

using internal::Op;

struct OpInfo {
  const char* name = nullptr;  // null: not an opcode
  bool supported = false;
};

constexpr std::array<OpInfo, 256> MakeOpTable() {
  std::array<OpInfo, 256> t{};
#define PT_OP_ROW(byte, name, ok) t[static_cast<uint8_t>(byte)] = {#name, ok};
  PT_PICKLE_OPCODES(PT_OP_ROW)
#undef PT_OP_ROW
  return t;
}
constexpr std::array<OpInfo, 256> kOps = MakeOpTable();

using Type = PickleNode::Type;

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Protocol 0's text encoding, Python's raw-unicode-escape: a byte is its Latin-1 code point,
// except \uXXXX and \UXXXXXXXX. "caf\xe9" -> "café"; "\u20ac" -> "€". False on a bad escape.
bool RawUnicodeEscapeToUtf8(std::string_view in, std::string* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    const auto c = static_cast<uint8_t>(in[i]);
    if (c == '\\' && i + 1 < in.size() && (in[i + 1] == 'u' || in[i + 1] == 'U')) {
      const size_t n = in[i + 1] == 'u' ? 4 : 8;
      uint32_t cp = 0;
      if (in.size() - i - 2 < n) return false;
      auto [p, ec] = std::from_chars(in.data() + i + 2, in.data() + i + 2 + n, cp, 16);
      if (ec != std::errc() || p != in.data() + i + 2 + n || cp > 0x10FFFF) return false;
      AppendUtf8(cp, out);
      i += 1 + n;
    } else {
      AppendUtf8(c, out);
    }
  }
  return true;
}
constexpr int64_t kMark = -1;  // a MARK on the value stack

}  // namespace

// The pickle machine over one buffer: a stack of node indices and MARKs, and the memo.
class PickleParser {
 public:
  PickleParser(std::string_view in, const std::string& name) : in_(in), name_(name) {
    out_.nodes_.emplace_back();  // node 0: None, what lookups of nothing give
  }

  StatusOr<Pickle> Run() {
    if (in_.size() > limits::kMaxPickleBytes)
      return Bad(fmt::format("{} bytes, more than the {} a dump may have", in_.size(),
                             limits::kMaxPickleBytes));
    while (pos_ < in_.size()) {
      const size_t at = pos_;
      const uint8_t code = static_cast<uint8_t>(in_[pos_++]);
      const OpInfo& info = kOps[code];
      if (info.name == nullptr)
        return Bad(fmt::format("byte {} is no pickle opcode ({:#04x})", at, code));
      if (!info.supported)
        return Bad(
            fmt::format("opcode {} at byte {} names or calls a Python object; only plain "
                        "data is read",
                        info.name, at));
      if (static_cast<Op>(code) == Op::kSTOP) {
        if (stack_.size() != 1 || stack_[0] == kMark || !marks_.empty())
          return Bad(fmt::format("STOP at byte {} with {} values on the stack", at, stack_.size()));
        out_.root_ = static_cast<uint32_t>(stack_[0]);
        return std::move(out_);
      }
      if (Status st = Step(static_cast<Op>(code), at); !st.ok()) return st;
      // Every opcode pushes one entry at most: the stack (and the MARKs on it) stays within
      // the values a pickle may make, whatever the file repeats.
      if (stack_.size() > limits::kMaxPickleNodes)
        return Bad(fmt::format("more than {} values on the stack at byte {}",
                               limits::kMaxPickleNodes, at));
    }
    return Bad("ends before its STOP opcode");
  }

 private:
  Status Bad(const std::string& what) const {
    return DataLoss(fmt::format("{}: not a pickle this reader takes: {}", name_, what));
  }

  // N bytes of the input; false at its end.
  bool Take(size_t n, std::string_view* out) {
    if (in_.size() - pos_ < n) return false;
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // An unsigned integer of sizeof(T) bytes, little-endian as pickle writes them.
  template <typename T>
  bool TakeLittle(T* v) {
    std::string_view b;
    if (!Take(sizeof(T), &b)) return false;
    std::make_unsigned_t<T> u = 0;
    for (size_t k = 0; k < sizeof(T); ++k)
      u |= static_cast<std::make_unsigned_t<T>>(static_cast<uint8_t>(b[k])) << (8 * k);
    *v = static_cast<T>(u);
    return true;
  }
  // An opcode's N-byte argument.
  Status TakeArg(size_t n, size_t at, std::string_view* arg) {
    if (!Take(n, arg)) return Bad(fmt::format("{}-byte argument at byte {} past the end", n, at));
    return Status::Ok();
  }
  // A protocol-0 argument: the text up to the next newline.
  bool TakeLine(std::string_view* out) {
    const size_t nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos) return false;
    *out = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return true;
  }

  StatusOr<uint32_t> NewNode(Type type) {
    if (out_.nodes_.size() >= limits::kMaxPickleNodes)
      return Bad(fmt::format("more than {} values", limits::kMaxPickleNodes));
    out_.nodes_.emplace_back();
    out_.nodes_.back().type = type;
    return static_cast<uint32_t>(out_.nodes_.size() - 1);
  }
  Status Push(Type type, int64_t i = 0, double f = 0, std::string_view s = {}) {
    PT_ASSIGN_OR_RETURN(uint32_t n, NewNode(type));
    PickleNode& node = out_.nodes_[n];
    node.i = i;
    node.f = f;
    node.s.assign(s.data(), s.size());
    stack_.push_back(n);
    return Status::Ok();
  }
  // The values above the last MARK, which is removed; false without a MARK.
  bool PopMark(std::vector<uint32_t>* items) {
    if (marks_.empty()) return false;
    const size_t from = marks_.back();
    marks_.pop_back();
    items->clear();
    for (size_t k = from + 1; k < stack_.size(); ++k)
      items->push_back(static_cast<uint32_t>(stack_[k]));
    stack_.resize(from);
    return true;
  }
  // The container the stack's top (or the value below a MARK) is; null when it is not one of
  // TYPES.
  PickleNode* Container(size_t index, std::initializer_list<Type> types) {
    if (index >= stack_.size() || stack_[index] == kMark) return nullptr;
    PickleNode& n = out_.nodes_[static_cast<size_t>(stack_[index])];
    for (Type t : types)
      if (n.type == t) return &n;
    return nullptr;
  }
  Status Memo(uint64_t id, size_t at) {
    if (stack_.empty() || stack_.back() == kMark)
      return Bad(fmt::format("memo store at byte {} with no value", at));
    if (memo_.size() >= limits::kMaxPickleNodes && !memo_.count(id))
      return Bad("memo larger than the values");
    memo_[id] = static_cast<uint32_t>(stack_.back());
    return Status::Ok();
  }
  Status Recall(uint64_t id, size_t at) {
    auto it = memo_.find(id);
    if (it == memo_.end())
      return Bad(fmt::format("memo {} read at byte {} was never stored", id, at));
    stack_.push_back(it->second);
    return Status::Ok();
  }
  Status PushText(Type type, uint64_t n, size_t at) {
    std::string_view s;
    if (n > in_.size() || !Take(static_cast<size_t>(n), &s))
      return Bad(fmt::format("a {}-byte string at byte {} past the end", n, at));
    return Push(type, 0, 0, s);
  }
  Status Tuple(size_t n, size_t at) {
    if (stack_.size() < n)
      return Bad(fmt::format("tuple of {} at byte {} on a shorter stack", n, at));
    std::vector<uint32_t> items;
    for (size_t k = stack_.size() - n; k < stack_.size(); ++k) {
      if (stack_[k] == kMark) return Bad(fmt::format("tuple at byte {} takes a MARK", at));
      items.push_back(static_cast<uint32_t>(stack_[k]));
    }
    stack_.resize(stack_.size() - n);
    PT_RETURN_IF_ERROR(Push(Type::kTuple));
    out_.nodes_[static_cast<size_t>(stack_.back())].items = std::move(items);
    return Status::Ok();
  }

  // One opcode: the stack's own (MARK, POP, DUP, PROTO, FRAME) here, values and containers in
  // their steps.
  Status Step(Op op, size_t at) {
    switch (op) {
      case Op::kPROTO:
      case Op::kFRAME:
      case Op::kMARK:
      case Op::kPOP:
      case Op::kPOP_MARK:
      case Op::kDUP:
        return StackStep(op, at);
      case Op::kEMPTY_DICT:
      case Op::kEMPTY_LIST:
      case Op::kEMPTY_SET:
      case Op::kEMPTY_TUPLE:
      case Op::kTUPLE1:
      case Op::kTUPLE2:
      case Op::kTUPLE3:
      case Op::kTUPLE:
      case Op::kLIST:
      case Op::kFROZENSET:
      case Op::kDICT:
      case Op::kAPPEND:
      case Op::kSETITEM:
      case Op::kAPPENDS:
      case Op::kSETITEMS:
      case Op::kADDITEMS:
      case Op::kBINPUT:
      case Op::kLONG_BINPUT:
      case Op::kMEMOIZE:
      case Op::kBINGET:
      case Op::kLONG_BINGET:
      case Op::kPUT:
      case Op::kGET:
        return ContainerStep(op, at);
      default:
        return ValueStep(op, at);
    }
  }

  // MARK, POP, POP_MARK, DUP, PROTO, FRAME.
  Status StackStep(Op op, size_t at) {
    std::string_view arg;
    std::vector<uint32_t> items;
    switch (op) {
      case Op::kPROTO:
        PT_RETURN_IF_ERROR(TakeArg(1, at, &arg));
        if (static_cast<uint8_t>(arg[0]) > 5)
          return Bad(fmt::format("protocol {}", uint8_t(arg[0])));
        return Status::Ok();
      case Op::kFRAME: {
        uint64_t n;
        if (!TakeLittle(&n)) return Bad("FRAME past the end");
        return Status::Ok();  // frames only group opcodes for a streaming reader
      }
      case Op::kMARK:
        marks_.push_back(stack_.size());
        stack_.push_back(kMark);
        return Status::Ok();
      case Op::kPOP:
        if (stack_.empty()) return Bad(fmt::format("POP at byte {} on an empty stack", at));
        if (stack_.back() == kMark) marks_.pop_back();
        stack_.pop_back();
        return Status::Ok();
      case Op::kPOP_MARK:
        if (!PopMark(&items)) return Bad(fmt::format("POP_MARK at byte {} without a MARK", at));
        return Status::Ok();
      case Op::kDUP:
        if (stack_.empty() || stack_.back() == kMark) return Bad(fmt::format("DUP at byte {}", at));
        stack_.push_back(stack_.back());
        return Status::Ok();
      default:
        return Bad(fmt::format("opcode {} at byte {}", kOps[uint8_t(op)].name, at));
    }
  }

  // A scalar pushed: None, booleans, integers, floats, strings, bytes.
  Status ValueStep(Op op, size_t at) {
    std::string_view arg;
    switch (op) {
      case Op::kNONE:
        stack_.push_back(0);
        return Status::Ok();
      case Op::kNEWTRUE:
      case Op::kNEWFALSE:
        return Push(Type::kBool, op == Op::kNEWTRUE ? 1 : 0);
      case Op::kBININT: {
        int32_t v;
        if (!TakeLittle(&v)) return Bad("BININT past the end");
        return Push(Type::kInt, v);
      }
      case Op::kBININT1:
        PT_RETURN_IF_ERROR(TakeArg(1, at, &arg));
        return Push(Type::kInt, static_cast<uint8_t>(arg[0]));
      case Op::kBININT2: {
        uint16_t v;
        if (!TakeLittle(&v)) return Bad("BININT2 past the end");
        return Push(Type::kInt, v);
      }
      case Op::kLONG1:
      case Op::kLONG4: {
        uint32_t n = 0;
        if (op == Op::kLONG1) {
          PT_RETURN_IF_ERROR(TakeArg(1, at, &arg));
          n = static_cast<uint8_t>(arg[0]);
        } else if (!TakeLittle(&n)) {
          return Bad("LONG4 past the end");
        }
        if (n > 8)
          return Bad(fmt::format("an integer of {} bytes at byte {} (more than 64 bits)", n, at));
        if (!Take(n, &arg)) return Bad(fmt::format("integer at byte {} past the end", at));
        uint64_t u = 0;
        for (size_t k = 0; k < n; ++k) u |= uint64_t{static_cast<uint8_t>(arg[k])} << (8 * k);
        if (n > 0 && n < 8 && (static_cast<uint8_t>(arg[n - 1]) & 0x80))
          u |= ~uint64_t{0} << (8 * n);
        return Push(Type::kInt, static_cast<int64_t>(u));
      }
      case Op::kINT:
      case Op::kLONG: {
        if (!TakeLine(&arg)) return Bad(fmt::format("INT at byte {} without its newline", at));
        if (op == Op::kINT && (arg == "00" || arg == "01")) return Push(Type::kBool, arg == "01");
        if (op == Op::kLONG && !arg.empty() && arg.back() == 'L') arg.remove_suffix(1);
        int64_t v = 0;
        auto [p, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), v);
        if (ec != std::errc() || p != arg.data() + arg.size())
          return Bad(fmt::format("integer '{}' at byte {}", arg.substr(0, 32), at));
        return Push(Type::kInt, v);
      }
      case Op::kBINFLOAT: {
        std::string_view b;  // big-endian on the wire
        if (!Take(8, &b)) return Bad("BINFLOAT past the end");
        uint64_t bits = 0;
        for (size_t k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<uint8_t>(b[k]);
        return Push(Type::kFloat, 0, std::bit_cast<double>(bits));
      }
      case Op::kFLOAT: {
        if (!TakeLine(&arg)) return Bad(fmt::format("FLOAT at byte {} without its newline", at));
        double v = 0;
        auto [p, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), v);
        if (ec != std::errc())
          return Bad(fmt::format("float '{}' at byte {}", arg.substr(0, 32), at));
        return Push(Type::kFloat, 0, v);
      }
      case Op::kUNICODE: {
        if (!TakeLine(&arg)) return Bad(fmt::format("UNICODE at byte {} without its newline", at));
        std::string utf8;
        if (!RawUnicodeEscapeToUtf8(arg, &utf8))
          return Bad(fmt::format("UNICODE escape at byte {}", at));
        return Push(Type::kString, 0, 0, utf8);
      }
      case Op::kSHORT_BINUNICODE:
      case Op::kSHORT_BINSTRING:
      case Op::kSHORT_BINBYTES:
        PT_RETURN_IF_ERROR(TakeArg(1, at, &arg));
        return PushText(op == Op::kSHORT_BINBYTES ? Type::kBytes : Type::kString,
                        static_cast<uint8_t>(arg[0]), at);
      case Op::kBINUNICODE:
      case Op::kBINSTRING:
      case Op::kBINBYTES: {
        uint32_t n;
        if (!TakeLittle(&n)) return Bad("string length past the end");
        return PushText(op == Op::kBINBYTES ? Type::kBytes : Type::kString, n, at);
      }
      case Op::kBINUNICODE8:
      case Op::kBINBYTES8:
      case Op::kBYTEARRAY8: {
        uint64_t n;
        if (!TakeLittle(&n)) return Bad("string length past the end");
        return PushText(op == Op::kBINUNICODE8 ? Type::kString : Type::kBytes, n, at);
      }
      default:
        return Bad(fmt::format("opcode {} at byte {}", kOps[uint8_t(op)].name, at));
    }
  }

  // Containers made and filled, and the memo.
  Status ContainerStep(Op op, size_t at) {
    std::string_view arg;
    std::vector<uint32_t> items;
    switch (op) {
      case Op::kEMPTY_DICT:
        return Push(Type::kDict);
      case Op::kEMPTY_LIST:
      case Op::kEMPTY_SET:
        return Push(Type::kList);
      case Op::kEMPTY_TUPLE:
        return Push(Type::kTuple);
      case Op::kTUPLE1:
      case Op::kTUPLE2:
      case Op::kTUPLE3:
        return Tuple(static_cast<size_t>(op) - static_cast<size_t>(Op::kTUPLE1) + 1, at);
      case Op::kTUPLE:
      case Op::kLIST:
      case Op::kFROZENSET:
      case Op::kDICT: {
        if (!PopMark(&items))
          return Bad(fmt::format("{} at byte {} without a MARK", kOps[uint8_t(op)].name, at));
        if (op == Op::kDICT && items.size() % 2 != 0)
          return Bad(fmt::format("DICT at byte {} with an odd number of values", at));
        PT_RETURN_IF_ERROR(Push(op == Op::kDICT    ? Type::kDict
                                : op == Op::kTUPLE ? Type::kTuple
                                                   : Type::kList));
        out_.nodes_[static_cast<size_t>(stack_.back())].items = std::move(items);
        return Status::Ok();
      }
      case Op::kAPPEND:
      case Op::kSETITEM: {
        const size_t n = op == Op::kAPPEND ? 1 : 2;
        if (stack_.size() < n + 1)
          return Bad(fmt::format("{} at byte {} on a short stack", kOps[uint8_t(op)].name, at));
        PickleNode* c =
            Container(stack_.size() - n - 1, {op == Op::kAPPEND ? Type::kList : Type::kDict});
        if (c == nullptr)
          return Bad(fmt::format("{} at byte {} into no container", kOps[uint8_t(op)].name, at));
        for (size_t k = stack_.size() - n; k < stack_.size(); ++k) {
          if (stack_[k] == kMark) return Bad(fmt::format("a MARK as a value at byte {}", at));
          c->items.push_back(static_cast<uint32_t>(stack_[k]));
        }
        stack_.resize(stack_.size() - n);
        return Status::Ok();
      }
      case Op::kAPPENDS:
      case Op::kSETITEMS:
      case Op::kADDITEMS: {
        if (!PopMark(&items))
          return Bad(fmt::format("{} at byte {} without a MARK", kOps[uint8_t(op)].name, at));
        const Type want = op == Op::kSETITEMS ? Type::kDict : Type::kList;
        PickleNode* c = stack_.empty() ? nullptr : Container(stack_.size() - 1, {want});
        if (c == nullptr)
          return Bad(fmt::format("{} at byte {} into no container", kOps[uint8_t(op)].name, at));
        if (want == Type::kDict && items.size() % 2 != 0)
          return Bad(fmt::format("SETITEMS at byte {} with an odd number of values", at));
        c->items.insert(c->items.end(), items.begin(), items.end());
        return Status::Ok();
      }
      case Op::kBINPUT:
        PT_RETURN_IF_ERROR(TakeArg(1, at, &arg));
        return Memo(static_cast<uint8_t>(arg[0]), at);
      case Op::kLONG_BINPUT: {
        uint32_t id;
        if (!TakeLittle(&id)) return Bad("LONG_BINPUT past the end");
        return Memo(id, at);
      }
      case Op::kMEMOIZE:
        return Memo(memo_.size(), at);
      case Op::kBINGET:
        PT_RETURN_IF_ERROR(TakeArg(1, at, &arg));
        return Recall(static_cast<uint8_t>(arg[0]), at);
      case Op::kLONG_BINGET: {
        uint32_t id;
        if (!TakeLittle(&id)) return Bad("LONG_BINGET past the end");
        return Recall(id, at);
      }
      case Op::kPUT:
      case Op::kGET: {
        if (!TakeLine(&arg)) return Bad(fmt::format("memo id at byte {} without its newline", at));
        uint64_t id = 0;
        auto [p, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), id);
        if (ec != std::errc()) return Bad(fmt::format("memo id at byte {}", at));
        return op == Op::kPUT ? Memo(id, at) : Recall(id, at);
      }
      default:
        return Bad(fmt::format("opcode {} at byte {}", kOps[uint8_t(op)].name, at));
    }
  }

  std::string_view in_;
  const std::string& name_;
  size_t pos_ = 0;
  Pickle out_;
  std::vector<int64_t> stack_;  // node indices, kMark for a MARK
  std::vector<size_t> marks_;   // positions of the MARKs in stack_
  std::unordered_map<uint64_t, uint32_t> memo_;
};

StatusOr<Pickle> ParsePickle(std::string_view bytes, const std::string& name) {
  return PickleParser(bytes, name).Run();
}

PickleValue Pickle::root() const { return PickleValue(this, root_); }

PickleValue PickleValue::none() const { return PickleValue(p_, 0); }

bool PickleValue::is_sequence() const {
  return type() == PickleNode::Type::kList || type() == PickleNode::Type::kTuple;
}

double PickleValue::number(double otherwise) const {
  if (type() == PickleNode::Type::kFloat) return node().f;
  if (is_int()) return static_cast<double>(node().i);
  return otherwise;
}

size_t PickleValue::length() const {
  if (is_sequence()) return node().items.size();
  if (is_dict()) return node().items.size() / 2;
  return 0;
}

PickleValue PickleValue::at(size_t i) const {
  return is_sequence() && i < node().items.size() ? PickleValue(p_, node().items[i]) : none();
}
PickleValue PickleValue::key(size_t i) const {
  return is_dict() && 2 * i + 1 < node().items.size() ? PickleValue(p_, node().items[2 * i])
                                                      : none();
}
PickleValue PickleValue::value(size_t i) const {
  return is_dict() && 2 * i + 1 < node().items.size() ? PickleValue(p_, node().items[2 * i + 1])
                                                      : none();
}
PickleValue PickleValue::get(std::string_view k) const {
  for (size_t i = 0, n = length(); is_dict() && i < n; ++i)
    if (key(i).is_string() && key(i).str() == k) return value(i);
  return none();
}

}  // namespace perftracker::trace
