#include "report/breakdown.h"

#include <fmt/format.h>

#include "base/json_writer.h"
#include "base/units.h"

namespace perftracker::report {
namespace {

int Count(const pattern::RankSummary& r, pattern::ExcludedIteration::Reason reason) {
  int n = 0;
  for (const auto& e : r.excluded_iterations) n += e.reason == reason;
  return n;
}

}  // namespace

std::string BreakdownJson(const std::vector<pattern::RankSummary>& ranks) {
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

}  // namespace perftracker::report
