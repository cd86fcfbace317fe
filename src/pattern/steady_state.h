// A trace's iterations, cut from its markers, and which of them describe the job's steady state.
// Per-iteration values are means over those; the others are named in notes. Two kinds are left out:
//   - partial: the first or the last iteration, cut by the trace's start or end, far shorter
//     than the others (an AMD trace's last ProfilerStep of 49 us next to steps of 9.3 ms);
//   - warm-up: leading iterations far from the steady level (steps of 35 and 72 ms before a job
//     that runs at 95.7 ms: allocator, autotuning, lazy initialization, the profiler's own
//     warm-up).
// Owns the policy numbers of that decision.
#ifndef PERFTRACKER_PATTERN_STEADY_STATE_H_
#define PERFTRACKER_PATTERN_STEADY_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pattern/pattern.h"
#include "trace/event.h"

namespace perftracker::pattern {

// An edge iteration shorter than this share of the others' median was cut by the trace: a real
// iteration of a steady job is rarely under half the typical one.
inline constexpr double kPartialShare = 0.5;
// A leading iteration further than this share from the steady level is warm-up. 20%: the
// iteration-to-iteration noise of real jobs (a few % on GPUs, up to ~15% on shared CPU hosts)
// stays inside it.
inline constexpr double kWarmupTolerance = 0.2;
// ... or further than this many robust standard deviations of the steady iterations, whichever
// is larger, so that a noisy job does not lose its ordinary iterations.
inline constexpr double kWarmupSigmas = 4.0;
// Warm-up is looked for only with at least this many iterations (fewer cannot tell a level),
// and never takes more than half of them (the steady level is measured on the later half).
inline constexpr int kMinIterationsForWarmup = 3;

// Iterations cut from a trace's markers: [start, end) sorted and not overlapping, the step
// number of each (ProfilerStep#N; none for optimizer steps) and the thread whose markers they
// are (markers on several threads, e.g. nested profilers: the thread with most of them). An
// iteration of optimizer steps runs from the end of one to the end of the next, the first from
// -inf (the trace's first event, once known).
struct IterationCuts {
  std::vector<double> start, end;
  std::vector<int64_t> step;
  int64_t tid = 0;
};
IterationCuts CutIterations(const std::vector<trace::Span>& spans, bool optimizer);

enum class IterationClass : uint8_t { kSteady, kPartial, kWarmup };

// One class per iteration, in order. Never leaves fewer than one steady iteration.
std::vector<IterationClass> ClassifyIterations(const std::vector<double>& durations);

// What a summary left out of its per-iteration values, one line each without the rank:
//   "step #105 (0.049 ms) was cut by the trace: left out of per-iteration values"
//   "steps #101, #102 (35.12, 72.08 ms) are warm-up: per-iteration values are over the 3 steady
//    steps (95.65 ms)"
//   "12 GPU ops (3.10 ms) were launched before the profiler started: counted in no step"
std::vector<std::string> SteadyStateNotes(const RankSummary& summary);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_STEADY_STATE_H_
