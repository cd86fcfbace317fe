#include "report/breakdown.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/json_writer.h"
#include "base/units.h"

namespace perftracker::report {
namespace {

int Count(const pattern::RankSummary& r, pattern::ExcludedIteration::Reason reason) {
  int n = 0;
  for (const auto& e : r.excluded_iterations) n += e.reason == reason;
  return n;
}

void PathJson(const pattern::RankCriticalPath& p, JsonWriter* w) {
  const double n = std::max(1, p.iterations);
  w->Key("critical_path").BeginObject();
  w->Key("iterations").Int(p.iterations);
  w->Key("steps").BeginArray();
  for (int64_t s : p.steps) w->Int(s);
  w->EndArray();
  w->Key("ms").Number(p.MeanMs());
  for (size_t b = 0; b < pattern::kPathBounds; ++b)
    w->Key(pattern::PathBoundOf(static_cast<pattern::PathBound>(b)).key)
        .Number(UsToMs(p.bound_us[b] / n));
  w->Key("top").BeginArray();
  for (const pattern::PathFunction& f : p.top)
    w->BeginObject().Key("name").String(f.name).Key("ms").Number(UsToMs(f.us / n)).EndObject();
  w->EndArray();
  w->EndObject();
}

}  // namespace

std::string BreakdownJson(const std::vector<pattern::RankSummary>& ranks, const RankPaths& paths) {
  JsonWriter w(1);
  w.BeginObject().Key("schema").String(kBreakdownSchema).Key("ranks").BeginObject();
  for (const pattern::RankSummary& r : ranks) {
    w.Key(std::to_string(r.rank)).BeginObject();
    w.Key("source").String(r.source);
    w.Key("iterations").Int(static_cast<int64_t>(r.iteration_ms.size()));
    w.Key("partial_iterations").Int(Count(r, pattern::ExcludedIteration::kPartial));
    w.Key("warmup_iterations").Int(Count(r, pattern::ExcludedIteration::kWarmup));
    w.Key("iteration_ms").Number(r.MeanIterationMs());
    if (r.has_gpu) {
      w.Key("gpu").BeginObject();
      w.Key("idle_ms").Number(UsToMs(r.gpu_idle_us));
      w.Key("compute_ms").Number(UsToMs(r.compute_us));
      w.Key("non_compute_ms").Number(UsToMs(r.gpu_busy_us - r.compute_us));
      w.Key("communication_ms").Number(UsToMs(r.comm_us));
      w.Key("memory_ms").Number(UsToMs(r.memcpy_us));
      w.Key("overlap_ms").Number(UsToMs(r.comm_compute_overlap_us));
      w.Key("busy_ms").Number(UsToMs(r.gpu_busy_us));
      w.Key("cpu_critical_ms").Number(UsToMs(r.cpu_critical_us));
      w.Key("pre_profiler_ops").Int(static_cast<int64_t>(r.pre_profiler_gpu_ops));
      w.Key("pre_profiler_ms").Number(UsToMs(r.pre_profiler_gpu_us));
      w.EndObject();
    }
    if (auto p = paths.find(r.rank); p != paths.end() && p->second.iterations > 0)
      PathJson(p->second, &w);
    w.EndObject();
  }
  w.EndObject().EndObject();
  return w.Take() + "\n";
}

std::string BreakdownTable(const std::vector<pattern::RankSummary>& ranks) {
  std::string out = fmt::format(
      "{:>6} {:>6} {:>7} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "rank", "iters",
      "partial", "warmup", "iter ms", "idle", "compute", "non-comp", "comm", "memory", "overlap");
  for (const pattern::RankSummary& r : ranks) {
    out += fmt::format("{:>6} {:>6} {:>7} {:>6} {:>10.3f}", r.rank, r.iteration_ms.size(),
                       Count(r, pattern::ExcludedIteration::kPartial),
                       Count(r, pattern::ExcludedIteration::kWarmup), r.MeanIterationMs());
    if (r.has_gpu) {
      out += fmt::format(" {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f}",
                         UsToMs(r.gpu_idle_us), UsToMs(r.compute_us),
                         UsToMs(r.gpu_busy_us - r.compute_us), UsToMs(r.comm_us),
                         UsToMs(r.memcpy_us), UsToMs(r.comm_compute_overlap_us));
    } else {
      out += "   (no GPU events)";
    }
    out += "\n";
  }
  out += "ms per steady-state iteration; GPU work charged to the step that launched it\n";
  return out;
}

std::string CriticalPathLines(const RankPaths& paths) {
  std::string out;
  for (const auto& [rank, p] : paths) {
    if (p.too_many_events) {
      out += fmt::format("rank {}: no critical path: the trace holds more events than it keeps\n",
                         rank);
      continue;
    }
    if (p.iterations == 0) continue;
    out += fmt::format("rank {}: critical path {:.2f} ms per iteration ({} analysed):", rank,
                       p.MeanMs(), p.iterations);
    const char* sep = " ";
    for (size_t b = 0; b < pattern::kPathBounds; ++b) {
      const double share = p.Share(static_cast<pattern::PathBound>(b));
      if (share < 0.0005) continue;
      out +=
          fmt::format("{}{} {:.1f}%", sep,
                      pattern::PathBoundOf(static_cast<pattern::PathBound>(b)).text, 100 * share);
      sep = ", ";
    }
    const double n = std::max(1, p.iterations);
    sep = "; most on it: ";
    for (const pattern::PathFunction& f : p.top) {
      out += fmt::format("{}{} {:.2f} ms", sep, f.name, UsToMs(f.us / n));
      sep = ", ";
    }
    if (p.negative_edges > 0)
      out += fmt::format(" ({} edge{} whose events' times ran backwards weighed nothing)",
                         p.negative_edges, p.negative_edges == 1 ? "" : "s");
    out += "\n";
  }
  return out;
}

}  // namespace perftracker::report
