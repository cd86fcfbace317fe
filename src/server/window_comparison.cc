#include "server/window_comparison.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <string>

#include "diagnose/all_rank_os.h"
#include "diagnose/causes.h"
#include "diagnose/cost_bound.h"
#include "diagnose/trace_memory.h"

namespace perftracker::server {

void SetRunMemory(std::vector<diagnose::Finding> memory,
                  std::optional<std::vector<diagnose::RankMemoryUse>> timelines,
                  diagnose::Diagnosis* d) {
  if (timelines) {
    std::erase_if(d->job.memory, [](const diagnose::RankMemoryUse& m) { return m.online(); });
    for (auto& m : *timelines) d->job.memory.push_back(std::move(m));
  }
  // A window opened by a memory growth recorded its growing ranks' allocations: the run's
  // finding stays (its rate and forecast span the run, not ten iterations), named with the
  // place the window saw keep memory. The window's own growth findings go, whether the run's
  // series still shows the growth or not: ten iterations that keep memory are a cache filling
  // as well as a leak (measured: a 16 MiB-a-step cache emptied every 20 steps, named "grows 16.0
  // MiB per iteration through the profiled iterations" once its run series had settled flat).
  std::erase_if(d->findings, [&](const diagnose::Finding& f) {
    return f.category == diagnose::Category::kMemoryGrowth;
  });
  for (auto& f : memory) d->findings.push_back(std::move(f));
  diagnose::NameMemorySites(d->job.memory, &d->findings);
}

void CompareWindow(Window::Sealed* sealed, const std::optional<diagnose::HealthyRate>& rate,
                   std::vector<diagnose::Finding> memory, const diagnose::DiagnoseOptions& options,
                   BaselineState* state, diagnose::Diagnosis* d) {
  const WindowSpec& spec = sealed->spec;
  std::vector<std::string> against = {"each rank's peers of the same role"};
  diagnose::CostBudget budget;
  budget.iteration_ms = d->job.iteration_ms_median;
  if (spec.baseline) {
    state->named.clear();
    for (const diagnose::Finding& f : d->findings)
      if (f.finding_class == diagnose::FindingClass::kSubset)
        for (int r : f.ranks) state->named.insert({f.category, r});
    state->baseline = diagnose::Baseline{spec.id, spec.start_iteration,
                                         spec.start_iteration + spec.iterations - 1,
                                         std::move(sealed->sample), sealed->metrics};
    state->attempt = spec.attempt;
    against.push_back(
        "expected patterns (this is the baseline window, later ones compare with it)");
  } else if (state->baseline && state->attempt == spec.attempt) {
    // Another attempt's baseline is of processes that are gone (iterations numbered anew).
    const diagnose::Baseline& base = *state->baseline;
    diagnose::HealthyReference ref;
    ref.rate = rate;
    ref.baseline = diagnose::CheckBaseline(rate ? &*rate : nullptr, base.first_iteration,
                                           base.last_iteration, base.ranks);
    diagnose::SinceBaselineResult since =
        diagnose::SinceBaseline(base, sealed->sample, sealed->metrics, d->findings, options, ref);
    // A rank the comparison with the baseline names gets the same cause rules as one its peers
    // name (its inputs, its quota, its run-queue wait in this window).
    const diagnose::CauseInput causes{sealed->metrics, d->job.iteration_ms_median,
                                      sealed->job.ranks()};
    for (auto& f : since.findings) {
      diagnose::ExplainRankFinding(causes, &f);
      d->findings.push_back(std::move(f));
    }
    if (!since.note.empty()) d->job.notes.push_back(std::move(since.note));
    against.push_back(
        ref.baseline.spoiled
            ? fmt::format("the job's healthy rate, not the baseline window (iterations {}..{}): {}",
                          base.first_iteration, base.last_iteration, ref.baseline.why)
            : fmt::format("the baseline window (iterations {}..{})", base.first_iteration,
                          base.last_iteration));
    if (!ref.baseline.spoiled) budget.before_rise = state->named;
  }
  if (rate) {
    against.push_back(rate->Describe());
    if (std::string inflation = rate->ProfilingInflation(d->job.iteration_ms_median);
        !inflation.empty())
      d->job.notes.push_back(std::move(inflation));
    // A baseline window the job had slowed down before is bounded by that rise too.
    if (rate->slowdown_step) budget.rise_ms = rate->RiseMs();
  }
  SetRunMemory(std::move(memory), std::nullopt, d);
  diagnose::FoldAllRanksThrottled(&d->findings);
  diagnose::BoundCosts(budget, d);  // sorts, whichever categories are present
  d->job.notes.push_back(fmt::format("compared with: {}", fmt::join(against, "; ")));
}

}  // namespace perftracker::server
