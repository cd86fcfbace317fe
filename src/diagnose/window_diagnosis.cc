#include "diagnose/window_diagnosis.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <string>

#include "diagnose/all_rank_os.h"
#include "diagnose/causes.h"
#include "diagnose/cost_bound.h"
#include "diagnose/metric_findings.h"
#include "diagnose/trace_memory.h"

namespace perftracker::diagnose {

void SetRunMemory(std::vector<Finding> memory, std::optional<std::vector<RankMemoryUse>> timelines,
                  Diagnosis* d) {
  if (timelines) {
    std::erase_if(d->job.memory, [](const RankMemoryUse& m) { return m.online(); });
    for (auto& m : *timelines) d->job.memory.push_back(std::move(m));
  }
  // A window opened by a memory growth recorded its growing ranks' allocations: the run's
  // finding stays (its rate and forecast span the run, not ten iterations), named with the
  // place the window saw keep memory. The window's own growth findings go, whether the run's
  // series still shows the growth or not: ten iterations that keep memory are a cache filling
  // as well as a leak (measured: a 16 MiB-a-step cache emptied every 20 steps, named "grows 16.0
  // MiB per iteration through the profiled iterations" once its run series had settled flat).
  std::erase_if(d->findings,
                [&](const Finding& f) { return f.category == Category::kMemoryGrowth; });
  for (auto& f : memory) d->findings.push_back(std::move(f));
  NameMemorySites(d->job.memory, &d->findings);
}

void SetAsideRecorderCost(const std::vector<int>& memory_ranks, Diagnosis* d) {
  if (memory_ranks.empty()) return;
  const std::set<int> recording(memory_ranks.begin(), memory_ranks.end());
  const std::set<Category> timing = {Category::kStraggler, Category::kDataLoader, Category::kPython,
                                     Category::kGc,        Category::kSync,       Category::kMemcpy,
                                     Category::kRegression};
  std::vector<std::string> set_aside;
  std::erase_if(d->findings, [&](const Finding& f) {
    const bool recorder =
        f.finding_class == FindingClass::kSubset && timing.count(f.category) && !f.ranks.empty() &&
        std::all_of(f.ranks.begin(), f.ranks.end(), [&](int r) { return recording.count(r) > 0; });
    if (recorder)
      set_aside.push_back(
          fmt::format("{} ({:.2f} ms/iter)", CategoryName(f.category), f.impact_ms));
    return recorder;
  });
  if (set_aside.empty()) return;
  d->job.notes.push_back(
      fmt::format("ranks {} recorded their allocations in this window, which slows them: their {} "
                  "finding(s) here are that recorder's cost and are left out",
                  fmt::join(recording, ","), fmt::join(set_aside, ", ")));
}

Diagnosis DiagnoseWindow(WindowInput in, BaselineState* state) {
  static const pattern::RankMetrics kNoMetrics;
  const pattern::RankMetrics& metrics = in.metrics != nullptr ? *in.metrics : kNoMetrics;
  // One code path for the silent ranks: Diagnose builds their one finding from the window's
  // list (and adds none of its own from the traces' world size).
  Diagnosis d = Diagnose(*in.job, in.options, in.missing);
  AddMetricFindings(metrics, in.job->ranks(), &d);
  if (in.attempt > 0)
    d.job.notes.push_back(fmt::format(
        "attempt {} of the job (its ranks were started again): iterations count from 0 again",
        in.attempt));
  for (RankMemoryUse& m : in.timelines) d.job.memory.push_back(std::move(m));

  std::vector<std::string> against = {"each rank's peers of the same role"};
  CostBudget budget;
  budget.iteration_ms = d.job.iteration_ms_median;
  if (in.baseline) {
    state->named.clear();
    for (const Finding& f : d.findings)
      if (f.finding_class == FindingClass::kSubset)
        for (int r : f.ranks) state->named.insert({f.category, r});
    state->baseline = Baseline{in.id, in.start_iteration, in.start_iteration + in.iterations - 1,
                               std::move(in.sample), metrics};
    state->attempt = in.attempt;
    against.push_back(
        "expected patterns (this is the baseline window, later ones compare with it)");
  } else if (state->baseline && state->attempt == in.attempt) {
    // Another attempt's baseline is of processes that are gone (iterations numbered anew).
    const Baseline& base = *state->baseline;
    HealthyReference ref;
    ref.rate = in.rate;
    ref.baseline = CheckBaseline(in.rate ? &*in.rate : nullptr, base.first_iteration,
                                 base.last_iteration, base.ranks);
    SinceBaselineResult since =
        SinceBaseline(base, in.sample, metrics, d.findings, in.options, ref);
    // A rank the comparison with the baseline names gets the same cause rules as one its peers
    // name (its inputs, its quota, its run-queue wait in this window).
    const CauseInput causes{metrics, d.job.iteration_ms_median, in.job->ranks()};
    for (auto& f : since.findings) {
      ExplainRankFinding(causes, &f);
      d.findings.push_back(std::move(f));
    }
    if (!since.note.empty()) d.job.notes.push_back(std::move(since.note));
    against.push_back(
        ref.baseline.spoiled
            ? fmt::format("the job's healthy rate, not the baseline window (iterations {}..{}): {}",
                          base.first_iteration, base.last_iteration, ref.baseline.why)
            : fmt::format("the baseline window (iterations {}..{})", base.first_iteration,
                          base.last_iteration));
    if (!ref.baseline.spoiled) budget.before_rise = state->named;
  }
  if (in.rate) {
    against.push_back(in.rate->Describe());
    if (std::string inflation = in.rate->ProfilingInflation(d.job.iteration_ms_median);
        !inflation.empty())
      d.job.notes.push_back(std::move(inflation));
    // A baseline window the job had slowed down before is bounded by that rise too.
    if (in.rate->slowdown_step) budget.rise_ms = in.rate->RiseMs();
    budget.since_baseline_rise_ms = in.rate->UnprofiledRiseMs();
  }
  SetRunMemory(std::move(in.memory), std::nullopt, &d);
  SetAsideRecorderCost(in.memory_ranks, &d);
  FoldAllRanksThrottled(&d.findings);
  BoundCosts(budget, &d);  // sorts, whichever categories are present
  d.job.notes.push_back(fmt::format("compared with: {}", fmt::join(against, "; ")));
  return d;
}

}  // namespace perftracker::diagnose
