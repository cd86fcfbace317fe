// One home for a window's diagnosis: the peer comparison of its ranks (diagnose.h), the agents'
// OS-metric findings (metric_findings.h), the comparison with the attempt's baseline window or,
// where that is spoiled, the job's healthy rate (since_baseline.h, healthy_rate.h), the run's
// memory findings (memory_growth.h, named with the window's allocation sites), the costs bounded
// and the findings sorted (cost_bound.h), and the note that says what it was compared with. The
// server gathers a window's input and publishes what DiagnoseWindow returns; every window it
// closes goes through here (complete, past its deadline, cut short by a hang, open at the job's
// end). A hang's own diagnosis (hang.h) and the run's final one (the latest window's, with the
// memory and the collectives as the run ended) are the server's.
#ifndef PERFTRACKER_DIAGNOSE_WINDOW_DIAGNOSIS_H_
#define PERFTRACKER_DIAGNOSE_WINDOW_DIAGNOSIS_H_

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "diagnose/healthy_rate.h"
#include "diagnose/missing_ranks.h"
#include "diagnose/since_baseline.h"
#include "pattern/collected.h"
#include "pattern/compact_job.h"

namespace perftracker::diagnose {

// The attempt's baseline window as later windows are compared with it, and the problems it named
// (a rank's problem there was present while the job was healthy: not part of a later rise). The
// caller keeps it from one window to the next.
struct BaselineState {
  std::optional<Baseline> baseline;
  int attempt = -1;
  std::set<std::pair<Category, int>> named;
};

// What a window's diagnosis is made of.
struct WindowInput {
  int64_t id = 0;
  int64_t start_iteration = 0;
  int iterations = 0;
  int attempt = 0;        // the job's attempt (its ranks started again: iterations count anew)
  bool baseline = false;  // the attempt's baseline window: later ones are compared with it
  const pattern::CompactJob* job = nullptr;        // the ranks that reported
  const pattern::RankMetrics* metrics = nullptr;   // every rank's OS metrics of the window
  const MissingRanks* missing = nullptr;           // the expected ranks that did not report
  std::vector<pattern::RankSummary> sample = {};   // the sampled ranks' whole patterns
  std::optional<HealthyRate> rate = std::nullopt;  // the job's healthy rate up to the window
  std::vector<Finding> memory = {};                // the run's memory findings (the server's)
  std::vector<RankMemoryUse> timelines = {};       // the run's online memory timelines
  std::vector<int> memory_ranks = {};  // ranks that recorded their allocations in the window
  DiagnoseOptions options = {};
};

// The window's diagnosis, sorted; STATE keeps the window as the baseline when it is one, and is
// what a later window is compared with.
Diagnosis DiagnoseWindow(WindowInput in, BaselineState* state);

// A window that records some ranks' allocations (a memory growth's) slows those ranks: on torch
// 1.13 the collector follows every tensor they make, on 2.x the profiler records each
// allocation. Their timing findings in it (straggler, data loader, Python, GC, sync, copies,
// regression: a rank-only cost) are that recorder's cost, not the job's: left out, and said in a
// note. Measured: a leaking rank's DataLoader.__next__ 4.9 ms/iter slower in its memory window
// (torch 1.13, collate making tensors), named a straggler.
void SetAsideRecorderCost(const std::vector<int>& memory_ranks, Diagnosis* d);

// The run's memory in D: its memory_growth findings replaced by MEMORY (the server's series of
// the run), named with the allocation sites D's window recorded (NameMemorySites); with
// TIMELINES, its online memory timelines replaced too. The run's final diagnosis takes the
// memory as the run ended through it.
void SetRunMemory(std::vector<Finding> memory, std::optional<std::vector<RankMemoryUse>> timelines,
                  Diagnosis* d);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_WINDOW_DIAGNOSIS_H_
