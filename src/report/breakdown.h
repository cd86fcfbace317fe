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
//                                 "pre_profiler_ops", "pre_profiler_ms"},
//                         "critical_path": {"iterations", "steps", "ms", "cpu_ms",
//                                           "gpu_compute_ms", "gpu_communication_ms",
//                                           "launch_delay_ms", "kernel_gap_ms",
//                                           "top": [{"name", "ms"}]}}}}
// "iterations" counts the steady ones; "gpu" is absent for a rank without GPU events. idle is
// the step's GPU span (its first op to the next step's first op) minus its busy time;
// non_compute = busy - compute (communication and memory not hidden under compute).
// "critical_path" (a rank read from its trace; pattern/rank_critical_path.h): the path's length
// and what bounds it, means per iteration over the steady iterations it analysed ("steps", their
// ProfilerStep numbers), and the functions with the most time on it.
#ifndef PERFTRACKER_REPORT_BREAKDOWN_H_
#define PERFTRACKER_REPORT_BREAKDOWN_H_

#include <map>
#include <string>
#include <vector>

#include "pattern/pattern.h"
#include "pattern/rank_critical_path.h"

namespace perftracker::report {

inline constexpr char kBreakdownSchema[] = "perftracker.breakdown/1";

// Each rank's critical path by rank number; a rank without one (read from a summary) is absent.
using RankPaths = std::map<int, pattern::RankCriticalPath>;

std::string BreakdownJson(const std::vector<pattern::RankSummary>& ranks,
                          const RankPaths& paths = {});

// One line per rank with a path: its length per iteration, the share of each bound that has
// time on it, and the functions with the most time on it.
std::string CriticalPathLines(const RankPaths& paths);

// One line per rank: iterations and the GPU columns in ms per steady iteration.
std::string BreakdownTable(const std::vector<pattern::RankSummary>& ranks);

}  // namespace perftracker::report

#endif  // PERFTRACKER_REPORT_BREAKDOWN_H_
