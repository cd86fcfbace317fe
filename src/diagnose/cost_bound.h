// Findings add up: no finding claims more per iteration than the job or the rank lost. Each rule
// states its cost from its own evidence (a function's excess, a loader's wait, a throttled
// quota's time), and such a figure can exceed what removing the problem gives: a collective's
// time on a rank of another role is mostly waiting, a profiled window's functions are inflated by
// the profiler. The bound is what was lost:
// - the iteration itself: no problem costs more than the whole step;
// - a rank that computes more (straggler, more work), is held back by the scheduler
//   (cpu_contention) or waits longer for its data (data_loader): its own work's excess over its
//   peers' (what they wait for it), the largest of the own-work totals (the peer comparison's
//   own_work_ms, own_op_work_ms, own_gpu_work_ms, and the process's CPU time own_cpu_time_ms,
//   against their peers_ figures): each is a floor, as a Python frame's self time also holds
//   waits no op names, and the ops' wall time on a shared host holds preemption, unlike CPU time;
// - when the job slowed down from its healthy rate (diagnose/healthy_rate.h), a problem that the
//   clean baseline window did not name: the iteration's rise since then;
// - a change since the baseline window (diagnose/since_baseline.h): the job's unprofiled rise
//   over its healthy rate right before the window, where known (its profiled functions are
//   inflated, and more in one window than in another).
// A finding over its bound is cut to it, with its rule's figure and why kept in its evidence; one
// whose bound is under the size a finding must have (policy kMinAbsMs, kMinFraction) is dropped
// with a note. Then findings are ranked by the bounded cost (SortFindings).
#ifndef PERFTRACKER_DIAGNOSE_COST_BOUND_H_
#define PERFTRACKER_DIAGNOSE_COST_BOUND_H_

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "diagnose/finding.h"

namespace perftracker::diagnose {

// Whether a finding of category C costs time per iteration that removing the problem gives
// back (a silent rank, a hang, a crash, a mismatch or a leak has no such figure).
bool IsTimeCost(Category c);

// How much more a rank's own work takes than its peers' (ms an iteration: the largest of the peer
// comparison's own-work totals in F's evidence, own_work_ms against peers_own_work_ms and the
// op, GPU and CPU-time ones); nullopt when F carries none.
std::optional<double> OwnWorkExcessMs(const Finding& f);

// What a window's findings may claim.
struct CostBudget {
  double iteration_ms = 0;  // the window's median iteration (0: unknown, no bound from it)
  // The job's rise over its healthy rate, unprofiled (nullopt: it did not slow down, or unknown).
  std::optional<double> rise_ms;
  // Problems the clean baseline window already named (category, rank): present while the job was
  // healthy, so not part of the rise.
  std::set<std::pair<Category, int>> before_rise;
  // The job's unprofiled rise over its healthy rate right before the window (its latest
  // iterations, HealthyRate::UnprofiledRiseMs), for the changes since the baseline window.
  std::optional<double> since_baseline_rise_ms;
};

// The most F may claim under BUDGET, and why (empty: no bound applies).
struct CostLimit {
  double ms = 0;
  std::string why;
};
std::optional<CostLimit> LimitOf(const Finding& f, const CostBudget& budget);

// Bounds every finding of D, drops those whose bound leaves too little (with a note in
// D->job.notes), replays what fixing each of the rest gives (diagnose/what_if.h) and sorts
// them by it (by the bounded cost where no replay covers one).
void BoundCosts(const CostBudget& budget, Diagnosis* d);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_COST_BOUND_H_
