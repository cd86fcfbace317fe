#include "pattern/steady_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "base/median.h"
#include "base/units.h"

namespace perftracker::pattern {

IterationCuts CutIterations(const std::vector<trace::Span>& spans, bool optimizer) {
  IterationCuts c;
  if (spans.empty()) return c;
  std::unordered_map<int64_t, int> per_tid;
  for (const auto& s : spans) ++per_tid[s.tid];
  int64_t best = spans.front().tid;
  for (const auto& s : spans) {
    if (per_tid[s.tid] > per_tid[best]) best = s.tid;
  }
  std::vector<trace::Span> v;
  for (const auto& s : spans) {
    if (s.tid == best && std::isfinite(s.ts_us) && s.dur_us >= 0) v.push_back(s);
  }
  std::sort(v.begin(), v.end(),
            [](const trace::Span& a, const trace::Span& b) { return a.ts_us < b.ts_us; });
  c.tid = best;
  double prev_end = -std::numeric_limits<double>::infinity();
  for (const auto& s : v) {
    const double end = s.ts_us + s.dur_us;
    if (optimizer) {
      if (end <= prev_end) continue;
      c.start.push_back(prev_end);
      c.end.push_back(end);
      prev_end = end;
    } else {
      if (!c.start.empty() && s.ts_us < c.end.back()) continue;  // overlapping marker
      c.start.push_back(s.ts_us);
      c.end.push_back(end);
      c.step.push_back(s.step);
    }
  }
  return c;
}

std::vector<IterationClass> ClassifyIterations(const std::vector<double>& d) {
  const size_t n = d.size();
  std::vector<IterationClass> out(n, IterationClass::kSteady);
  if (n < 2) return out;
  // Warm-up first: leading iterations far from the level of the later half. (A short first
  // iteration in front of steady ones is warm-up too: the profiler's own warm-up steps are.)
  if (n >= static_cast<size_t>(kMinIterationsForWarmup)) {
    const std::vector<double> late(d.begin() + static_cast<std::ptrdiff_t>(n / 2), d.end());
    const double level = Median(late);
    std::vector<double> dev;
    for (double x : late) dev.push_back(std::fabs(x - level));
    const double sigma = kMadToSigma * Median(std::move(dev));
    const double tolerance = std::max(kWarmupTolerance * level, kWarmupSigmas * sigma);
    for (size_t i = 0; i < n / 2; ++i) {
      if (std::fabs(d[i] - level) <= tolerance) break;
      out[i] = IterationClass::kWarmup;
    }
  }
  // Partial: an edge iteration far shorter than the median of the other steady ones.
  auto others_median = [&](size_t skip) {
    std::vector<double> v;
    for (size_t i = 0; i < n; ++i)
      if (i != skip && out[i] == IterationClass::kSteady) v.push_back(d[i]);
    return Median(std::move(v));
  };
  if (d[n - 1] < kPartialShare * others_median(n - 1)) out[n - 1] = IterationClass::kPartial;
  if (out[0] == IterationClass::kSteady && d[0] < kPartialShare * others_median(0))
    out[0] = IterationClass::kPartial;
  return out;
}

std::vector<std::string> SteadyStateNotes(const RankSummary& s) {
  std::vector<std::string> out;
  const bool steps = s.iteration_source == "ProfilerStep";
  auto list = [&](ExcludedIteration::Reason reason, std::string* names, std::string* ms) {
    int n = 0;
    for (const ExcludedIteration& e : s.excluded_iterations) {
      if (e.reason != reason) continue;
      if (n++) {
        *names += ", ";
        *ms += ", ";
      }
      *names += steps && e.step >= 0 ? fmt::format("#{}", e.step) : fmt::format("{}", e.index + 1);
      *ms += fmt::format("{:.3g}", e.ms);
    }
    return n;
  };
  const char* unit = steps ? "step" : "iteration";
  std::string names, ms;
  if (const int n = list(ExcludedIteration::kWarmup, &names, &ms); n > 0) {
    out.push_back(fmt::format(
        "{}{} {} ({} ms) {} warm-up: per-iteration values are over the {} steady {}s ({:.2f} ms)",
        unit, n > 1 ? "s" : "", names, ms, n > 1 ? "are" : "is", s.iteration_ms.size(), unit,
        s.MeanIterationMs()));
  }
  names.clear();
  ms.clear();
  if (const int n = list(ExcludedIteration::kPartial, &names, &ms); n > 0) {
    out.push_back(
        fmt::format("{}{} {} ({} ms) {} cut by the trace: left out of per-iteration values", unit,
                    n > 1 ? "s" : "", names, ms, n > 1 ? "were" : "was"));
  }
  if (s.pre_profiler_gpu_ops > 0) {
    out.push_back(fmt::format(
        "{} GPU op{} ({:.3f} ms) {} launched before the profiler started: counted in no step",
        s.pre_profiler_gpu_ops, s.pre_profiler_gpu_ops == 1 ? "" : "s",
        UsToMs(s.pre_profiler_gpu_us), s.pre_profiler_gpu_ops == 1 ? "was" : "were"));
  }
  return out;
}

}  // namespace perftracker::pattern
