#include "worker/shift_detector.h"

#include <algorithm>
#include <cmath>

namespace perftracker::worker {
namespace {

// The median's standard error is sqrt(pi / 2) x sigma / sqrt(n) for normal noise.
constexpr double kMedianSe = 1.2533;
// A MAD of zero (identical iterations, a coarse clock) would make any shift infinitely
// significant: the spread is floored at this share of the reference.
constexpr double kMinSigmaRatio = 0.002;
// Beyond this the effective sample size is too small to say anything (n_eff < 0.5 for 10).
constexpr double kMaxRho = 0.9;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

}  // namespace

Status ShiftConfig::Validate() const {
  if (warmup < 0 || warmup > 1000000) return InvalidArgument("warmup not in [0, 1e6]");
  if (reference < 5 || reference > 100000) return InvalidArgument("reference not in [5, 1e5]");
  if (recent < 1 || recent > 10000) return InvalidArgument("recent not in [1, 1e4]");
  if (sustain < 1 || sustain > 100000) return InvalidArgument("sustain not in [1, 1e5]");
  if (!(min_ratio > 0) || min_ratio > 100) return InvalidArgument("slowdown_ratio not in (0, 100]");
  if (!(z >= 0) || z > 1000) return InvalidArgument("z not in [0, 1000]");
  if (!(floor_share > 0) || floor_share > 1) return InvalidArgument("floor_share not in (0, 1]");
  return Status::Ok();
}

ShiftDetector::ShiftDetector(const ShiftConfig& config) : c_(config) {
  ref_.reserve(static_cast<size_t>(c_.reference));
  recent_.reserve(static_cast<size_t>(c_.recent));
}

void ShiftDetector::Reset() {
  seen_ = 0;
  ref_.clear();
  referenced_ = false;
  reference_ns_ = sigma_ns_ = rho_ = threshold_ns_ = 0;
  recent_.clear();
  recent_next_ = 0;
  above_ = 0;
  active_ = false;
}

double ShiftDetector::recent_ns() const {
  return Median(std::vector<double>(recent_.begin(), recent_.end()));
}

void ShiftDetector::FinishReference() {
  std::vector<double> v(ref_.begin(), ref_.end());
  reference_ns_ = Median(v);
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::fabs(x - reference_ns_));
  sigma_ns_ = std::max(1.4826 * Median(std::move(dev)), kMinSigmaRatio * reference_ns_);
  // Lag-1 autocorrelation around the mean.
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    den += (v[i] - mean) * (v[i] - mean);
    if (i + 1 < v.size()) num += (v[i] - mean) * (v[i + 1] - mean);
  }
  // From a few dozen iterations the estimate is low-biased and uncertain by about 1 / sqrt(n):
  // the upper end of that range is used, since underestimating the correlation underestimates
  // the noise of the moving median and fires on noise.
  const double rho_hat = den > 0 ? num / den : 0.0;
  rho_ = std::clamp(rho_hat + 2.0 / std::sqrt(static_cast<double>(v.size())), 0.0, kMaxRho);
  const double n_eff = c_.recent * (1 - rho_) / (1 + rho_);
  const double se = kMedianSe * sigma_ns_ / std::sqrt(std::max(n_eff, 1.0));
  threshold_ns_ =
      reference_ns_ + std::max(c_.floor_share * c_.min_ratio * reference_ns_, c_.z * se);
  referenced_ = true;
}

bool ShiftDetector::Add(int64_t duration_ns) {
  ++seen_;
  if (seen_ <= c_.warmup) return false;
  if (!referenced_) {
    ref_.push_back(duration_ns);
    if (static_cast<int>(ref_.size()) >= c_.reference) FinishReference();
    return false;
  }
  if (static_cast<int>(recent_.size()) < c_.recent) {
    recent_.push_back(duration_ns);
  } else {
    recent_[recent_next_] = duration_ns;
    recent_next_ = (recent_next_ + 1) % recent_.size();
  }
  if (static_cast<int>(recent_.size()) < c_.recent) return false;
  if (recent_ns() <= threshold_ns_) {
    above_ = 0;
    active_ = false;  // back under: the next sustained slowdown is a new one
    return false;
  }
  if (++above_ < c_.sustain || active_) return false;
  active_ = true;
  ++fired_;
  return true;
}

}  // namespace perftracker::worker
