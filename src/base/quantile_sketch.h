// QuantileSketch: quantiles of a stream of positive numbers in bounded memory, with a relative
// error guarantee (DDSketch: Masson, Rim and Lee, VLDB 2019). A value v goes into the log bucket
// i = ceil(log_gamma(v)), gamma = (1 + a) / (1 - a); the bucket answers 2 gamma^i / (gamma + 1),
// within a relative a of every value in it, so any quantile is within a of the exact one.
// Buckets are kept as one dense run of counts between the lowest and the highest index seen, at
// most kMaxBuckets; a wider run folds its lowest buckets into the lowest kept one (only the low
// quantiles of a spread wider than the bound lose accuracy). Memory depends on the spread of the
// values, never on their number; two sketches merge exactly (the same as adding both streams).
// The server keeps one per rank for the run's iteration-time percentiles (server/rank_state.h).
#ifndef PERFTRACKER_BASE_QUANTILE_SKETCH_H_
#define PERFTRACKER_BASE_QUANTILE_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace perftracker {

class QuantileSketch {
 public:
  // 1%: a percentile of an iteration time is read against others that differ by a few percent
  // at least (the detector's level is 4%), and the bound costs ~116 buckets per decade.
  static constexpr double kRelativeAccuracy = 0.01;
  // 1,024 buckets of 1% span a factor of e^20 (5 x 10^8) between the lowest and the highest
  // value kept: from a microsecond to minutes of iteration time, at most 8 KB of counts.
  static constexpr int kMaxBuckets = 1024;
  // Values at or below this (zero, negatives, NaN) are counted as 0: no time we measure is that
  // short, and they would need buckets without end.
  static constexpr double kMinPositive = 1e-9;

  // V, N times.
  void Add(double v, uint64_t n = 1);
  // Everything OTHER holds, as if its values had been added here.
  void Merge(const QuantileSketch& other);
  // The value of order floor(Q x count) (the last for Q >= 1) of the values added, within
  // kRelativeAccuracy; 0 when empty.
  double Quantile(double q) const;

  uint64_t count() const { return count_; }
  // Buckets held now (at most kMaxBuckets) and the bytes they take, with the object itself.
  size_t buckets() const { return counts_.size(); }
  size_t bytes() const { return sizeof(*this) + counts_.capacity() * sizeof(uint64_t); }

  bool operator==(const QuantileSketch& o) const = default;

 private:
  static int Index(double v);
  static double Value(int index);
  // Counts index I N times, widening (and, past kMaxBuckets, folding) the run of buckets.
  void AddIndex(int i, uint64_t n);

  std::vector<uint64_t> counts_;  // counts_[k]: bucket offset_ + k
  int offset_ = 0;
  uint64_t zeros_ = 0;  // values at or below kMinPositive
  uint64_t count_ = 0;
};

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_QUANTILE_SKETCH_H_
