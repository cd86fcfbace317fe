// Byte and block classification for the trace reader's structural scan (pass 1, see
// trace_scanner.h): simdjson's stage 1 in miniature. Owns the 64-byte block classifiers (SSE2 or
// a portable loop, AVX2 and AVX-512 where the CPU has them, picked at run time), the per-byte
// class table and the byte skips of the scanner's byte loop, and the padding every input buffer
// keeps past its end so that all of them (and simdjson) may read whole blocks there.
//
// A block's masks hold one bit per byte, bit i for byte i. For the 64 bytes `{"n":"a#b"}`
// followed by 53 spaces:
//   quote        = 0x22a  bytes 1, 3, 5, 9
//   bracket      = 0x401  bytes 0 and 10 (opening or closing, '{' '}' and '[' ']' alike)
//   hash         = 0x080  byte 7
//   backslash    = 0
//   quote_prefix = 0x1e6  bytes 1-2 and 5-8: inside a string (opening quotes included) when
//                         nothing in the block is escaped
// and EscapedBytes turns the backslash mask into the bytes those backslashes escape.
//
// Internal to the trace module.
#ifndef PERFTRACKER_TRACE_BLOCK_CLASSIFIER_H_
#define PERFTRACKER_TRACE_BLOCK_CLASSIFIER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace perftracker::trace::internal {

// Bytes of slack after the data in every buffer the reader scans or parses: simdjson's padding
// (SIMDJSON_PADDING, checked where simdjson is used), which also covers a 64-byte block read
// that starts just before the end.
inline constexpr size_t kPad = 64;

// ---------------------------------------------------------------------------------------------
// One byte at a time.

// Character classes for the structural scanner.
enum : uint8_t { kOrd = 0, kWs, kQuote, kOpen, kClose, kComma, kColon };

struct ByteTables {
  std::array<uint8_t, 256> cls{};   // slow path: every structural class
  std::array<uint8_t, 256> fast{};  // inside a nested value: only quotes and brackets matter
  std::array<uint8_t, 256> str{};   // inside a string: the bytes that stop a run
  constexpr ByteTables() {
    for (char c : {' ', '\t', '\n', '\r'}) cls[static_cast<uint8_t>(c)] = kWs;
    cls['"'] = fast['"'] = kQuote;
    cls['{'] = cls['['] = fast['{'] = fast['['] = kOpen;
    cls['}'] = cls[']'] = fast['}'] = fast[']'] = kClose;
    cls[','] = kComma;
    cls[':'] = kColon;
    str['"'] = str['\\'] = str['#'] = 1;
  }
};
inline constexpr ByteTables kTables{};

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

// ---------------------------------------------------------------------------------------------
// 64 bytes at a time.

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

// Classifies `n` consecutive 64-byte blocks from `p` (the structural scanner reads blocks in
// runs, so the vector width of the machine pays off). All 64 * n bytes must be readable.
using ClassifyFn = void (*)(const unsigned char* p, size_t n, BlockMasks* out);

// The classifier for `level` (ReaderTuning::classifier: 0 portable, 1 AVX2, 2 AVX-512, any other
// the best this CPU runs), or null when this CPU cannot run it.
ClassifyFn Classifier(int level);

// Classifier(-1), chosen once per process.
ClassifyFn BestClassifier();

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

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_BLOCK_CLASSIFIER_H_
