// The per-rank time breakdown `perftracker show` prints and writes (--json): iterations and, with
// GPU events, where each steady-state iteration's GPU time goes. This is Holistic Trace
// Analysis' temporal and kernel-type breakdown, for users who compare the two; every value is a
// mean per steady-state iteration (pattern/steady_state.h), GPU work charged to the step that
// launched it.
//
// JSON schema "perftracker.breakdown/1":
//   {"schema": "perftracker.breakdown/1",
//    "ranks": {"<rank>": {"source", "iterations", "partial_iterations", "warmup_iterations",
//                         "iteration_ms",
//                         "gpu": {"idle_ms", "compute_ms", "non_compute_ms", "communication_ms",
//                                 "memory_ms", "overlap_ms", "busy_ms", "cpu_critical_ms",
//                                 "pre_profiler_ops", "pre_profiler_ms"}}}}
// "iterations" counts the steady ones; "gpu" is absent for a rank without GPU events. idle is
// the step's GPU span (its first op to the next step's first op) minus its busy time;
// non_compute = busy - compute (communication and memory not hidden under compute).
#ifndef PERFTRACKER_REPORT_BREAKDOWN_H_
#define PERFTRACKER_REPORT_BREAKDOWN_H_

#include <string>
#include <vector>

#include "pattern/pattern.h"

namespace perftracker::report {

inline constexpr char kBreakdownSchema[] = "perftracker.breakdown/1";

std::string BreakdownJson(const std::vector<pattern::RankSummary>& ranks);

// One line per rank: iterations and the GPU columns in ms per steady iteration.
std::string BreakdownTable(const std::vector<pattern::RankSummary>& ranks);

}  // namespace perftracker::report

#endif  // PERFTRACKER_REPORT_BREAKDOWN_H_
