#include "worker/shift_detector.h"

#include <algorithm>
#include <cmath>

#include "base/median.h"

namespace perftracker::worker {
namespace {

// The median's standard error is sqrt(pi / 2) x sigma / sqrt(n) for normal noise.
constexpr double kMedianSe = 1.2533;
// A MAD of zero (identical iterations, a coarse clock) would make any shift infinitely
// significant: the spread is floored at this share of the reference.
constexpr double kMinSigmaRatio = 0.002;
// Beyond this the effective sample size is too small to say anything (n_eff < 0.5 for 10).
constexpr double kMaxRho = 0.9;
// A later block replaces the reference when its threshold margin is under this share of the
// current one: a clearly calmer host, not the noise of two estimates from 50 iterations each.
constexpr double kRemeasureMarginShare = 0.5;
// Blocks in a row that must all be that calm.
constexpr int kCalmBlocks = 3;

}  // namespace

Status ShiftConfig::Validate() const {
  if (warmup < 0 || warmup > 1000000) return InvalidArgument("warmup not in [0, 1e6]");
  if (reference < 5 || reference > 100000) return InvalidArgument("reference not in [5, 1e5]");
  if (recent < 1 || recent > 10000) return InvalidArgument("recent not in [1, 1e4]");
  if (long_recent < recent || long_recent > 10000) {
    return InvalidArgument("long_recent not in [recent, 1e4]");
  }
  if (sustain < 1 || sustain > 100000) return InvalidArgument("sustain not in [1, 1e5]");
  if (!(sustain_s >= 0) || sustain_s > 3600) return InvalidArgument("sustain_s not in [0, 3600]");
  if (!(min_ratio > 0) || min_ratio > 100) return InvalidArgument("slowdown_ratio not in (0, 100]");
  if (!(z >= 0) || z > 1000) return InvalidArgument("z not in [0, 1000]");
  if (!(floor_share > 0) || floor_share > 1) return InvalidArgument("floor_share not in (0, 1]");
  return Status::Ok();
}

ShiftDetector::ShiftDetector(const ShiftConfig& config) : c_(config) {
  ref_.reserve(static_cast<size_t>(c_.reference));
  recent_.reserve(static_cast<size_t>(c_.recent));
  long_.reserve(static_cast<size_t>(c_.long_recent));
  scratch_.reserve(static_cast<size_t>(std::max({c_.long_recent, c_.reference, c_.recent})));
  after_.reserve(static_cast<size_t>(std::max(c_.reference, c_.recent)));
}

void ShiftDetector::Reset() {
  seen_ = 0;
  ref_.clear();
  referenced_ = false;
  level_change_ = false;
  reference_ns_ = sigma_ns_ = rho_ = threshold_ns_ = long_threshold_ns_ = 0;
  recent_.clear();
  recent_next_ = 0;
  long_.clear();
  long_next_ = 0;
  above_ = 0;
  above_ns_ = 0;
  active_ = false;
  fired_level_ns_ = 0;
  after_.clear();
  above_fired_ = 0;
  above_fired_ns_ = 0;
  block_.clear();
  calm_.clear();
}

double ShiftDetector::RingMedian(const std::vector<int64_t>& ring) const {
  scratch_.assign(ring.begin(), ring.end());  // within the capacity reserved: no allocation
  return MedianInPlace(&scratch_);
}

double ShiftDetector::recent_ns() const { return RingMedian(recent_); }

double ShiftDetector::long_recent_ns() const { return RingMedian(long_); }

bool ShiftDetector::ShortAbove() const {
  return static_cast<int>(recent_.size()) >= c_.recent && recent_ns() > threshold_ns_;
}

bool ShiftDetector::LongAbove() const {
  return static_cast<int>(long_.size()) >= c_.long_recent && long_recent_ns() > long_threshold_ns_;
}

double ShiftDetector::firing_ns() const {
  return !ShortAbove() && LongAbove() ? long_recent_ns() : recent_ns();
}

namespace {

// Iterations on each side of a level change inside the reference, at least: fewer say nothing
// about a level.
constexpr size_t kMinSegment = 10;

// Robust spread (1.4826 x MAD) and lag-1 autocorrelation of residuals (each iteration minus its
// level). For the trigger's threshold the autocorrelation is raised by its uncertainty: from a
// few dozen iterations the estimate is low-biased and uncertain by about 1 / sqrt(n), and
// underestimating it underestimates the noise of the moving median and fires on noise. The
// test for a level change inside the reference takes the estimate itself: residuals around a
// split a few iterations off are correlated already, and the raised value hid real changes (a
// 40% slowdown with 5% noise in a third of the runs, in simulation; the estimate itself calls
// a level change in about 1% of pure-noise references, 3.5% with strongly drifting noise).
struct Noise {
  double sigma = 0;
  double rho = 0;
};

Noise NoiseOf(const std::vector<double>& residuals, double level, bool upper_rho) {
  Noise n;
  std::vector<double> dev;
  dev.reserve(residuals.size());
  for (double r : residuals) dev.push_back(std::fabs(r));
  n.sigma = std::max(kMadToSigma * Median(std::move(dev)), kMinSigmaRatio * level);
  double mean = 0;
  for (double r : residuals) mean += r;
  mean /= static_cast<double>(residuals.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < residuals.size(); ++i) {
    den += (residuals[i] - mean) * (residuals[i] - mean);
    if (i + 1 < residuals.size()) num += (residuals[i] - mean) * (residuals[i + 1] - mean);
  }
  const double rho_hat = den > 0 ? num / den : 0.0;
  const double raise = upper_rho ? 2.0 / std::sqrt(static_cast<double>(residuals.size())) : 0.0;
  n.rho = std::clamp(rho_hat + raise, 0.0, kMaxRho);
  return n;
}

// Standard error of the median of n iterations under this noise.
double MedianSe(const Noise& noise, double n) {
  const double n_eff = n * (1 - noise.rho) / (1 + noise.rho);
  return kMedianSe * noise.sigma / std::sqrt(std::max(n_eff, 1.0));
}

// Adds X to the ring RING of at most N values (NEXT: the oldest, once full).
void PushRing(std::vector<int64_t>* ring, size_t* next, int n, int64_t x) {
  if (static_cast<int>(ring->size()) < n) {
    ring->push_back(x);
    return;
  }
  (*ring)[*next] = x;
  *next = (*next + 1) % ring->size();
}

double MedianOf(const std::vector<double>& v, size_t from, size_t to) {
  return Median(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(from),
                                    v.begin() + static_cast<std::ptrdiff_t>(to)));
}

}  // namespace

void ShiftDetector::FinishReference() {
  const std::vector<double> v(ref_.begin(), ref_.end());
  const size_t n = v.size();
  // A level change inside the reference (a slowdown that began while it was measured, a warm-up
  // longer than `warmup`) would make the reference a mix of two levels with a huge spread and
  // autocorrelation, and the trigger blind. So the most likely change point is found first (the
  // split with the largest difference of medians for its sizes); when the difference stands out
  // of the residual noise (and is a slowdown worth a window), the faster level is the reference,
  // and when the later level is the slower one the job already runs slow: the moving median
  // starts from it.
  size_t split = 0;
  double best = 0, m_left = 0, m_right = 0;
  for (size_t k = kMinSegment; n >= 2 * kMinSegment && k + kMinSegment <= n; ++k) {
    const double l = MedianOf(v, 0, k), r = MedianOf(v, k, n);
    const double score = std::fabs(r - l) / std::sqrt(1.0 / k + 1.0 / (n - k));
    if (score > best) {
      best = score;
      split = k;
      m_left = l;
      m_right = r;
    }
  }
  level_change_ = false;
  if (split > 0) {
    std::vector<double> residuals;
    residuals.reserve(n);
    for (size_t i = 0; i < n; ++i) residuals.push_back(v[i] - (i < split ? m_left : m_right));
    const Noise noise = NoiseOf(residuals, std::min(m_left, m_right), /*upper_rho=*/false);
    const double se = std::hypot(MedianSe(noise, static_cast<double>(split)),
                                 MedianSe(noise, static_cast<double>(n - split)));
    level_change_ = std::fabs(m_right - m_left) >
                    std::max(c_.floor_share * c_.min_ratio * std::min(m_left, m_right), c_.z * se);
  }
  std::vector<double> level;  // the iterations of the reference level
  if (level_change_ && m_right > m_left) {
    level.assign(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(split));
    const size_t seed = std::min(n - split, static_cast<size_t>(c_.recent));
    recent_.assign(ref_.end() - static_cast<std::ptrdiff_t>(seed), ref_.end());
    recent_next_ = 0;  // the oldest is replaced first
    const size_t long_seed = std::min(n - split, static_cast<size_t>(c_.long_recent));
    long_.assign(ref_.end() - static_cast<std::ptrdiff_t>(long_seed), ref_.end());
    long_next_ = 0;
  } else if (level_change_) {
    level.assign(v.begin() + static_cast<std::ptrdiff_t>(split), v.end());
  } else {
    level = v;
  }
  reference_ns_ = Median(level);
  std::vector<double> residuals;
  residuals.reserve(level.size());
  for (double x : level) residuals.push_back(x - reference_ns_);
  const Noise noise = NoiseOf(residuals, reference_ns_, /*upper_rho=*/true);
  sigma_ns_ = noise.sigma;
  rho_ = noise.rho;
  const double floor = c_.floor_share * c_.min_ratio * reference_ns_;
  threshold_ns_ = reference_ns_ + std::max(floor, c_.z * MedianSe(noise, c_.recent));
  long_threshold_ns_ = reference_ns_ + std::max(floor, c_.z * MedianSe(noise, c_.long_recent));
  referenced_ = true;
}

// A reference measured while the host was turbulent (other jobs, a VM's neighbours) has a
// wide spread, and its threshold would hide every slowdown for the rest of the job. Each later
// block of `reference` iterations under the threshold is measured like the reference; when
// kCalmBlocks blocks in a row each have a threshold margin under half the current one (the host
// calmed down, and stays calm), they become the reference, with the widest of their margins.
// One block's estimate is not enough: the smallest of many noisy estimates of the same noise
// is far below it, and a detector that took it would fire on that noise (measured: 3 of 20
// pure-noise runs of 5,000 iterations at 15% spread).
void ShiftDetector::Remeasure() {
  const std::vector<double> v(block_.begin(), block_.end());
  block_.clear();
  const double level = Median(v);
  std::vector<double> residuals;
  residuals.reserve(v.size());
  for (double x : v) residuals.push_back(x - level);
  const Noise noise = NoiseOf(residuals, level, /*upper_rho=*/true);
  const double floor = c_.floor_share * c_.min_ratio * level;
  const double margin = std::max(floor, c_.z * MedianSe(noise, c_.recent));
  if (margin >= kRemeasureMarginShare * (threshold_ns_ - reference_ns_)) {
    calm_.clear();
    return;
  }
  calm_.push_back({level, noise.sigma, noise.rho, margin,
                   std::max(floor, c_.z * MedianSe(noise, c_.long_recent))});
  if (static_cast<int>(calm_.size()) < kCalmBlocks) return;
  const Calm widest = *std::max_element(
      calm_.begin(), calm_.end(), [](const Calm& a, const Calm& b) { return a.margin < b.margin; });
  std::vector<double> levels;
  for (const Calm& c : calm_) levels.push_back(c.level);
  calm_.clear();
  reference_ns_ = Median(levels);
  sigma_ns_ = widest.sigma;
  rho_ = widest.rho;
  threshold_ns_ = reference_ns_ + widest.margin;
  long_threshold_ns_ = reference_ns_ + widest.long_margin;
  ++remeasured_;
}

// The level a trigger fired at is measured on the iterations after it (the moving median at
// firing still holds part of the old level): their median, from `recent` of them on, refined up
// to `reference` (or `recent`, if more). A second slowdown is a further step above that level: one
// worth a window of its own (min_ratio), and clear of the noise as the threshold is (its margin,
// scaled to the higher level, and widened by the level's own uncertainty: sqrt(1 + recent / n) for
// a level of n iterations), so a job that stays at its slower level never fires again. Measured:
// without the widening a level from 20 iterations re-fired on noise in 5 of 300 noisy runs.
bool ShiftDetector::SecondSlowdown(int64_t duration_ns, double median) {
  if (static_cast<int>(after_.size()) < std::max(c_.reference, c_.recent)) {
    after_.push_back(duration_ns);
    if (static_cast<int>(after_.size()) < c_.recent) return false;
    fired_level_ns_ = RingMedian(after_);
  }
  const double n = static_cast<double>(after_.size());
  const double margin = (threshold_ns_ - reference_ns_) * (fired_level_ns_ / reference_ns_) *
                        std::sqrt(1 + c_.recent / n);
  const double step = std::max(c_.min_ratio * fired_level_ns_, margin);
  if (median > fired_level_ns_ + step) {
    ++above_fired_;
    above_fired_ns_ += duration_ns;
  } else {
    above_fired_ = 0;
    above_fired_ns_ = 0;
  }
  return Sustained(above_fired_, above_fired_ns_);
}

bool ShiftDetector::Sustained(int above, int64_t above_ns) const {
  return above >= c_.sustain && static_cast<double>(above_ns) >= c_.sustain_s * 1e9;
}

bool ShiftDetector::Add(int64_t duration_ns) {
  ++seen_;
  if (seen_ <= c_.warmup) return false;
  if (!referenced_) {
    ref_.push_back(duration_ns);
    if (static_cast<int>(ref_.size()) >= c_.reference) FinishReference();
    return false;
  }
  PushRing(&recent_, &recent_next_, c_.recent, duration_ns);
  PushRing(&long_, &long_next_, c_.long_recent, duration_ns);
  if (static_cast<int>(recent_.size()) < c_.recent) return false;
  const double median = recent_ns();
  if (median <= threshold_ns_ && !LongAbove()) {
    above_ = 0;
    above_ns_ = 0;
    active_ = false;  // back under: the next sustained slowdown is a new one
    after_.clear();
    above_fired_ = 0;
    above_fired_ns_ = 0;
    block_.push_back(duration_ns);
    if (static_cast<int>(block_.size()) >= c_.reference) Remeasure();
    return false;
  }
  block_.clear();  // a block measures the job's own pace, not a slowdown's
  calm_.clear();
  if (active_) {
    if (!SecondSlowdown(duration_ns, median)) return false;
  } else {
    ++above_;
    above_ns_ += duration_ns;
    if (!Sustained(above_, above_ns_)) return false;
  }
  active_ = true;
  after_.clear();
  fired_level_ns_ = 0;
  above_fired_ = 0;
  above_fired_ns_ = 0;
  ++fired_;
  return true;
}

}  // namespace perftracker::worker
