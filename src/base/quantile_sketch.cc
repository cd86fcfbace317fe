#include "base/quantile_sketch.h"

#include <algorithm>
#include <cmath>

namespace perftracker {
namespace {

constexpr double kGamma =
    (1 + QuantileSketch::kRelativeAccuracy) / (1 - QuantileSketch::kRelativeAccuracy);
// Larger values (infinity) are counted here: log() of them has no bucket.
constexpr double kMaxValue = 1e300;

}  // namespace

int QuantileSketch::Index(double v) {
  static const double inv_log_gamma = 1 / std::log(kGamma);
  return static_cast<int>(std::ceil(std::log(std::min(v, kMaxValue)) * inv_log_gamma));
}

double QuantileSketch::Value(int index) { return 2 * std::pow(kGamma, index) / (kGamma + 1); }

void QuantileSketch::Add(double v, uint64_t n) {
  if (n == 0) return;
  count_ += n;
  if (!(v > kMinPositive)) {
    zeros_ += n;
    return;
  }
  AddIndex(Index(v), n);
}

void QuantileSketch::AddIndex(int i, uint64_t n) {
  if (counts_.empty()) {
    counts_.assign(1, 0);
    offset_ = i;
  }
  const int lo = offset_, hi = offset_ + static_cast<int>(counts_.size()) - 1;
  if (i < lo || i > hi) {
    // Widen to take I; past the bound the lowest buckets fold into the lowest one kept.
    const int new_hi = std::max(hi, i);
    const int new_lo = std::max(std::min(lo, i), new_hi - kMaxBuckets + 1);
    std::vector<uint64_t> wider(static_cast<size_t>(new_hi - new_lo + 1), 0);
    for (size_t k = 0; k < counts_.size(); ++k)
      wider[static_cast<size_t>(std::max(lo + static_cast<int>(k), new_lo) - new_lo)] += counts_[k];
    counts_ = std::move(wider);
    offset_ = new_lo;
    i = std::max(i, new_lo);
  }
  counts_[static_cast<size_t>(i - offset_)] += n;
}

void QuantileSketch::Merge(const QuantileSketch& other) {
  count_ += other.count_;
  zeros_ += other.zeros_;
  for (size_t k = 0; k < other.counts_.size(); ++k)
    if (other.counts_[k] > 0) AddIndex(other.offset_ + static_cast<int>(k), other.counts_[k]);
}

double QuantileSketch::Quantile(double q) const {
  if (count_ == 0) return 0;
  uint64_t rank = count_ - 1;
  if (!(q >= 1)) rank = q > 0 ? std::min(rank, static_cast<uint64_t>(q * count_)) : 0;
  if (rank < zeros_) return 0;
  uint64_t seen = zeros_;
  for (size_t k = 0; k < counts_.size(); ++k) {
    seen += counts_[k];
    if (seen > rank) return Value(offset_ + static_cast<int>(k));
  }
  return Value(offset_ + static_cast<int>(counts_.size()) - 1);
}

}  // namespace perftracker
