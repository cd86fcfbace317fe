// Bounded-memory duration distribution: a log-bucketed histogram whose buckets grow by 2%, so
// any quantile comes back within about 1% of a value that was really observed, whatever the
// number of calls. Only the bucket range actually hit is stored.
#ifndef PERFTRACKER_PATTERN_HISTOGRAM_H_
#define PERFTRACKER_PATTERN_HISTOGRAM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace perftracker::pattern {

class LogHistogram {
 public:
  static constexpr double kMinUs = 0.01;  // resolution floor; shorter durations share bucket 0
  static constexpr double kGrowth = 1.02;

  void Add(double v) {
    const int b = Bucket(v);
    if (counts_.empty()) {
      offset_ = b;
      counts_.assign(1, 0);
    } else if (b < offset_) {
      counts_.insert(counts_.begin(), static_cast<size_t>(offset_ - b), 0);
      offset_ = b;
    } else if (b >= offset_ + static_cast<int>(counts_.size())) {
      counts_.resize(static_cast<size_t>(b - offset_ + 1), 0);
    }
    ++counts_[static_cast<size_t>(b - offset_)];
    ++n_;
  }

  uint64_t count() const { return n_; }

  // Nearest-rank quantile, reported as the bucket's geometric middle clamped to the exact
  // observed [lo, hi].
  double Quantile(double q, double lo, double hi) const {
    if (n_ == 0) return 0;
    const uint64_t rank =
        std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(n_))));
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        const int b = offset_ + static_cast<int>(i);
        const double v = b == 0 ? lo : kMinUs * std::pow(kGrowth, b - 0.5);
        return std::clamp(v, lo, hi);
      }
    }
    return hi;
  }

  static int Bucket(double v) {
    if (!(v > kMinUs)) return 0;
    static const double kInvLogGrowth = 1.0 / std::log(kGrowth);
    const double b = std::floor(std::log(v / kMinUs) * kInvLogGrowth) + 1;
    return static_cast<int>(std::min(b, 4000.0));  // caps absurd values (~1e30 us)
  }

 private:
  int offset_ = 0;
  std::vector<uint32_t> counts_;
  uint64_t n_ = 0;
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_HISTOGRAM_H_
