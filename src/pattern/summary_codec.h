// The primitives of the summary format (pattern/summary_io.h): a Writer of varints, raw
// little-endian numbers and table-indexed strings, and a bounded Reader of the same. Each
// read is checked against the bytes left and every allocation a decoded summary will make is
// charged to a budget (limits::kMaxSummaryMemory) before it is made; the first bad byte stops
// the reader and is remembered (fail_pos). summary_io.cc lays the fields out with these.
//   Writer w; w.U(300); w.S(-2); w.Str("a");  // body 0xac 0x02 0x03 0x00, table {"a"}
//   w.Payload() == "\x01\x01a\xac\x02\x03\x00"  (table count, "a", then the body)
#ifndef PERFTRACKER_PATTERN_SUMMARY_CODEC_H_
#define PERFTRACKER_PATTERN_SUMMARY_CODEC_H_

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/limits.h"
#include "pattern/pattern.h"

namespace perftracker::pattern::summary_codec {

inline constexpr char kMagic[8] = {'P', 'T', 'S', 'U', 'M', 'M', 'R', 'Y'};
inline constexpr size_t kHeaderSize = 12;
class Writer {
 public:
  void U(uint64_t v) {
    while (v >= 0x80) {
      body_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    body_.push_back(static_cast<char>(v));
  }
  void S(int64_t v) { U((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void B(bool v) { U(v ? 1 : 0); }
  void D(double v) { Raw(std::bit_cast<uint64_t>(v), 8); }
  void F(float v) { Raw(std::bit_cast<uint32_t>(v), 4); }
  void Str(const std::string& s) {
    auto [it, inserted] = index_.try_emplace(s, static_cast<uint64_t>(table_.size()));
    if (inserted) table_.push_back(&it->first);
    U(it->second);
  }

  // The string table, then the body: what is compressed. Leaves the writer empty.
  std::string Payload() {
    std::string body = std::move(body_);
    body_.clear();
    U(table_.size());
    for (const std::string* s : table_) {
      U(s->size());
      body_ += *s;
    }
    std::string payload = std::move(body_);
    payload += body;
    body_.clear();
    index_.clear();
    table_.clear();
    return payload;
  }
  // The bytes written since the last Payload() or Take(); leaves the writer empty.
  std::string Take() {
    std::string out = std::move(body_);
    body_.clear();
    return out;
  }

 private:
  void Raw(uint64_t bits, int n) {
    for (int i = 0; i < n; ++i) body_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
  std::string body_;
  std::unordered_map<std::string, uint64_t> index_;
  std::vector<const std::string*> table_;
};

class Reader {
 public:
  static constexpr size_t kMaxVarint = 10;  // bytes of a 64-bit LEB128 value

  Reader(std::string_view b, size_t pos) : b_(b), pos_(pos) {}

  bool failed() const { return failed_; }
  bool corrupt() const { return corrupt_; }
  size_t fail_pos() const { return fail_pos_; }
  size_t remaining() const { return b_.size() - pos_; }

  uint64_t U() {
    // With the longest varint's bytes all there, no bounds check per byte (most are one byte).
    if (!failed_ && remaining() >= kMaxVarint) {
      const char* p = b_.data() + pos_;
      uint64_t v = 0;
      for (size_t i = 0; i < kMaxVarint; ++i) {
        const auto byte = static_cast<uint8_t>(p[i]);
        v |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) {
          pos_ += i + 1;
          return v;
        }
      }
      pos_ += kMaxVarint;
      Corrupt();
      return 0;
    }
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (!Need(1)) return 0;
      const auto byte = static_cast<uint8_t>(b_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return v;
    }
    Corrupt();
    return 0;
  }
  int64_t S() {
    const uint64_t u = U();
    return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
  }
  int32_t S32() {
    const int64_t v = S();
    if (v < INT32_MIN || v > INT32_MAX) Corrupt();
    return static_cast<int32_t>(v);
  }
  bool B() {
    const uint64_t v = U();
    if (v > 1) Corrupt();
    return v == 1;
  }
  // Non-finite numbers (a writer bug or garbage) become 0: every consumer sums and compares
  // these, and one NaN would poison a whole job's medians.
  double D() {
    const double v = std::bit_cast<double>(Raw<8>());
    return std::isfinite(v) ? v : 0.0;
  }
  float F() {
    const float v = std::bit_cast<float>(static_cast<uint32_t>(Raw<4>()));
    return std::isfinite(v) ? v : 0.0f;
  }
  // *out = D() for each of OUT in turn, with one bounds check when the bytes are all there.
  void Doubles(std::initializer_list<double*> out) {
    if (std::endian::native != std::endian::little || failed_ || remaining() < 8 * out.size()) {
      for (double* v : out) *v = D();
      return;
    }
    for (double* v : out) {
      double d;
      std::memcpy(&d, b_.data() + pos_, 8);
      pos_ += 8;
      *v = std::isfinite(d) ? d : 0.0;
    }
  }
  // OUT[i] = F() for N floats, likewise.
  void Floats(float* out, size_t n) {
    if (std::endian::native != std::endian::little || failed_ || remaining() / 4 < n) {
      for (size_t i = 0; i < n; ++i) out[i] = F();
      return;
    }
    // Non-finite (all exponent bits set) becomes +0, as F() does: on the bits, four at a time
    // and with no branch, so the compiler makes vector code of it (a summary holds ten
    // thousand of these).
    auto finite = [](uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u ? 0u : bits; };
    const char* p = b_.data() + pos_;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      uint32_t w[4];
      std::memcpy(w, p + 4 * i, sizeof(w));
      for (uint32_t& x : w) x = finite(x);
      std::memcpy(out + i, w, sizeof(w));
    }
    for (; i < n; ++i) {
      uint32_t x;
      std::memcpy(&x, p + 4 * i, 4);
      x = finite(x);
      std::memcpy(out + i, &x, 4);
    }
    pos_ += 4 * n;
  }
  // A count of elements of type T, each encoded in at least MIN_BYTES: a larger count than the
  // bytes left can hold is impossible, and the memory the elements take is charged to the
  // budget before the caller allocates it.
  template <typename T>
  size_t Count(size_t min_bytes = 1) {
    const uint64_t n = U();
    if (!failed_ && n > remaining() / min_bytes) Truncated();
    if (failed_) return 0;
    Charge(static_cast<size_t>(n) * sizeof(T));
    return failed_ ? 0 : static_cast<size_t>(n);
  }
  // Bytes of a string that a decoded field will hold on the heap (short ones live inline).
  std::string_view Held(std::string_view s) {
    constexpr size_t kInline = 15;  // libstdc++'s small-string capacity
    if (s.size() > kInline) Charge(s.size());
    return failed_ ? std::string_view() : s;
  }
  std::string_view RawString() {
    const uint64_t n = U();
    if (!failed_ && n > remaining()) Truncated();
    if (failed_) return {};
    std::string_view s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view Str(const std::vector<std::string_view>& table) {
    uint32_t unused;
    return Str(table, &unused);
  }
  // The same, also giving the string's index in the table (FunctionView::kNoRef on failure).
  std::string_view Str(const std::vector<std::string_view>& table, uint32_t* index) {
    *index = FunctionView::kNoRef;
    const uint64_t i = U();
    if (failed_) return {};
    if (i >= table.size()) {
      Corrupt();
      return {};
    }
    const std::string_view s = Held(table[i]);
    if (!failed_) *index = static_cast<uint32_t>(i);
    return s;
  }
  // Every allocation the decoded summary makes is charged here first: a body that would
  // expand past limits::kMaxSummaryMemory (a million copies of one long name) is refused.
  void Charge(size_t bytes) {
    if (failed_) return;
    held_ += bytes;
    if (held_ > limits::kMaxSummaryMemory) {
      over_budget_ = true;
      Corrupt();
    }
  }
  bool over_budget() const { return over_budget_; }
  void Corrupt() {
    if (!failed_) {
      failed_ = true;
      corrupt_ = true;
      fail_pos_ = pos_;
    }
  }

 private:
  bool Need(size_t n) {
    if (failed_) return false;
    if (remaining() < n) {
      Truncated();
      return false;
    }
    return true;
  }
  void Truncated() {
    if (!failed_) {
      failed_ = true;
      fail_pos_ = b_.size();
    }
  }
  template <size_t N>
  uint64_t Raw() {
    if (!Need(N)) return 0;
    uint64_t v = 0;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&v, b_.data() + pos_, N);
      pos_ += N;
    } else {
      for (size_t i = 0; i < N; ++i)
        v |= static_cast<uint64_t>(static_cast<uint8_t>(b_[pos_++])) << (8 * i);
    }
    return v;
  }

  std::string_view b_;
  size_t pos_;
  bool failed_ = false;
  bool corrupt_ = false;
  bool over_budget_ = false;
  size_t fail_pos_ = 0;
  size_t held_ = 0;
};

}  // namespace perftracker::pattern::summary_codec

#endif  // PERFTRACKER_PATTERN_SUMMARY_CODEC_H_
