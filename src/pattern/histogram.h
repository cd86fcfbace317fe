// Bounded-memory duration distribution: a log-bucketed histogram whose buckets grow by 2%, so
// any quantile comes back within about 1% of a value that was really observed, whatever the
// number of calls. Only the bucket range actually hit is stored.
#ifndef PERFTRACKER_PATTERN_HISTOGRAM_H_
#define PERFTRACKER_PATTERN_HISTOGRAM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/bucket_counts.h"

namespace perftracker::pattern {

class LogHistogram {
 public:
  static constexpr double kMinUs = 0.01;  // resolution floor; shorter durations share bucket 0
  static constexpr double kGrowth = 1.02;

  void Add(double v) { counts_.Add(Bucket(v)); }

  uint64_t count() const { return counts_.count(); }

  // Nearest-rank quantile, reported as the bucket's geometric middle clamped to the exact
  // observed [lo, hi].
  double Quantile(double q, double lo, double hi) const {
    const uint64_t n = counts_.count();
    if (n == 0) return 0;
    const uint64_t rank =
        std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(n))));
    const int b = counts_.BucketAtRank(rank);
    const double v = b == 0 ? lo : kMinUs * std::pow(kGrowth, b - 0.5);
    return std::clamp(v, lo, hi);
  }

  static int Bucket(double v) {
    if (!(v > kMinUs)) return 0;
    // A table-driven logarithm good to ~1e-11 decides the bucket unless the value lies within
    // 1e-6 of a bucket's edge (about one value in 10^5); only then std::log is called, so the
    // buckets are exactly those of the formula below.
    if (v < 1e15) {
      const double x = FastLog(v * (1 / kMinUs)) * kInvLogGrowth;
      const int f = static_cast<int>(x);  // truncation is floor here: x > 0 when it is used
      const double frac = x - f;
      if (x > 1e-6 && frac > 1e-6 && frac < 1 - 1e-6) return f + 1;
    }
    const double b = std::floor(std::log(v / kMinUs) * kInvLogGrowth) + 1;
    return static_cast<int>(std::min(b, 4000.0));  // caps absurd values (~1e30 us)
  }

 private:
  static inline const double kInvLogGrowth = 1.0 / std::log(kGrowth);

  // ln(y) for a normal y >= 1: y = 2^e * m0 * (1 + r) with m0 the mantissa cut to 8 bits, so
  // |r| < 2^-8 and four terms of ln(1 + r) leave an error below 1e-11.
  static double FastLog(double y) {
    struct Table {
      double log_m0[256], inv_m0[256];
      Table() {
        for (int i = 0; i < 256; ++i) {
          const double m0 = 1 + i / 256.0;
          log_m0[i] = std::log(m0);
          inv_m0[i] = 1 / m0;
        }
      }
    };
    static const Table t;
    uint64_t bits;
    std::memcpy(&bits, &y, sizeof bits);
    const int e = static_cast<int>(bits >> 52) - 1023;
    const int i = static_cast<int>((bits >> 44) & 0xff);
    uint64_t mbits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m;
    std::memcpy(&m, &mbits, sizeof m);
    const double r = (m - (1 + i / 256.0)) * t.inv_m0[i];
    const double l1p = r * (1 + r * (-0.5 + r * (1.0 / 3 + r * -0.25)));
    return e * 0.6931471805599453 + t.log_m0[i] + l1p;
  }

  BucketCounts counts_;
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_HISTOGRAM_H_
