// Two streaming passes over the (possibly gzip) bytes of a trace, both with memory bounded by a
// chunk buffer:
//  1. A hand-written, quote/escape-aware structural scanner walks the whole text. It parses the
//     small top-level values (distributedInfo, deviceProperties, baseTimeNanoseconds, host_name)
//     wherever they sit, parses only the events whose strings contain '#' to collect
//     ProfilerStep#N / Optimizer.step# spans, and records the byte offsets of one event start
//     every `segment_bytes` inside the traceEvents array (or the top-level legacy list).
//  2. Those offsets cut the event array into segments of whole events. Each segment is framed
//     as "[ ... ]" in place in the padded read buffer and parsed as one simdjson on-demand
//     document, so simdjson's SIMD stage 1 runs over megabytes at a time and events are decoded
//     without any per-event allocation.
// Timestamps stay as doubles in the trace's own (absolute) microseconds: a double holds
// 1.7e15 us to within 0.25 us, well below what any diagnosis here needs, and keeping the
// absolute clock lets ranks be compared without a per-file offset.
#include "trace/reader.h"

#include <dirent.h>
#include <fmt/format.h>
#include <simdjson.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "base/limits.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PT_HAVE_AVX2_PATH 1
#endif
#include <climits>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/file_source.h"
#include "trace/reader_internal.h"

namespace perftracker::trace {
namespace {

// Built without -mavx2 etc., simdjson::ondemand is simdjson::fallback::ondemand (its builtin
// implementation; -march=x86-64-v3 alone does not change that, it lacks PCLMUL). That costs
// nothing here: the parts that use SIMD, stage 1 and string unescaping, go through the
// runtime-selected implementation (haswell on AVX2 machines) either way, and the rest of
// On-Demand is the same scalar code in every implementation. Measured with the builtin forced
// to haswell (-march=x86-64-v3 -mpclmul): 964.4 M instructions per 54 MB trace against 963.6 M.
namespace od = simdjson::ondemand;
using internal::ReaderTuning;

constexpr size_t kPad = simdjson::SIMDJSON_PADDING;
constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
constexpr size_t kMaxDepth = 1024;
constexpr size_t kMaxUnknownCats = 64;

// ---------------------------------------------------------------------------------------------
// Small helpers.

int64_t HashId(std::string_view s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across runs and builds
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);  // never -1, never negative
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Matches a raw (still quoted) simdjson key against a literal without unescaping it.
template <size_t N>
inline bool KeyIs(const char* raw, const char (&lit)[N]) {
  return std::memcmp(raw, lit, N - 1) == 0 && raw[N - 1] == '"';
}

// Kineto "cat" to kind. Returns false for a category we do not know.
bool KindFromCat(std::string_view cat, EventKind* kind) {
  struct Entry {
    std::string_view cat;
    EventKind kind;
  };
  // Exact lowercase spellings first (torch 2.x), then older capitalised ones case-insensitively.
  static constexpr Entry kTable[] = {
      {"cpu_op", EventKind::kCpuOp},
      {"kernel", EventKind::kKernel},
      {"cuda_runtime", EventKind::kCudaRuntime},
      {"python_function", EventKind::kPythonFunction},
      {"user_annotation", EventKind::kUserAnnotation},
      {"gpu_user_annotation", EventKind::kGpuUserAnnotation},
      {"gpu_memcpy", EventKind::kMemcpy},
      {"gpu_memset", EventKind::kMemset},
      {"cuda_driver", EventKind::kCudaDriver},
      {"cuda_sync", EventKind::kCudaSync},
      {"operator", EventKind::kCpuOp},
      {"runtime", EventKind::kCudaRuntime},
      {"driver", EventKind::kCudaDriver},
      {"memcpy", EventKind::kMemcpy},
      {"memset", EventKind::kMemset},
      {"record_function", EventKind::kUserAnnotation},
      {"python", EventKind::kPythonFunction},
      {"trace", EventKind::kOther},
      {"overhead", EventKind::kOther},
      {"cpu_instant_event", EventKind::kOther},
      {"cuda_profiler_range", EventKind::kOther},
      {"gpu_op", EventKind::kOther},
      {"ac2g", EventKind::kOther},
      {"fwdbwd", EventKind::kOther},
  };
  for (const Entry& e : kTable) {
    if (cat == e.cat) {
      *kind = e.kind;
      return true;
    }
  }
  for (const Entry& e : kTable) {
    if (EqualsIgnoreCase(cat, e.cat)) {
      *kind = e.kind;
      return true;
    }
  }
  return false;
}

// Events without a cat (legacy torch 1.x traces): record_function markers by their names.
EventKind KindFromName(std::string_view name) {
  if (StartsWith(name, "ProfilerStep#") || StartsWith(name, "enumerate(DataLoader)") ||
      StartsWith(name, "Optimizer.step#") || StartsWith(name, "Optimizer.zero_grad#")) {
    return EventKind::kUserAnnotation;
  }
  return EventKind::kCpuOp;
}

bool IsValueError(simdjson::error_code e) {
  return e == simdjson::INCORRECT_TYPE || e == simdjson::NUMBER_ERROR ||
         e == simdjson::NUMBER_OUT_OF_RANGE || e == simdjson::NO_SUCH_FIELD;
}

bool ReadIntSlow(od::value& v, int64_t* out);

// Integer from a JSON number (integers, or doubles truncated). False on any other type.
// The common case stays small enough to inline into the event loop; the rest is out of line.
[[gnu::always_inline]] inline bool ReadInt(od::value& v, int64_t* out) {
  int64_t i;
  if (v.get_int64().get(i) == simdjson::SUCCESS) {
    *out = i;
    return true;
  }
  return ReadIntSlow(v, out);
}

[[gnu::noinline]] bool ReadIntSlow(od::value& v, int64_t* out) {
  double d;
  if (v.get_double().get(d) == simdjson::SUCCESS && d > -9.2e18 && d < 9.2e18) {
    *out = static_cast<int64_t>(d);
    return true;
  }
  uint64_t u;
  if (v.get_uint64().get(u) == simdjson::SUCCESS) {
    *out = static_cast<int64_t>(u >> 1);  // beyond int64: keep something ordered
    return true;
  }
  return false;
}

[[gnu::noinline]] bool ReadIdString(od::value& v, int64_t* out) {
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) {
    *out = HashId(s);
    return true;
  }
  return false;
}

// pid / tid: a number, or a string hashed to a stable integer.
[[gnu::always_inline]] inline bool ReadId(od::value& v, int64_t* out) {
  return ReadInt(v, out) || ReadIdString(v, out);
}

// A string, or the raw text of a number (pg_name is "0" in some traces and 0 in others).
bool ReadText(od::value& v, std::string* out) {
  std::string_view s;
  if (v.get_string().get(s) == simdjson::SUCCESS) {
    out->assign(s);
    return true;
  }
  if (v.type().error() == simdjson::SUCCESS) {
    s = v.raw_json_token();
    while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' ||
                          s.back() == '\t' || s.back() == ',')) {
      s.remove_suffix(1);
    }
    out->assign(s);
    return true;
  }
  return false;
}

// Rank lists: a JSON array of integers, or a string such as "[0, 1]".
void ReadRanks(od::value& v, std::vector<int>* out) {
  out->clear();
  od::array arr;
  if (v.get_array().get(arr) == simdjson::SUCCESS) {
    for (auto el : arr) {
      od::value ev;
      int64_t r;
      if (el.get(ev) == simdjson::SUCCESS && ReadInt(ev, &r)) out->push_back(static_cast<int>(r));
    }
    return;
  }
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) return;
  int64_t cur = -1;
  for (char c : s) {
    if (c >= '0' && c <= '9') {
      cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
      if (cur > INT_MAX) cur = INT_MAX;
    } else if (cur >= 0) {
      out->push_back(static_cast<int>(cur));
      cur = -1;
    }
  }
  if (cur >= 0) out->push_back(static_cast<int>(cur));
}

// Invalid UTF-8 bytes become '?', so one bad name cannot fail a whole segment.
void RepairUtf8(char* data, size_t len) {
  auto* p = reinterpret_cast<unsigned char*>(data);
  size_t i = 0;
  while (i < len) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      p[i++] = '?';
      continue;
    }
    bool ok = i + n < len;
    for (size_t k = 1; ok && k <= n; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (ok) {
      static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[n] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    }
    if (!ok) {
      p[i++] = '?';
      continue;
    }
    i += n + 1;
  }
}

const char* TypeName(unsigned char c) {
  switch (c) {
    case '"':
      return "a string";
    case 't':
    case 'f':
      return "a boolean";
    case 'n':
      return "null";
    case '{':
      return "an object";
    case '[':
      return "an array";
    default:
      if (c == '-' || (c >= '0' && c <= '9')) return "a number";
      return nullptr;
  }
}

// Character classes for the structural scanner.
enum : uint8_t { kOrd = 0, kWs, kQuote, kOpen, kClose, kComma, kColon };

struct Tables {
  std::array<uint8_t, 256> cls{};   // slow path: every structural class
  std::array<uint8_t, 256> fast{};  // inside a nested value: only quotes and brackets matter
  std::array<uint8_t, 256> str{};   // inside a string: the bytes that stop a run
  Tables() {
    for (char c : {' ', '\t', '\n', '\r'}) cls[static_cast<uint8_t>(c)] = kWs;
    cls['"'] = fast['"'] = kQuote;
    cls['{'] = cls['['] = fast['{'] = fast['['] = kOpen;
    cls['}'] = cls[']'] = fast['}'] = fast[']'] = kClose;
    cls[','] = kComma;
    cls[':'] = kColon;
    str['"'] = str['\\'] = str['#'] = 1;
  }
};
const Tables kTables;

// Returns the first byte in [p, end) that is one of `Stops` (`table` marks the same bytes, for
// builds without SSE2). The scanner may look up to 16 bytes past `end`: its buffers keep kPad
// bytes of slack there.
template <char... Stops>
inline const unsigned char* FindFirstOf(const unsigned char* p, const unsigned char* end,
                                        const std::array<uint8_t, 256>& table) {
#if defined(__SSE2__)
  while (p < end) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    __m128i m = _mm_setzero_si128();
    ((m = _mm_or_si128(m, _mm_cmpeq_epi8(v, _mm_set1_epi8(Stops)))), ...);
    const int bits = _mm_movemask_epi8(m);
    if (bits != 0) {
      p += __builtin_ctz(static_cast<unsigned>(bits));
      return p < end ? p : end;
    }
    p += 16;
  }
  return end;
#else
  while (p < end && !table[*p]) ++p;
  return p;
#endif
}

// The first quote or bracket: where a nested value's structure continues.
inline const unsigned char* SkipOrdinary(const unsigned char* p, const unsigned char* end) {
  return FindFirstOf<'"', '{', '}', '[', ']'>(p, end, kTables.fast);
}

// The first quote, backslash or '#': where a string ends, escapes, or may hold a marker.
inline const unsigned char* SkipInString(const unsigned char* p, const unsigned char* end) {
  return FindFirstOf<'"', '\\', '#'>(p, end, kTables.str);
}

// Bit i of the result is the XOR of bits 0..i of x (the in-string mask from the quote mask).
inline uint64_t PrefixXor(uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

// 64-byte block classification for the structural scanner (simdjson's stage 1 in miniature):
// one bit per byte for quotes, backslashes, brackets (opening or closing) and '#', and the
// prefix XOR of all 64 quote bits (the in-string mask when nothing in the block is escaped).
struct BlockMasks {
  uint64_t quote = 0, backslash = 0, bracket = 0, hash = 0, quote_prefix = 0;
};

static_assert(kPad >= 64, "the block scanner reads 64 bytes past any position before `end`");

inline BlockMasks ClassifyBlock(const unsigned char* p) {
  BlockMasks m;
#if defined(__SSE2__)
  const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), ob = _mm_set1_epi8('{'),
                cb = _mm_set1_epi8('}'), h = _mm_set1_epi8('#'), x20 = _mm_set1_epi8(0x20);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    const __m128i folded = _mm_or_si128(v, x20);  // '[' -> '{', ']' -> '}'; nothing else maps there
    auto bits = [&](__m128i eq) {
      return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(eq))) << (16 * k);
    };
    m.quote |= bits(_mm_cmpeq_epi8(v, q));
    m.backslash |= bits(_mm_cmpeq_epi8(v, bs));
    m.bracket |= bits(_mm_or_si128(_mm_cmpeq_epi8(folded, ob), _mm_cmpeq_epi8(folded, cb)));
    m.hash |= bits(_mm_cmpeq_epi8(v, h));
  }
#else
  for (int i = 0; i < 64; ++i) {
    const uint64_t bit = uint64_t{1} << i;
    switch (p[i]) {
      case '"':
        m.quote |= bit;
        break;
      case '\\':
        m.backslash |= bit;
        break;
      case '{':
      case '[':
      case '}':
      case ']':
        m.bracket |= bit;
        break;
      case '#':
        m.hash |= bit;
        break;
      default:
        break;
    }
  }
#endif
  return m;
}

// Classifies `n` consecutive 64-byte blocks from `p` (the structural scanner reads blocks in
// runs, so the vector width of the machine pays off), with AVX2 where the CPU has it.
constexpr size_t kBatchBlocks = 8;
using ClassifyFn = void (*)(const unsigned char* p, size_t n, BlockMasks* out);

// Pass 1 is the first to touch the input and waits on memory at every page: prefetching a page
// ahead cut a tenth of analyze's CPU time.
constexpr size_t kPrefetchAhead = 4096;

void ClassifyBlocksBase(const unsigned char* p, size_t n, BlockMasks* out) {
  for (size_t b = 0; b < n; ++b) {
    __builtin_prefetch(p + 64 * b + kPrefetchAhead, 0, 3);
    out[b] = ClassifyBlock(p + 64 * b);
    out[b].quote_prefix = PrefixXor(out[b].quote);
  }
}

#if defined(PT_HAVE_AVX2_PATH)
// PrefixXor by carry-less multiplication with all ones: one instruction.
__attribute__((target("pclmul"))) inline uint64_t PrefixXorClmul(uint64_t x) {
  return static_cast<uint64_t>(_mm_cvtsi128_si64(
      _mm_clmulepi64_si128(_mm_set_epi64x(0, static_cast<int64_t>(x)), _mm_set1_epi8(-1), 0)));
}

#define PT_AVX2_BITS(l, u)                                                 \
  (static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(l))) | \
   static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(u))) << 32)
__attribute__((target("avx2,pclmul"))) void ClassifyBlocksAvx2(const unsigned char* p, size_t n,
                                                               BlockMasks* out) {
  const __m256i q = _mm256_set1_epi8('"'), bs = _mm256_set1_epi8('\\'), ob = _mm256_set1_epi8('{'),
                cb = _mm256_set1_epi8('}'), h = _mm256_set1_epi8('#'), x20 = _mm256_set1_epi8(0x20);
  for (size_t b = 0; b < n; ++b, p += 64) {
    __builtin_prefetch(p + kPrefetchAhead, 0, 3);
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));

    const __m256i flo = _mm256_or_si256(lo, x20), fhi = _mm256_or_si256(hi, x20);
    out[b].quote = PT_AVX2_BITS(_mm256_cmpeq_epi8(lo, q), _mm256_cmpeq_epi8(hi, q));
    out[b].backslash = PT_AVX2_BITS(_mm256_cmpeq_epi8(lo, bs), _mm256_cmpeq_epi8(hi, bs));
    out[b].bracket =
        PT_AVX2_BITS(_mm256_or_si256(_mm256_cmpeq_epi8(flo, ob), _mm256_cmpeq_epi8(flo, cb)),
                     _mm256_or_si256(_mm256_cmpeq_epi8(fhi, ob), _mm256_cmpeq_epi8(fhi, cb)));
    out[b].hash = PT_AVX2_BITS(_mm256_cmpeq_epi8(lo, h), _mm256_cmpeq_epi8(hi, h));
    out[b].quote_prefix = PrefixXorClmul(out[b].quote);
  }
}

// AVX-512BW compares give the 64-bit masks directly; the AVX2 version spends much of its time
// joining two 32-bit halves.
__attribute__((target("avx512f,avx512bw,pclmul"))) void ClassifyBlocksAvx512(const unsigned char* p,
                                                                             size_t n,
                                                                             BlockMasks* out) {
  const __m512i q = _mm512_set1_epi8('"'), bs = _mm512_set1_epi8('\\'), ob = _mm512_set1_epi8('{'),
                cb = _mm512_set1_epi8('}'), h = _mm512_set1_epi8('#'), x20 = _mm512_set1_epi8(0x20);
  for (size_t b = 0; b < n; ++b, p += 64) {
    __builtin_prefetch(p + kPrefetchAhead, 0, 3);
    const __m512i v = _mm512_loadu_si512(p);
    const __m512i f = _mm512_or_si512(v, x20);  // '[' | 0x20 == '{', ']' | 0x20 == '}'
    out[b].quote = _mm512_cmpeq_epi8_mask(v, q);
    out[b].backslash = _mm512_cmpeq_epi8_mask(v, bs);
    out[b].bracket = _mm512_cmpeq_epi8_mask(f, ob) | _mm512_cmpeq_epi8_mask(f, cb);
    out[b].hash = _mm512_cmpeq_epi8_mask(v, h);
    out[b].quote_prefix = PrefixXorClmul(out[b].quote);
  }
}

// The classifier for `level` (ReaderTuning::classifier), or null when this CPU cannot run it.
ClassifyFn Classifier(int level) {
  __builtin_cpu_init();
  const bool clmul = __builtin_cpu_supports("pclmul");
  switch (level) {
    case 0:
      return ClassifyBlocksBase;
    case 1:
      return clmul && __builtin_cpu_supports("avx2") ? ClassifyBlocksAvx2 : nullptr;
    case 2:
      return clmul && __builtin_cpu_supports("avx512bw") ? ClassifyBlocksAvx512 : nullptr;
    default:
      for (int l = 2; l > 0; --l) {
        if (ClassifyFn f = Classifier(l)) return f;
      }
      return ClassifyBlocksBase;
  }
}
#else
ClassifyFn Classifier(int level) { return level <= 0 ? ClassifyBlocksBase : nullptr; }
#endif

const ClassifyFn kBestClassifier = Classifier(-1);

// The bytes escaped by a backslash, given the backslashes of a block of `avail` (1..64) valid
// bytes and whether its first byte is escaped by the block before. *next_escaped says whether
// the byte just past the valid ones is escaped. (simdjson's odd-backslash-run trick.)
inline uint64_t EscapedBytes(uint64_t backslash, uint64_t prev_escaped, size_t avail,
                             uint64_t* next_escaped) {
  if (backslash == 0 && prev_escaped == 0) {
    *next_escaped = 0;
    return 0;
  }
  constexpr uint64_t kEven = 0x5555555555555555ull;
  backslash &= ~prev_escaped;
  const uint64_t follows = (backslash << 1) | prev_escaped;
  const uint64_t odd_starts = backslash & ~kEven & ~follows;
  uint64_t seq;
  const bool overflow = __builtin_add_overflow(odd_starts, backslash, &seq);
  const uint64_t escaped = (kEven ^ (seq << 1)) & follows;
  *next_escaped = avail >= 64 ? static_cast<uint64_t>(overflow) : (escaped >> avail) & 1;
  return escaped;
}

// ---------------------------------------------------------------------------------------------
// Pass 1.

struct Pass1Result {
  TraceMeta meta;
  bool rank_from_trace = false;
  bool have_events = false;
  std::vector<uint64_t> cuts;  // event starts that open each pass-2 segment
  uint64_t events_end = 0;     // offset of the ']' closing the event array
  uint64_t bytes = 0;
  // Metadata values that cannot be right (left unset), counted with the malformed events.
  uint64_t bad_metadata = 0;
  uint64_t first_bad_metadata_byte = 0;
  const char* first_bad_metadata = nullptr;
};

class Pass1 {
 public:
  Pass1(const std::string& name, const ReaderTuning& tuning, Pass1Result* out)
      : name_(name),
        tuning_(tuning),
        out_(out),
        classify_(tuning.classifier < 0 ? kBestClassifier : Classifier(tuning.classifier)) {
    if (classify_ == nullptr) classify_ = kBestClassifier;
  }

  // `map` (with `map_size` bytes and kPad more after them) is the whole input when the source is
  // mapped; null to stream it through Read.
  Status Run(ByteSource* src, const char* map, size_t map_size) {
    const size_t read = std::max<size_t>(tuning_.read_bytes, 1);
    stack_.reserve(64);
    if (map != nullptr) {
      // The bytes are all there: scan them a read's worth at a time, handing back pages once
      // they are behind the scan and no value being captured still needs them.
      data_ = map;
      size_t released = 0;
      size_t ahead = 0;  // bytes hinted to the source as read next
      while (len_ < map_size) {
        if (len_ >= ahead) {
          ahead = std::min(map_size, len_ + std::max(tuning_.release_bytes, read));
          if (!src->WillRead(len_, ahead))
            return DataLoss(name_ + ": file changed while being read");
        }
        if (keep_from_ != kNone && len_ - keep_from_ > tuning_.max_value_bytes) {
          return Error(keep_from_, "a single value is larger than " +
                                       std::to_string(tuning_.max_value_bytes >> 20) + " MiB");
        }
        const size_t from = len_;
        len_ = std::min(map_size, len_ + read);
        PT_RETURN_IF_ERROR(Scan(from));
        const size_t done = keep_from_ == kNone ? len_ : static_cast<size_t>(keep_from_);
        if (done - released >= tuning_.release_bytes) {
          src->Release(released, done);
          released = done;
        }
      }
      src->Release(released, len_);
      return Finish();
    }
    buf_.resize(read + kPad);
    data_ = buf_.data();
    for (;;) {
      // Keep the bytes of whatever value is still being captured; drop the rest.
      if (keep_from_ != kNone) {
        const size_t drop = static_cast<size_t>(keep_from_ - base_);
        std::memmove(buf_.data(), buf_.data() + drop, len_ - drop);
        base_ += drop;
        len_ -= drop;
      } else {
        base_ += len_;
        len_ = 0;
      }
      if (len_ + read + kPad > buf_.size()) {
        if (len_ > tuning_.max_value_bytes) {
          return Error(base_, "a single value is larger than " +
                                  std::to_string(tuning_.max_value_bytes >> 20) + " MiB");
        }
        buf_.resize(std::max(buf_.size() * 2, len_ + read + kPad));
        data_ = buf_.data();
      }
      StatusOr<size_t> n = src->Read(buf_.data() + len_, read);
      if (!n.ok()) return Status(n.status().code(), name_ + ": " + n.status().message());
      if (*n == 0) break;
      const size_t from = len_;
      len_ += *n;
      PT_RETURN_IF_ERROR(Scan(from));
    }
    return Finish();
  }

 private:
  Status Finish() {
    const uint64_t total = base_ + len_;
    out_->bytes = total;
    if (top_ == kTopStart) return InvalidArgument(name_ + ": empty file");
    if (top_ != kTopDone || in_string_) return Error(total, "unexpected end of input");
    if (!out_->meta.legacy_format && !out_->have_events) {
      return InvalidArgument(name_ + ": no traceEvents array");
    }
    out_->events_end = events_end_;
    return Status::Ok();
  }

  enum Top : uint8_t {
    kTopStart,
    kTopKey,
    kTopColon,
    kTopValue,
    kTopInValue,
    kTopAfterValue,
    kTopDone
  };

  uint64_t Abs(size_t i) const { return base_ + i; }
  const char* At(uint64_t abs) const { return data_ + (abs - base_); }

  Status Error(uint64_t at, const std::string& what) const {
    return InvalidArgument(name_ + ": malformed JSON at byte " + std::to_string(at) + ": " + what);
  }

  Status Push(char c, uint64_t at) {
    if (stack_.size() >= kMaxDepth) return Error(at, "nesting deeper than 1024");
    stack_.push_back(c == '{' ? '}' : ']');
    return Status::Ok();
  }
  Status Pop(char c, uint64_t at) {
    if (stack_.empty() || stack_.back() != c) {
      return Error(at, std::string("unexpected '") + c + "'");
    }
    stack_.pop_back();
    return Status::Ok();
  }

  Status Scan(size_t from) {
    batch_n_ = 0;  // the bytes past the last scan's end were not there yet
    const auto* p = reinterpret_cast<const unsigned char*>(data_) + from;
    const auto* const begin = reinterpret_cast<const unsigned char*>(data_);
    const auto* const end = begin + len_;
    while (p < end) {
      if (stack_.size() > fast_depth_ && !slow_nested_) {
        PT_RETURN_IF_ERROR(Nested(p, begin, end));
        continue;
      }
      if (in_string_) {
        if (escape_) {
          escape_ = false;
          ++p;
          continue;
        }
        p = SkipInString(p, end);
        if (p == end) break;
        const unsigned char c = *p++;
        if (c == '\\') {
          escape_ = true;
        } else if (c == '#') {
          if (events_active_ && stack_.size() > ev_depth_) candidate_ = true;
        } else {
          in_string_ = false;
          if (stack_.size() <= fast_depth_) PT_RETURN_IF_ERROR(StringEnd(Abs(p - begin)));
        }
        continue;
      }
      if (stack_.size() > fast_depth_) {
        // Inside an event or a nested top-level value: only strings and brackets matter here;
        // simdjson validates the rest when it parses the value. Strings are skipped inline.
        for (;;) {
          p = SkipOrdinary(p, end);
          if (p == end) break;
          const unsigned char c = *p++;
          if (c == '"') {
            for (;;) {
              p = SkipInString(p, end);
              if (p == end) {
                in_string_ = true;
                break;
              }
              const unsigned char sc = *p++;
              if (sc == '"') break;
              if (sc == '#') {
                if (events_active_ && stack_.size() > ev_depth_) candidate_ = true;
                continue;
              }
              if (p == end) {  // a backslash ends the chunk: its escapee comes next time
                in_string_ = true;
                escape_ = true;
                break;
              }
              ++p;
            }
            if (in_string_) break;
            continue;
          }
          if (c == '{' || c == '[') {
            if (stack_.size() >= kMaxDepth) return Error(Abs(p - 1 - begin), "nesting too deep");
            stack_.push_back(c == '{' ? '}' : ']');
            continue;
          }
          if (stack_.back() != c)
            return Error(Abs(p - 1 - begin),
                         std::string("unexpected '") + static_cast<char>(c) + "'");
          stack_.pop_back();
          if (stack_.size() == fast_depth_) {
            PT_RETURN_IF_ERROR(NestedEnd(Abs(p - begin)));
            break;
          }
        }
        continue;
      }
      PT_RETURN_IF_ERROR(Slow(*p, Abs(p - begin)));
      ++p;
    }
    return Status::Ok();
  }

  // Inside an event or a nested top-level value (depth > fast_depth_), 64 bytes at a time: only
  // strings and brackets matter here; simdjson validates the rest when it parses the value.
  // Advances `p` to `end`, or to just past the bracket that closes the value (after handling
  // it). A backslash outside a string (broken JSON) hands the rest of the value to the
  // byte-at-a-time loop in Scan, which reports errors exactly as it always has.
  Status Nested(const unsigned char*& p, const unsigned char* begin, const unsigned char* end) {
    uint64_t in_str = in_string_ ? ~uint64_t{0} : 0;
    uint64_t esc = escape_ ? 1 : 0;
    const bool track_hash = events_active_;
    while (p < end) {
      const size_t avail = static_cast<size_t>(end - p);
      const uint64_t valid = avail >= 64 ? ~uint64_t{0} : (uint64_t{1} << avail) - 1;
      // Masks come from a batch classified ahead, while the blocks follow each other.
      if (p != batch_next_ || batch_i_ >= batch_n_) {
        batch_n_ = std::min(kBatchBlocks, (avail + 63) / 64);
        batch_i_ = 0;
        classify_(p, batch_n_, batch_);
      }
      const BlockMasks& m = batch_[batch_i_++];
      batch_next_ = p + 64;
      uint64_t escaped = 0;
      uint64_t next_esc = 0;
      uint64_t str;  // string bytes and opening quotes
      if (avail >= 64 && (m.backslash | esc) == 0) {
        // A whole block with nothing escaped (the common case): the classifier's prefix XOR is
        // the string mask, and a block without brackets only carries the string state on.
        str = m.quote_prefix ^ in_str;
        if (m.bracket == 0) {
          if (track_hash && (m.hash & str) != 0) candidate_ = true;
          in_str = static_cast<uint64_t>(static_cast<int64_t>(str) >> 63);
          p += 64;
          continue;
        }
      } else {
        const uint64_t backslash = m.backslash & valid;
        escaped = EscapedBytes(backslash, esc, avail, &next_esc);
        const uint64_t quote = m.quote & valid & ~escaped;
        str = PrefixXor(quote) ^ in_str;
        if ((backslash & ~str) != 0) {
          in_string_ = in_str != 0;
          escape_ = esc != 0;
          slow_nested_ = true;
          return Status::Ok();
        }
      }
      uint64_t hash = track_hash ? (m.hash & valid & str & ~escaped) : 0;
      const size_t in_block = std::min<size_t>(avail, 64);
      uint64_t structural = m.bracket & valid & ~str;
      while (structural != 0) {
        const int i = __builtin_ctzll(structural);
        structural &= structural - 1;
        const unsigned char c = p[i];
        if (c == '{' || c == '[') {
          if (stack_.size() >= kMaxDepth) return Error(Abs(p + i - begin), "nesting too deep");
          stack_.push_back(c == '{' ? '}' : ']');
          continue;
        }
        if (stack_.back() != c) {
          return Error(Abs(p + i - begin),
                       std::string("unexpected '") + static_cast<char>(c) + "'");
        }
        stack_.pop_back();
        if (stack_.size() == fast_depth_) {
          const uint64_t upto = (uint64_t{2} << i) - 1;  // bits 0..i (all of them for i = 63)
          if ((hash & upto) != 0) candidate_ = true;
          if (events_active_) {
            // The common case between events, `}, {` with whitespace around the comma inside
            // this block: end this event and start the next one right here, keeping the block's
            // masks (nothing between the two brackets is a quote or a bracket).
            const size_t j = NextObjectInBlock(p, static_cast<size_t>(i) + 1, in_block);
            if (j != 0) {
              hash &= ~upto;
              PT_RETURN_IF_ERROR(NestedEnd(Abs(p + i + 1 - begin)));
              expect_element_ = true;
              ElementStart(Abs(p + j - begin), true);
              stack_.push_back('}');         // back to the depth just closed, which was allowed
              structural &= structural - 1;  // that '{' is bit j, the next one set
              continue;
            }
          }
          p += i + 1;
          in_string_ = false;
          escape_ = false;
          return NestedEnd(Abs(p - begin));
        }
      }
      if (hash != 0) candidate_ = true;
      in_str = static_cast<uint64_t>(static_cast<int64_t>(str) >> 63);
      esc = next_esc;
      p += std::min<size_t>(avail, 64);
    }
    in_string_ = in_str != 0;
    escape_ = esc != 0;
    return Status::Ok();
  }

  // With p[k - 1] the '}' closing an event, the position of the '{' opening the next one when
  // only whitespace, one ',' and whitespace lie between them, all before p[n]; 0 otherwise.
  static size_t NextObjectInBlock(const unsigned char* p, size_t k, size_t n) {
    while (k < n && kTables.cls[p[k]] == kWs) ++k;
    if (k >= n || p[k] != ',') return 0;
    ++k;
    while (k < n && kTables.cls[p[k]] == kWs) ++k;
    if (k >= n || p[k] != '{') return 0;
    return k;
  }

  // A string closed at a depth we track (`end` is just past its closing quote).
  Status StringEnd(uint64_t end) {
    if (events_active_) {
      if (stack_.size() == ev_depth_) ElementEnd(end);  // a string as an event: pass 2 counts it
      return Status::Ok();
    }
    if (top_ == kTopKey) {
      key_.assign(At(key_start_), static_cast<size_t>(end - 1 - key_start_));
      keep_from_ = kNone;
      top_ = kTopColon;
      return Status::Ok();
    }
    if (top_ == kTopInValue) return ValueEnd(end);
    return Status::Ok();
  }

  // A nested object/array closed back to the depth we track.
  Status NestedEnd(uint64_t end) {
    slow_nested_ = false;
    if (events_active_) {
      ElementEnd(end);
      return Status::Ok();
    }
    return ValueEnd(end);
  }

  void ElementStart(uint64_t at, bool keep) {
    expect_element_ = false;
    ++elements_;
    element_start_ = at;
    if (keep) keep_from_ = at;  // scalars need no bytes kept: they never reach ElementEnd
    candidate_ = false;
    if (out_->cuts.empty() || at - out_->cuts.back() >= tuning_.segment_bytes) {
      out_->cuts.push_back(at);
    }
  }

  void ElementEnd(uint64_t end) {
    keep_from_ = kNone;
    if (candidate_) ParseCandidate(element_start_, end);
    candidate_ = false;
  }

  // One byte at a depth where the top-level object or the event array is being walked.
  Status Slow(unsigned char c, uint64_t at) {
    const uint8_t k = kTables.cls[c];
    if (events_active_) {
      switch (k) {
        case kWs:
          return Status::Ok();
        case kComma:
          if (expect_element_) return Error(at, "unexpected ',' in the event array");
          expect_element_ = true;
          return Status::Ok();
        case kClose:
          if (c == ']' && expect_element_ && elements_ > 0) {
            return Error(at, "trailing ',' in the event array");
          }
          PT_RETURN_IF_ERROR(Pop(static_cast<char>(c), at));
          events_active_ = false;
          events_end_ = at;
          keep_from_ = kNone;
          if (out_->meta.legacy_format) {
            top_ = kTopDone;
            fast_depth_ = 0;
          } else {
            top_ = kTopAfterValue;
            fast_depth_ = 1;
          }
          return Status::Ok();
        case kColon:
          return Error(at, "unexpected ':' in the event array");
        default:
          if (!expect_element_) {
            if (k == kOrd) return Status::Ok();  // rest of a scalar; simdjson judges it
            return Error(at, "missing ',' between events");
          }
          ElementStart(at, k == kOpen || k == kQuote);
          if (k == kOpen) return Push(static_cast<char>(c), at);
          if (k == kQuote) in_string_ = true;
          return Status::Ok();
      }
    }
    if (stack_.empty()) {  // depth 0
      if (k == kWs) return Status::Ok();
      if (top_ == kTopDone) return Error(at, "unexpected data after the top-level value");
      if (at == 0 && c == 0xef) {  // UTF-8 byte order mark
        bom_ = 1;
        return Status::Ok();
      }
      if (bom_ > 0 && bom_ < 3 && at == static_cast<uint64_t>(bom_)) {
        ++bom_;
        return Status::Ok();
      }
      top_ = kTopKey;  // anything but whitespace: the file is not empty
      if (c == '{') return Push('{', at);
      if (c == '[') {
        out_->meta.legacy_format = true;
        PT_RETURN_IF_ERROR(Push('[', at));
        StartEvents();
        return Status::Ok();
      }
      const char* type = TypeName(c);
      if (type == nullptr) return Error(at, "unexpected character");
      return InvalidArgument(name_ + ": top-level value is " + type +
                             ", expected an object with traceEvents or a list of events");
    }
    // Depth 1 of a Kineto object.
    switch (top_) {
      case kTopKey:
        if (k == kWs) return Status::Ok();
        if (c == '"') {
          in_string_ = true;
          key_start_ = at + 1;
          keep_from_ = at;
          return Status::Ok();
        }
        if (c == '}') return CloseTop(at);
        return Error(at, "expected a key");
      case kTopColon:
        if (k == kWs) return Status::Ok();
        if (c == ':') {
          top_ = kTopValue;
          return Status::Ok();
        }
        return Error(at, "expected ':'");
      case kTopValue:
        if (k == kWs) return Status::Ok();
        if (k == kClose || k == kComma || k == kColon) return Error(at, "expected a value");
        if (key_ == "traceEvents") {
          if (c != '[') {
            return InvalidArgument(name_ + ": traceEvents is " +
                                   (TypeName(c) ? TypeName(c) : "not a value") +
                                   ", expected an array");
          }
          PT_RETURN_IF_ERROR(Push('[', at));
          StartEvents();
          top_ = kTopInValue;
          return Status::Ok();
        }
        value_start_ = at;
        capture_ = IsMetaKey(key_);
        if (capture_) keep_from_ = at;
        top_ = kTopInValue;
        if (k == kQuote) in_string_ = true;
        if (k == kOpen) return Push(static_cast<char>(c), at);
        return Status::Ok();
      case kTopInValue:  // a scalar at depth 1
        if (k == kWs || k == kComma || c == '}') {
          PT_RETURN_IF_ERROR(ValueEnd(at));
          return Slow(c, at);
        }
        return Status::Ok();
      case kTopAfterValue:
        if (k == kWs) return Status::Ok();
        if (c == ',') {
          top_ = kTopKey;
          return Status::Ok();
        }
        if (c == '}') return CloseTop(at);
        return Error(at, "expected ',' or '}'");
      default:
        return Error(at, "unexpected character");
    }
  }

  Status CloseTop(uint64_t at) {
    PT_RETURN_IF_ERROR(Pop('}', at));
    top_ = kTopDone;
    fast_depth_ = 0;
    return Status::Ok();
  }

  void StartEvents() {
    out_->have_events = true;
    events_active_ = true;
    ev_depth_ = stack_.size();
    fast_depth_ = ev_depth_;
    expect_element_ = true;
    elements_ = 0;
  }

  static bool IsMetaKey(const std::string& key) {
    return key == "distributedInfo" || key == "deviceProperties" || key == "baseTimeNanoseconds" ||
           key == "host_name" || key == "hostname";
  }

  Status ValueEnd(uint64_t end) {
    top_ = kTopAfterValue;
    if (!capture_) return Status::Ok();
    capture_ = false;
    keep_from_ = kNone;
    return ParseMeta(value_start_, end);
  }

  // Copies [start, end) into a padded scratch buffer for simdjson.
  std::string_view Scratch(uint64_t start, uint64_t end) {
    const size_t n = static_cast<size_t>(end - start);
    if (scratch_.size() < n + kPad) scratch_.resize(n + kPad);
    std::memcpy(scratch_.data(), At(start), n);
    std::memset(scratch_.data() + n, ' ', kPad);
    return std::string_view(scratch_.data(), n);
  }

  // A metadata value that cannot be right: counted with the malformed events and left unset.
  void BadMetadata(uint64_t start, const char* why) {
    if (out_->bad_metadata++ == 0) {
      out_->first_bad_metadata_byte = start;
      out_->first_bad_metadata = why;
    }
  }

  Status MetaError(uint64_t start, simdjson::error_code e) {
    return Error(start, std::string("in ") + key_ + ": " + simdjson::error_message(e));
  }

  Status ParseMeta(uint64_t start, uint64_t end) {
    std::string_view text = Scratch(start, end);
    od::document doc;
    auto err = parser_.iterate(text.data(), text.size(), scratch_.size()).get(doc);
    if (err) return MetaError(start, err);
    TraceMeta& m = out_->meta;
    if (key_ == "baseTimeNanoseconds") {
      int64_t t;
      uint64_t u;
      double d;
      if (doc.get_int64().get(t) == simdjson::SUCCESS) {
        m.base_time_ns = t;
      } else if (doc.get_uint64().get(u) == simdjson::SUCCESS) {
        m.base_time_ns = static_cast<int64_t>(u >> 1);
      } else if (doc.get_double().get(d) == simdjson::SUCCESS && d > -9.2e18 && d < 9.2e18) {
        m.base_time_ns = static_cast<int64_t>(d);
      }
      return Status::Ok();
    }
    if (key_ == "host_name" || key_ == "hostname") {
      std::string_view s;
      if (doc.get_string().get(s) == simdjson::SUCCESS) m.host.assign(s);
      return Status::Ok();
    }
    if (key_ == "deviceProperties") {
      od::array arr;
      if (doc.get_array().get(arr) != simdjson::SUCCESS) return Status::Ok();
      m.devices.clear();
      for (auto el : arr) {
        od::object obj;
        if (auto e = el.get_object().get(obj)) {
          if (!IsValueError(e)) return MetaError(start, e);
          continue;
        }
        DeviceInfo d;
        for (auto f : obj) {
          if (auto e = f.error()) return MetaError(start, e);
          od::field& field = f.value_unsafe();
          const char* k = field.key().raw();
          od::value& v = field.value();
          int64_t i = 0;
          if (KeyIs(k, "id")) {
            if (ReadInt(v, &i)) d.id = static_cast<int>(i);
          } else if (KeyIs(k, "name")) {
            ReadText(v, &d.name);
          } else if (KeyIs(k, "numSms")) {
            if (ReadInt(v, &i)) d.num_sms = static_cast<int>(i);
          } else if (KeyIs(k, "computeMajor")) {
            if (ReadInt(v, &i)) d.compute_major = static_cast<int>(i);
          } else if (KeyIs(k, "computeMinor")) {
            if (ReadInt(v, &i)) d.compute_minor = static_cast<int>(i);
          }
        }
        m.devices.push_back(std::move(d));
      }
      return Status::Ok();
    }
    // distributedInfo
    od::object obj;
    if (doc.get_object().get(obj) != simdjson::SUCCESS) return Status::Ok();
    for (auto f : obj) {
      if (auto e = f.error()) return MetaError(start, e);
      od::field& field = f.value_unsafe();
      const char* k = field.key().raw();
      od::value& v = field.value();
      int64_t i = 0;
      if (KeyIs(k, "rank")) {
        if (ReadInt(v, &i)) {
          if (limits::ValidRank(i)) {
            m.rank = static_cast<int>(i);
            out_->rank_from_trace = true;
          } else {
            BadMetadata(start, "a distributedInfo.rank from 0 to 1048575");
          }
        }
      } else if (KeyIs(k, "world_size")) {
        if (ReadInt(v, &i)) {
          if (limits::ValidWorldSize(i))
            m.world_size = static_cast<int>(i);
          else
            BadMetadata(start, "a distributedInfo.world_size from 1 to 1048576");
        }
      } else if (KeyIs(k, "backend")) {
        ReadText(v, &m.backend);
      } else if (KeyIs(k, "nccl_version")) {
        ReadText(v, &m.nccl_version);
      } else if (KeyIs(k, "pg_config")) {
        od::array arr;
        if (v.get_array().get(arr) != simdjson::SUCCESS) continue;
        m.process_groups.clear();
        for (auto el : arr) {
          od::object pg_obj;
          if (auto e = el.get_object().get(pg_obj)) {
            if (!IsValueError(e)) return MetaError(start, e);
            continue;
          }
          ProcessGroup pg;
          for (auto pf : pg_obj) {
            if (auto e = pf.error()) return MetaError(start, e);
            od::field& pfield = pf.value_unsafe();
            const char* pk = pfield.key().raw();
            od::value pv = pfield.value();
            if (KeyIs(pk, "pg_name")) {
              ReadText(pv, &pg.name);
            } else if (KeyIs(pk, "pg_desc")) {
              ReadText(pv, &pg.desc);
            } else if (KeyIs(pk, "backend_config")) {
              ReadText(pv, &pg.backend);
            } else if (KeyIs(pk, "pg_size")) {
              if (ReadInt(pv, &i)) pg.size = static_cast<int>(i);
            } else if (KeyIs(pk, "ranks")) {
              ReadRanks(pv, &pg.ranks);
            }
          }
          if (pg.size == 0) pg.size = static_cast<int>(pg.ranks.size());
          m.process_groups.push_back(std::move(pg));
        }
      }
    }
    return Status::Ok();
  }

  // An event with a '#' in one of its strings: is it a ProfilerStep#N or Optimizer.step# span?
  // Parse errors are ignored here; pass 2 reports them.
  void ParseCandidate(uint64_t start, uint64_t end) {
    std::string_view text = Scratch(start, end);
    od::document doc;
    od::object obj;
    if (parser_.iterate(text.data(), text.size(), scratch_.size()).get(doc) ||
        doc.get_object().get(obj)) {
      return;
    }
    std::string_view name, cat, ph;
    bool has_name = false, has_cat = false, has_ts = false;
    Span span;
    for (auto f : obj) {
      if (f.error()) return;
      od::field& field = f.value_unsafe();
      const char* k = field.key().raw();
      od::value& v = field.value();
      if (KeyIs(k, "name")) {
        has_name = v.get_string().get(name) == simdjson::SUCCESS;
      } else if (KeyIs(k, "cat")) {
        has_cat = v.get_string().get(cat) == simdjson::SUCCESS;
      } else if (KeyIs(k, "ph")) {
        if (v.get_string().get(ph)) return;
      } else if (KeyIs(k, "ts")) {
        has_ts = v.get_double().get(span.ts_us) == simdjson::SUCCESS;
      } else if (KeyIs(k, "dur")) {
        if (v.get_double().get(span.dur_us)) span.dur_us = 0;
      } else if (KeyIs(k, "tid")) {
        ReadId(v, &span.tid);
      }
    }
    if (!has_name || !has_ts || ph != "X") return;
    if (has_cat && !EqualsIgnoreCase(cat, "user_annotation") && !EqualsIgnoreCase(cat, "cpu_op") &&
        !EqualsIgnoreCase(cat, "record_function") && !EqualsIgnoreCase(cat, "operator")) {
      return;  // e.g. the gpu_user_annotation copy of ProfilerStep#N on the GPU timeline
    }
    if (StartsWith(name, "ProfilerStep#")) {
      int64_t n = -1;
      for (char c : name.substr(13)) {
        if (c < '0' || c > '9' || n > (int64_t{1} << 50)) break;
        n = (n < 0 ? 0 : n) * 10 + (c - '0');
      }
      if (n < 0) return;
      span.step = n;
      out_->meta.profiler_steps.push_back(span);
    } else if (StartsWith(name, "Optimizer.step#")) {
      out_->meta.optimizer_steps.push_back(span);
    }
  }

  const std::string& name_;
  const ReaderTuning& tuning_;
  Pass1Result* out_;
  ClassifyFn classify_;

  std::vector<char> buf_;       // streamed input
  const char* data_ = nullptr;  // buf_.data(), or the mapped input
  uint64_t base_ = 0;           // offset of data_[0] in the stream
  size_t len_ = 0;
  uint64_t keep_from_ = kNone;

  // Block masks classified ahead by Nested: batch_[batch_i_] describes the 64 bytes at
  // batch_next_ (when Nested goes on there), the next ones the blocks after it.
  BlockMasks batch_[kBatchBlocks];
  const unsigned char* batch_next_ = nullptr;
  size_t batch_i_ = 0;
  size_t batch_n_ = 0;

  std::vector<char> stack_;  // expected closing brackets
  bool in_string_ = false;
  bool escape_ = false;
  bool slow_nested_ = false;  // the byte loop, not Nested, handles the value being walked
  int bom_ = 0;
  Top top_ = kTopStart;
  size_t fast_depth_ = 1;  // deeper than this, only strings and brackets are tracked

  std::string key_;
  uint64_t key_start_ = 0;
  uint64_t value_start_ = 0;
  bool capture_ = false;

  bool events_active_ = false;
  size_t ev_depth_ = 0;
  bool expect_element_ = false;
  uint64_t elements_ = 0;
  uint64_t element_start_ = 0;
  bool candidate_ = false;
  uint64_t events_end_ = 0;

  std::string scratch_;
  od::parser parser_;
};

// ---------------------------------------------------------------------------------------------
// Pass 2.

class Pass2 {
 public:
  Pass2(const std::string& name, const ReaderTuning& tuning, EventSink* sink, ReadStats* stats)
      : name_(name), tuning_(tuning), sink_(sink), stats_(stats) {}

  // `map` (with `map_size` bytes and kPad more after them) is the whole input when the source is
  // mapped; null to stream it through Read. Segments are then framed and parsed in place.
  Status Run(ByteSource* src, const Pass1Result& p1, char* map, size_t map_size) {
    src_ = src;
    const auto& cuts = p1.cuts;
    size_t released = 0;
    uint64_t ahead = 0;  // bytes hinted to the source as read next
    for (size_t i = 0; i < cuts.size(); ++i) {
      const uint64_t s = cuts[i];
      const uint64_t e = i + 1 < cuts.size() ? cuts[i + 1] : p1.events_end;
      if (map != nullptr) {
        if (e + kPad > ahead) {
          ahead = std::max<uint64_t>(e + kPad, s + tuning_.release_bytes);
          if (!src->WillRead(static_cast<size_t>(s - 1), static_cast<size_t>(ahead))) {
            return DataLoss(name_ + ": file changed while being read");
          }
        }
        // Pass 1 checked that the events lie inside the input and start after its first byte.
        win_ = map;
        win_base_ = 0;
        win_len_ = map_size;
        seg_ = map + s;
        seg_cap_ = map_size + kPad - static_cast<size_t>(s - 1);
        const uint64_t next_end = i + 2 < cuts.size() ? cuts[i + 2] : p1.events_end;
        prefetch_ = map + e;
        prefetch_end_ = map + next_end;
      } else {
        PT_RETURN_IF_ERROR(Fill(s, e));
        win_ = seg_ = buf_.data() + start_;
        win_base_ = base_;
        win_len_ = len_;
        seg_cap_ = buf_.size() - (start_ - 1);
      }
      PT_RETURN_IF_ERROR(ParseSegment(s, e));
      if (map != nullptr && e - released >= tuning_.release_bytes) {
        src->Release(released, e);
        released = e;
      }
    }
    if (map != nullptr) src->Release(released, map_size);
    for (const auto& [cat, n] : unknown_cats_) stats_->unknown_cats[cat] += n;
    return Status::Ok();
  }

 private:
  // Makes buf_[start_..] hold stream bytes [s, e], plus room for padding. buf_[start_ - 1] is
  // free for the '[' that frames the segment (it held bytes of an earlier, finished segment).
  // Bytes are moved only when the buffer's tail has no room for another read, so a segment much
  // smaller than a read costs no copying.
  Status Fill(uint64_t s, uint64_t e) {
    const size_t read = std::max<size_t>(tuning_.read_bytes, 1);
    if (base_ + len_ <= s) {
      len_ = 0;
      base_ = pos_;
      start_ = 1;
    } else if (s > base_) {
      const size_t drop = static_cast<size_t>(s - base_);
      start_ += drop;
      base_ = s;
      len_ -= drop;
    }
    while (base_ + len_ <= e) {
      if (start_ + len_ + read + kPad > buf_.size()) {
        if (start_ > 1) {
          std::memmove(buf_.data() + 1, buf_.data() + start_, len_);
          start_ = 1;
        }
        const size_t need = 1 + len_ + read + kPad;
        if (buf_.size() < need) {
          buf_.resize(
              std::max({need, buf_.size() * 2, static_cast<size_t>(e - s) + 2 + read + kPad}));
        }
      }
      StatusOr<size_t> n = src_->Read(buf_.data() + start_ + len_, read);
      if (!n.ok()) return Status(n.status().code(), name_ + ": " + n.status().message());
      if (*n == 0) return DataLoss(name_ + ": file changed while being read");
      pos_ += *n;
      len_ += *n;
      if (base_ < s) {  // still before the segment: discard what was read
        const size_t drop = static_cast<size_t>(std::min<uint64_t>(s - base_, len_));
        start_ += drop;
        base_ += drop;
        len_ -= drop;
        if (len_ == 0) start_ = 1;
      }
    }
    return Status::Ok();
  }

  Status JsonError(const char* where, simdjson::error_code e, uint64_t fallback) {
    uint64_t at = fallback;
    const char* loc = nullptr;
    if (where != nullptr) loc = where;
    if (loc != nullptr && loc >= win_ && loc < win_ + win_len_) {
      at = win_base_ + static_cast<uint64_t>(loc - win_);
    }
    return InvalidArgument(name_ + ": malformed JSON at byte " + std::to_string(at) + ": " +
                           simdjson::error_message(e));
  }

  Status ParseSegment(uint64_t s, uint64_t e) {
    char* const seg = seg_;
    size_t t = static_cast<size_t>(e - s);
    // Drop the separator before the next segment's first event.
    while (t > 0 && kTables.cls[static_cast<uint8_t>(seg[t - 1])] == kWs) --t;
    if (t > 0 && seg[t - 1] == ',') --t;
    const size_t doc_len = t + 2;
    const char saved = seg[t];
    seg[-1] = '[';
    seg[t] = ']';
    Status st = ParseDocument(doc_len, s, /*repaired=*/false);
    seg[t] = saved;
    return st;
  }

  Status ParseDocument(size_t doc_len, uint64_t s, bool repaired) {
    od::document doc;
    od::array arr;
    // One parser per thread, kept across files: its index buffers are sized for a segment and
    // reallocating (and page-faulting) them for every trace costs more than parsing a small one.
    thread_local od::parser parser;
    char* const doc_start = seg_ - 1;
    auto err = parser.iterate(doc_start, doc_len, seg_cap_).get(doc);
    if (!err) err = doc.get_array().get(arr);
    if (err == simdjson::UTF8_ERROR && !repaired) {
      RepairUtf8(doc_start + 1, doc_len - 2);
      return ParseDocument(doc_len, s, true);
    }
    if (err) return JsonError(nullptr, err, s);
    for (auto el : arr) {
      if (auto e = el.error()) {
        const char* loc = nullptr;
        if (doc.current_location().get(loc)) loc = nullptr;
        return JsonError(loc, e, s);
      }
      od::value& v = el.value_unsafe();  // not a copy: see DecodeEvent
      // Mapped input: pull the next segment toward the cache while this one is decoded, so its
      // stage 1 does not wait on memory.
      if (prefetch_ < prefetch_end_) {
        for (int k = 0; k < 4; ++k) __builtin_prefetch(prefetch_ + 64 * k, 0, 2);
        prefetch_ += 256;
      }
      if (auto e = DecodeEvent(v)) {
        const char* loc = nullptr;
        if (doc.current_location().get(loc)) loc = nullptr;
        return JsonError(loc, e, s);
      }
      if (bad_why_ != nullptr) NoteFirstBad(doc, s);
    }
    return Status::Ok();
  }

  // Records where the first malformed event was found (off the hot path: only once per trace).
  void NoteFirstBad(od::document& doc, uint64_t fallback) {
    if (stats_->first_bad.empty()) {
      const char* loc = nullptr;
      if (doc.current_location().get(loc)) loc = nullptr;
      uint64_t at = fallback;
      if (loc != nullptr && loc >= win_ && loc < win_ + win_len_)
        at = win_base_ + static_cast<uint64_t>(loc - win_);
      stats_->first_bad_byte = at;
      stats_->first_bad = bad_why_;
    }
    bad_why_ = nullptr;
  }

  // Counts a malformed event; the first one's reason is kept (see NoteFirstBad).
  void Malformed(const char* why) {
    ++stats_->malformed_events;
    if (stats_->first_bad.empty()) bad_why_ = why;
  }

  // Decodes one element of the event array. Returns an error only when the JSON itself is broken;
  // events of the wrong shape are counted.
  [[gnu::always_inline]] simdjson::error_code DecodeEvent(od::value& v) {
    // On-Demand handles (value, object) are held by reference, not copied: a copy is built
    // from narrow stores and read back wide, a store-forwarding stall that once cost a sixth
    // of the whole run.
    auto as_object = v.get_object();
    if (auto e = as_object.error()) {
      if (!IsValueError(e)) return e;
      Malformed("an event object, found another JSON value");
      return simdjson::SUCCESS;
    }
    od::object& obj = as_object.value_unsafe();
    trace::Event ev;
    std::string_view ph, cat;
    bool has_cat = false, has_ts = false, has_name = false, bad = false, skip = false;
    const char* bad_key = nullptr;  // the first field of the wrong type
    for (auto f : obj) {
      if (auto e = f.error()) return e;
      od::field& field = f.value_unsafe();
      const char* k = field.key().raw();
      od::value& val = field.value();
      simdjson::error_code e = simdjson::SUCCESS;
      switch (k[0]) {
        case 'p':
          if (KeyIs(k, "ph")) {
            e = val.get_string().get(ph);
            skip = e == simdjson::SUCCESS && ph.size() == 1 && ph[0] != 'X';
          } else if (KeyIs(k, "pid")) {
            bad |= !ReadId(val, &ev.pid);
          }
          break;
        case 't':
          if (KeyIs(k, "ts")) {
            e = val.get_double().get(ev.ts_us);
            has_ts = e == simdjson::SUCCESS;
          } else if (KeyIs(k, "tid")) {
            bad |= !ReadId(val, &ev.tid);
          }
          break;
        case 'd':
          if (KeyIs(k, "dur")) e = val.get_double().get(ev.dur_us);
          break;
        case 'n':
          if (KeyIs(k, "name")) {
            e = val.get_string().get(ev.name);
            has_name = e == simdjson::SUCCESS;
          }
          break;
        case 'c':
          if (KeyIs(k, "cat")) {
            e = val.get_string().get(cat);
            has_cat = e == simdjson::SUCCESS;
          }
          break;
        case 'a':
          if (KeyIs(k, "args")) {
            od::object args;
            e = val.get_object().get(args);
            if (!e) e = Args(args, &ev);
          }
          break;
        default:
          break;
      }
      if (e) {
        if (!IsValueError(e)) return e;
        if (auto ce = CheckScalar(val)) return ce;  // `tru`, `1.2.3`: broken JSON, not a bad event
        bad = true;
        if (bad_key == nullptr) bad_key = k;
      }
      // Once "ph" (usually the first key) says this is not a complete event, nothing else of it
      // is needed: leaving the object here lets the array iterator skip the rest token by token,
      // cheaper than walking its fields. A third of Kineto's elements are flows.
      if (skip) break;
    }
    if (ph.size() != 1) {
      Malformed("a \"ph\" string of one letter");
      return simdjson::SUCCESS;
    }
    switch (ph[0]) {
      case 'X':
        break;
      case 's':
      case 'f':
      case 't':
        ++stats_->flow_events;
        return simdjson::SUCCESS;
      default:  // M, i, I, C and the rarer phases: metadata for a viewer, not work
        ++stats_->metadata_events;
        return simdjson::SUCCESS;
    }
    if (bad || !has_ts || !has_name) {
      Malformed(BadFieldReason(bad_key, has_ts));
      return simdjson::SUCCESS;
    }
    if (has_cat) {
      if (!KindFromCat(cat, &ev.kind)) {
        ev.kind = EventKind::kOther;
        ++stats_->unknown_kind;
        CountUnknownCat(cat);
      }
    } else {
      ev.kind = KindFromName(ev.name);
    }
    ++stats_->events;
    sink_->OnEvent(ev);
    return simdjson::SUCCESS;
  }

  // What a complete event lacked, for the first-bad-event message. KEY points into the input at
  // the field's key (its closing quote ends it).
  static const char* BadFieldReason(const char* key, bool has_ts) {
    if (key != nullptr) {
      if (KeyIs(key, "ts")) return "a number for \"ts\"";
      if (KeyIs(key, "dur")) return "a number for \"dur\"";
      if (KeyIs(key, "name")) return "a string for \"name\"";
      if (KeyIs(key, "cat")) return "a string for \"cat\"";
      if (KeyIs(key, "pid") || KeyIs(key, "tid")) return "a number or string for \"pid\"/\"tid\"";
      if (KeyIs(key, "args")) return "an object for \"args\"";
      return "fields of the right types";
    }
    return has_ts ? "a \"name\" string" : "a \"ts\" number";
  }

  // On-demand parsing reports a misspelt literal as a type mismatch; tell the two apart.
  static simdjson::error_code CheckScalar(od::value& v) {
    od::json_type t;
    if (auto e = v.type().get(t)) return e;
    switch (t) {
      case od::json_type::boolean: {
        bool b;
        return v.get_bool().get(b) ? simdjson::T_ATOM_ERROR : simdjson::SUCCESS;
      }
      case od::json_type::null: {
        bool n = false;
        return (v.is_null().get(n) || !n) ? simdjson::N_ATOM_ERROR : simdjson::SUCCESS;
      }
      case od::json_type::number: {
        double d;
        return v.get_double().get(d) ? simdjson::NUMBER_ERROR : simdjson::SUCCESS;
      }
      default:
        return simdjson::SUCCESS;
    }
  }

  void CountUnknownCat(std::string_view cat) {
    for (auto& [c, n] : unknown_cats_) {
      if (c == cat) {
        ++n;
        return;
      }
    }
    if (unknown_cats_.size() < kMaxUnknownCats) {
      unknown_cats_.emplace_back(std::string(cat), 1);
    } else {
      CountUnknownCat("(other)");
    }
  }

  static simdjson::error_code Args(od::object& args, trace::Event* ev) {
    for (auto f : args) {
      if (auto e = f.error()) return e;
      od::field& field = f.value_unsafe();
      const char* k = field.key().raw();
      od::value& v = field.value();
      int64_t i;
      switch (k[0]) {
        case 'E':
          if (KeyIs(k, "External id") && ReadInt(v, &i)) ev->external_id = i;
          break;
        case 'c':
          if (KeyIs(k, "correlation") && ReadInt(v, &i)) ev->correlation = i;
          break;
        case 's':
          if (KeyIs(k, "stream") && ReadInt(v, &i)) ev->stream = static_cast<int32_t>(i);
          break;
        case 'd':
          if (KeyIs(k, "device")) {
            if (ReadInt(v, &i)) ev->device = static_cast<int32_t>(i);
          } else if (KeyIs(k, "dtype")) {
            if (v.get_string().get(ev->dtype)) {
            }
          }
          break;
        case 'C':
          if (KeyIs(k, "Collective name")) {
            if (v.get_string().get(ev->collective_name)) {
            }
          } else if (KeyIs(k, "Call stack")) {
            if (v.get_string().get(ev->call_stack)) {
            }
          }
          break;
        case 'I':
          if (KeyIs(k, "In msg nelems") && ReadInt(v, &i)) ev->in_msg_nelems = i;
          break;
        case 'O':
          if (KeyIs(k, "Out msg nelems") && ReadInt(v, &i)) ev->out_msg_nelems = i;
          break;
        case 'G':
          if (KeyIs(k, "Group size") && ReadInt(v, &i)) ev->group_size = static_cast<int32_t>(i);
          break;
        case 'P':
          if (KeyIs(k, "Process Group Ranks")) {
            if (v.get_string().get(ev->pg_ranks) != simdjson::SUCCESS) {
              od::array arr;
              if (v.get_array().get(arr) == simdjson::SUCCESS) {
                if (arr.raw_json().get(ev->pg_ranks)) {
                }
              }
            }
          } else if (KeyIs(k, "Process Group Name")) {
            if (v.get_string().get(ev->pg_name)) {
            }
          } else if (KeyIs(k, "Python id")) {
            if (ReadInt(v, &i)) ev->python_id = i;
          } else if (KeyIs(k, "Python parent id")) {
            if (ReadInt(v, &i)) ev->python_parent_id = i;
          }
          break;
        case 'b':
          if (KeyIs(k, "bytes") && ReadInt(v, &i)) ev->bytes = i;
          break;
        default:
          break;
      }
    }
    return simdjson::SUCCESS;
  }

  const std::string& name_;
  const ReaderTuning& tuning_;
  EventSink* sink_;
  ReadStats* stats_;
  const char* bad_why_ = nullptr;  // the malformed event just decoded, before its offset is known
  ByteSource* src_ = nullptr;

  std::vector<char> buf_;
  size_t start_ = 1;   // buf_[start_] holds stream byte base_
  uint64_t base_ = 0;  // stream offset of buf_[start_]
  size_t len_ = 0;
  uint64_t pos_ = 0;  // stream offset of the next byte the source yields
  // The segment being parsed: seg_ holds its first byte, seg_[-1] its framing '['; seg_cap_
  // bytes from seg_ - 1 are usable by simdjson. win_ holds stream bytes [win_base_,
  // win_base_ + win_len_), for locating errors.
  char* seg_ = nullptr;
  size_t seg_cap_ = 0;
  const char* prefetch_ = nullptr;  // mapped input: the next segment's bytes not yet prefetched
  const char* prefetch_end_ = nullptr;
  const char* win_ = nullptr;
  uint64_t win_base_ = 0;
  size_t win_len_ = 0;
  std::vector<std::pair<std::string, uint64_t>> unknown_cats_;
};

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsTraceFileName(const std::string& name) {
  auto ends = [&](std::string_view suffix) {
    return name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".json") || ends(".json.gz");
}

}  // namespace

namespace internal {

bool ClassifierSupported(int level) { return Classifier(level) != nullptr; }

StatusOr<ReadStats> ReadTraceFrom(const SourceOpener& open, const std::string& name,
                                  EventSink* sink, const ReadOptions& options,
                                  const ReaderTuning& tuning) {
  auto opened = [&]() -> StatusOr<std::unique_ptr<ByteSource>> {
    StatusOr<std::unique_ptr<ByteSource>> src = open();
    if (!src.ok()) return Status(src.status().code(), name + ": " + src.status().message());
    return src;
  };
  Pass1Result p1;
  // A mappable source (a plain file) is opened once and read in place by both passes.
  std::unique_ptr<ByteSource> mapped;
  char* map = nullptr;
  size_t map_size = 0;
  {
    PT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, opened());
    if (tuning.map) map = src->Map(kPad, &map_size);
    Pass1 pass1(name, tuning, &p1);
    PT_RETURN_IF_ERROR(pass1.Run(src.get(), map, map_size));
    if (map != nullptr) mapped = std::move(src);
  }
  TraceMeta& meta = p1.meta;
  meta.path = name;
  if (p1.rank_from_trace) {
    meta.rank_source = "distributedInfo";
  } else if (const int r = RankFromFileName(name); r >= 0) {
    meta.rank = r;
    meta.rank_source = "file name";
  } else if (options.rank_override >= 0) {
    meta.rank = options.rank_override;
    meta.rank_source = "override";
  } else {
    meta.rank = -1;
  }
  auto by_ts = [](const Span& a, const Span& b) { return a.ts_us < b.ts_us; };
  std::stable_sort(meta.profiler_steps.begin(), meta.profiler_steps.end(), by_ts);
  std::stable_sort(meta.optimizer_steps.begin(), meta.optimizer_steps.end(), by_ts);

  ReadStats stats;
  stats.bytes = p1.bytes;
  sink->OnBegin(meta);
  if (!p1.cuts.empty()) {
    Pass2 pass2(name, tuning, sink, &stats);
    if (mapped != nullptr) {
      PT_RETURN_IF_ERROR(pass2.Run(mapped.get(), p1, map, map_size));
    } else {
      PT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, opened());
      PT_RETURN_IF_ERROR(pass2.Run(src.get(), p1, nullptr, 0));
    }
  }
  static_assert(limits::kMaxWorldSize == 1048576, "the metadata messages name the limit");
  if (p1.bad_metadata > 0) {
    stats.malformed_events += p1.bad_metadata;
    if (stats.first_bad.empty()) {
      stats.first_bad_byte = p1.first_bad_metadata_byte;
      stats.first_bad = p1.first_bad_metadata;
    }
  }
  // Events of the wrong shape are counted and the trace is still read; a trace made only of them
  // is not a trace: it fails here, naming the first bad event.
  if (stats.events == 0 && stats.malformed_events > 0) {
    return InvalidArgument(
        fmt::format("{}: no event could be read: at byte {}, expected {} ({} malformed event{})",
                    name, stats.first_bad_byte, stats.first_bad, stats.malformed_events,
                    stats.malformed_events == 1 ? "" : "s"));
  }
  sink->OnEnd(stats);
  return stats;
}

}  // namespace internal

StatusOr<ReadStats> ReadTrace(const std::string& path, EventSink* sink,
                              const ReadOptions& options) {
  return internal::ReadTraceFrom([&] { return OpenFileSource(path); }, path, sink, options,
                                 internal::ReaderTuning{});
}

StatusOr<ReadStats> ReadTraceBuffer(std::string_view json, const std::string& name, EventSink* sink,
                                    const ReadOptions& options) {
  return internal::ReadTraceFrom(
      [&]() -> StatusOr<std::unique_ptr<ByteSource>> { return OpenMemorySource(json); }, name, sink,
      options, internal::ReaderTuning{});
}

int RankFromFileName(const std::string& path) {
  std::string base = BaseName(path);
  for (char& c : base) c = Lower(c);
  int found = -1;
  size_t at = 0;
  while ((at = base.find("rank", at)) != std::string::npos) {
    size_t i = at + 4;
    if (i < base.size() && (base[i] == '-' || base[i] == '_' || base[i] == '.')) ++i;
    int64_t r = -1;
    while (i < base.size() && base[i] >= '0' && base[i] <= '9' && r < 100000000) {
      r = (r < 0 ? 0 : r) * 10 + (base[i] - '0');
      ++i;
    }
    if (r >= 0) found = static_cast<int>(r);
    at += 4;
  }
  return found;
}

StatusOr<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& path : paths) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return NotFound(path + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
      out.push_back(path);
      continue;
    }
    DIR* dir = opendir(path.c_str());
    if (dir == nullptr)
      return InvalidArgument(path + ": cannot list folder: " + std::strerror(errno));
    std::vector<std::string> found;
    const std::string prefix = (!path.empty() && path.back() == '/') ? path : path + "/";
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (!IsTraceFileName(name)) continue;
      const std::string full = prefix + name;
      struct stat fst;
      if (stat(full.c_str(), &fst) == 0 && S_ISREG(fst.st_mode)) found.push_back(full);
    }
    closedir(dir);
    if (found.empty()) {
      return NotFound(path + ": folder holds no trace files (*.json, *.json.gz)");
    }
    out.insert(out.end(), found.begin(), found.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace perftracker::trace
