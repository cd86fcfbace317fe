// The block classifiers of block_classifier.h and their selection by CPU.
#include "trace/block_classifier.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PT_HAVE_AVX2_PATH 1
#endif

#include "trace/reader_internal.h"

namespace perftracker::trace::internal {
namespace {

// One block with SSE2, or byte by byte without it: the step of the portable classifier.
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

#endif  // PT_HAVE_AVX2_PATH

}  // namespace

#if defined(PT_HAVE_AVX2_PATH)
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

ClassifyFn BestClassifier() {
  static const ClassifyFn best = Classifier(-1);
  return best;
}

bool ClassifierSupported(int level) { return Classifier(level) != nullptr; }

}  // namespace perftracker::trace::internal
