#include "diagnose/healthy_rate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/median.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

// A normal sample's mean absolute deviation is 0.8 sigma, and its median's standard error is
// 1.25 sigma / sqrt(n): statistics, not policy.
constexpr double kMeanAbsDeviationPerSigma = 0.8;
constexpr double kMedianStandardErrorPerSigma = 1.25;

// The sum of |x - median| over V (V is reordered) and that median.
struct Fit {
  double median = 0;
  double deviation = 0;
};
Fit FitOne(std::vector<double>& v) {
  Fit f;
  if (v.empty()) return f;
  f.median = Median(v);
  for (double x : v) f.deviation += std::fabs(x - f.median);
  return f;
}

// The best two-level split of VALUES with at least MIN_SEGMENT values on each side: the index of
// the first value of the second level, and each level's fit. O(n^2), for n of a few hundred.
struct Split {
  size_t at = 0;
  Fit left, right;
};
std::optional<Split> BestSplit(std::span<const double> values, size_t min_segment) {
  const size_t n = values.size();
  if (n < 2 * min_segment) return std::nullopt;
  std::optional<Split> best;
  double best_cost = std::numeric_limits<double>::infinity();
  std::vector<double> l, r;
  for (size_t k = min_segment; k + min_segment <= n; ++k) {
    l.assign(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k));
    r.assign(values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
    const Fit fl = FitOne(l), fr = FitOne(r);
    const double cost = fl.deviation + fr.deviation;
    if (cost < best_cost) {
      best_cost = cost;
      best = Split{k, fl, fr};
    }
  }
  return best;
}

}  // namespace

IterationLevel MedianLevel(std::span<const IterationPoint> points) {
  IterationLevel level;
  if (points.empty()) return level;
  std::vector<double> v;
  v.reserve(points.size());
  for (const IterationPoint& p : points) v.push_back(p.ms);
  level.ms = Median(std::move(v));
  level.first_step = points.front().step;
  level.last_step = points.back().step;
  level.points = static_cast<int>(points.size());
  return level;
}

bool HealthyRate::LatestKnown() const { return latest.points >= policy::kChangeMinSegment; }

std::optional<double> HealthyRate::UnprofiledRiseMs() const {
  if (slowdown_step) return RiseMs();
  if (!LatestKnown() || !(healthy.ms > 0)) return std::nullopt;
  return std::max(latest.ms - healthy.ms, 0.0);
}

std::string HealthyRate::Describe() const {
  if (!slowdown_step)
    return fmt::format("its healthy rate is {:.1f} ms an iteration (unprofiled iterations {}..{})",
                       healthy.ms, healthy.first_step, healthy.last_step);
  return fmt::format(
      "it ran {:.1f} ms an iteration (unprofiled iterations {}..{}) until iteration {}, {:.1f} ms "
      "since ({:.2f}x)",
      healthy.ms, healthy.first_step, healthy.last_step, *slowdown_step, recent.ms, Ratio());
}

std::string HealthyRate::ProfilingInflation(double window_ms) const {
  // Against the level the job ran at right before the window: a slowdown window's iterations
  // carry the fault too.
  const double unprofiled = LatestKnown() ? latest.ms : recent.ms;
  if (!(window_ms > 0) || !(unprofiled > 0)) return "";
  return fmt::format(
      "profiled iterations ran {:.2f}x the unprofiled ones ({:.1f} ms against {:.1f} ms); "
      "figures are of profiled iterations",
      window_ms / unprofiled, window_ms, unprofiled);
}

std::optional<HealthyRate> FindHealthyRate(std::span<const IterationPoint> history) {
  const auto min_points = static_cast<size_t>(policy::kHealthyMinPoints);
  if (history.size() < min_points) return std::nullopt;
  HealthyRate rate;
  rate.healthy = rate.recent = MedianLevel(history);
  std::vector<double> values;
  values.reserve(history.size());
  for (const IterationPoint& p : history) values.push_back(p.ms);
  const std::optional<Split> split =
      BestSplit(values, static_cast<size_t>(policy::kChangeMinSegment));
  if (!split) return rate;
  const double nl = static_cast<double>(split->at);
  const double nr = static_cast<double>(values.size() - split->at);
  // The points' spread around their own level, pooled: the noise a median of each side carries.
  const double sigma = (split->left.deviation + split->right.deviation) /
                       static_cast<double>(values.size()) / kMeanAbsDeviationPerSigma;
  const double se = kMedianStandardErrorPerSigma * sigma * std::sqrt(1 / nl + 1 / nr);
  const double shift = split->right.median - split->left.median;
  const double lower = std::min(split->left.median, split->right.median);
  if (std::fabs(shift) < policy::kChangeNoiseZ * se ||
      std::fabs(shift) < policy::kBaselineSlowdown * lower)
    return rate;
  const IterationLevel before = MedianLevel(history.first(split->at));
  const IterationLevel after = MedianLevel(history.subspan(split->at));
  // A faster start that lasted less than kHealthyMinSeconds is the host settling, not a rate.
  if (shift > 0 && static_cast<double>(before.last_step - before.first_step + 1) * before.ms <
                       policy::kHealthyMinSeconds * 1000)
    return rate;
  rate.recent = after;
  if (shift > 0) {
    rate.healthy = before;
    rate.slowdown_step = after.first_step;
  } else {
    // Faster since: the job is healthy now (a warm-up's tail, a fault that went away).
    rate.healthy = after;
  }
  return rate;
}

bool StraddlesChange(const std::vector<pattern::RankSummary>& ranks) {
  int known = 0, stepped = 0;
  for (const pattern::RankSummary& r : ranks) {
    if (r.iteration_ms.size() < 6) continue;
    ++known;
    const std::optional<Split> s = BestSplit(r.iteration_ms, 3);
    if (s && s->right.median >= (1 + policy::kBaselineSlowdown) * s->left.median) ++stepped;
  }
  return known > 0 && stepped >= policy::kStraddleRanksShare * known;
}

BaselineCheck CheckBaseline(const HealthyRate* rate, int64_t first, int64_t last,
                            const std::vector<pattern::RankSummary>& ranks) {
  BaselineCheck c;
  if (rate == nullptr || !rate->slowdown_step) return c;
  const int64_t at = *rate->slowdown_step;
  if (at <= first) {
    c.spoiled = true;
    c.why = fmt::format(
        "the job had slowed down before it: {:.1f} ms an iteration until iteration {}, {:.1f} ms "
        "from iteration {} on",
        rate->healthy.ms, rate->healthy.last_step, rate->recent.ms, at);
    return c;
  }
  // The first unprofiled point after the window lies past its export: a slowdown found there
  // began inside the window or right after it, and only the window's own iterations tell which.
  const int64_t after_window = last + 1 + static_cast<int64_t>(policy::kHealthyAfterWindow);
  if (at <= after_window + 1 && StraddlesChange(ranks)) {
    c.spoiled = true;
    c.why = fmt::format(
        "its iterations slowed down within it, as the job did ({:.1f} ms an iteration before it, "
        "{:.1f} ms after it)",
        rate->healthy.ms, rate->recent.ms);
  }
  return c;
}

}  // namespace perftracker::diagnose
