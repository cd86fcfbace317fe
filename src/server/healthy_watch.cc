#include "server/healthy_watch.h"

#include <fmt/format.h>

#include <algorithm>

#include "diagnose/policy.h"

namespace perftracker::server {

namespace policy = diagnose::policy;

void HealthyWatch::WindowOpened(int64_t start, int iterations) {
  history_.ExcludeWindow(start, iterations);
  profiled_from_ = std::max(profiled_from_, start);
}

void HealthyWatch::NewAttempt() {
  history_.Reset();
  profiled_from_ = reported_step_ = -1;
}

std::optional<diagnose::HealthyRate> HealthyWatch::RateBefore(int64_t until) const {
  const std::vector<diagnose::IterationPoint> points = history_.Points(until);
  std::optional<diagnose::HealthyRate> rate = diagnose::FindHealthyRate(points);
  if (rate) {
    const std::vector<diagnose::IterationPoint> latest =
        history_.Latest(until, static_cast<size_t>(policy::kLatestSteps));
    rate->latest = diagnose::MedianLevel(latest);
  }
  return rate;
}

std::optional<HealthyWatch::Due> HealthyWatch::Check(std::chrono::steady_clock::time_point now) {
  if (now < next_check_) return std::nullopt;
  next_check_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(kCheckSeconds));
  const std::optional<diagnose::HealthyRate> rate = RateBefore(-1);
  if (!rate || !rate->slowdown_step) return std::nullopt;
  const int64_t step = *rate->slowdown_step;
  // Profiled already (a window started after the slowdown began), or asked for.
  if (step <= profiled_from_ || step <= reported_step_) return std::nullopt;
  if (rate->Ratio() < 1 + policy::kHealthyRiseAtLeast) return std::nullopt;
  reported_step_ = step;
  return Due{step, rate->recent.ms,
             fmt::format("slowdown since iteration {} (server): {:.1f} ms an iteration vs a "
                         "healthy {:.1f} ms",
                         step, rate->recent.ms, rate->healthy.ms)};
}

}  // namespace perftracker::server
