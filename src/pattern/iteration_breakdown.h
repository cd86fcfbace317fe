// The per-iteration part of a rank's summary, once every event is in: which iterations are
// steady (the others listed as excluded), the GPU's busy / idle / compute / communication /
// copy / overlap time as means over the steady iterations and the rank's devices, and the time
// the main thread's CPU work ran with the GPU idle. Owns the GPU activity intervals per device
// and iteration (IterLanes); the Summarizer fills them and knows nothing of how they add up.
#ifndef PERFTRACKER_PATTERN_ITERATION_BREAKDOWN_H_
#define PERFTRACKER_PATTERN_ITERATION_BREAKDOWN_H_

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "pattern/intervals.h"
#include "pattern/pattern.h"

namespace perftracker::pattern {

// One iteration's GPU ops on one device, as intervals: all of them, and split by class.
struct IterLanes {
  std::vector<Interval> busy, compute, comm, copy;

  // Adds one op: to busy, and to comm, copy or compute by its class.
  void Add(const Interval& iv, FunctionClass fclass);
};

// Device -> one IterLanes per iteration (every iteration, steady or not).
using DeviceLanes = std::unordered_map<int32_t, std::vector<IterLanes>>;

// Fills s->iteration_ms and s->iteration_steps with the steady iterations and
// s->excluded_iterations with the others (pattern/steady_state.h decides; a whole-window
// "iteration" is always steady; without WARMUP, only the partial ones are left out). all_ms:
// every iteration's length; steps: their ProfilerStep numbers, empty or shorter when the
// source has none. Returns the steady iterations' indices.
std::vector<size_t> SplitSteadyIterations(const std::vector<double>& all_ms,
                                          const std::vector<int64_t>& steps, bool whole_window,
                                          bool warmup, RankSummary* s);

// One device's sums over the steady iterations, in microseconds.
struct LaneTotals {
  double busy = 0, idle = 0, compute = 0, comm = 0, copy = 0, overlap = 0;
  std::vector<Interval> busy_intervals;  // the steady iterations' ops, merged
};

// Merges each iteration's intervals in place and sums the steady ones. The steady steps' ops
// are merged across steps: a step's communication that runs under the next step's compute is
// hidden, as on the GPU (per-step sums would count it twice). A step's GPU span, out of which
// idle time is what no op covers, runs from its first op to the next step's first op (to its
// own last op's end when no later step has GPU work).
LaneTotals SumDeviceLanes(std::vector<IterLanes>* iterations, const std::vector<size_t>& steady);

// Means over the steady iterations and the devices.
struct GpuBreakdown {
  double busy_us = 0, idle_us = 0, compute_us = 0, comm_us = 0, memcpy_us = 0, overlap_us = 0;
  std::vector<Interval> all_busy;  // every device's steady busy intervals, merged
};

// lanes and steady must not be empty. Devices are summed in the map's order.
GpuBreakdown BreakDownGpu(DeviceLanes* lanes, const std::vector<size_t>& steady);

// Mean over the steady iterations [it_start[i], it_end[i]) of the main thread's top-level CPU
// work (main_top, merged) that no GPU op (all_busy, merged) overlaps; at least 0. steady must
// not be empty.
double CpuCriticalUs(const std::vector<Interval>& main_top, const std::vector<Interval>& all_busy,
                     const std::vector<size_t>& steady, const std::vector<double>& it_start,
                     const std::vector<double>& it_end);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_ITERATION_BREAKDOWN_H_
