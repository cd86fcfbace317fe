#include "server/healthy_watch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "diagnose/causes.h"
#include "diagnose/cost_bound.h"
#include "diagnose/finding_text.h"
#include "diagnose/policy.h"

namespace perftracker::server {

namespace policy = diagnose::policy;

void HealthyWatch::WindowOpened(int64_t start, int iterations) {
  history_.ExcludeWindow(start, iterations);
  profiled_from_ = std::max(profiled_from_, start);
}

void HealthyWatch::NewAttempt() {
  history_.Reset();
  profiled_from_ = reported_step_ = -1;
}

std::optional<diagnose::HealthyRate> HealthyWatch::RateBefore(int64_t until) const {
  const std::vector<diagnose::IterationPoint> points = history_.Points(until);
  return diagnose::FindHealthyRate(points);
}

std::optional<HealthyWatch::Due> HealthyWatch::Check(std::chrono::steady_clock::time_point now) {
  if (now < next_check_) return std::nullopt;
  next_check_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(kCheckSeconds));
  const std::optional<diagnose::HealthyRate> rate = RateBefore(-1);
  if (!rate || !rate->slowdown_step) return std::nullopt;
  const int64_t step = *rate->slowdown_step;
  // Profiled already (a window started after the slowdown began), or asked for.
  if (step <= profiled_from_ || step <= reported_step_) return std::nullopt;
  if (rate->Ratio() < 1 + policy::kHealthyRiseAtLeast) return std::nullopt;
  reported_step_ = step;
  return Due{step, rate->recent.ms,
             fmt::format("slowdown since iteration {} (server): {:.1f} ms an iteration vs a "
                         "healthy {:.1f} ms",
                         step, rate->recent.ms, rate->healthy.ms)};
}

namespace {

// Two all-rank throttled findings (the OS rule's, and the baseline comparison's that names the
// functions it slowed) are one problem: the second keeps its functions, the larger cost.
void MergeAllRankThrottled(diagnose::Diagnosis* d) {
  using diagnose::Category;
  using diagnose::FindingClass;
  auto is = [](const diagnose::Finding& f) {
    return f.finding_class == FindingClass::kAll && f.category == Category::kCpuThrottled;
  };
  auto first = std::find_if(d->findings.begin(), d->findings.end(), is);
  if (first == d->findings.end()) return;
  for (auto it = first + 1; it != d->findings.end();) {
    if (!is(*it)) {
      ++it;
      continue;
    }
    // The baseline comparison's names what the quota slowed and against what; else the one
    // with more functions.
    const bool later = it->evidence.count("baseline_window") > first->evidence.count("baseline_window") ||
                       (it->evidence.count("baseline_window") == first->evidence.count("baseline_window") &&
                        it->functions.size() > first->functions.size());
    diagnose::Finding& keep = later ? *it : *first;
    diagnose::Finding& gone = &keep == &*first ? *it : *first;
    keep.impact_ms = std::max(keep.impact_ms, gone.impact_ms);
    keep.impact_fraction = std::max(keep.impact_fraction, gone.impact_fraction);
    for (const auto& [k, v] : gone.evidence) keep.evidence.emplace(k, v);
    if (&keep != &*first) *first = std::move(keep);
    it = d->findings.erase(it);
  }
}

}  // namespace

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
    against.push_back("expected patterns (this is the baseline window, later ones compare with it)");
  } else if (state->baseline && state->attempt == spec.attempt) {
    // Another attempt's baseline is of processes that are gone (iterations numbered anew).
    const diagnose::Baseline& base = *state->baseline;
    diagnose::HealthyReference ref;
    ref.rate = rate;
    ref.baseline = diagnose::CheckBaseline(rate ? &*rate : nullptr, base.first_iteration,
                                           base.last_iteration, base.ranks);
    diagnose::SinceBaselineResult since = diagnose::SinceBaseline(
        base, sealed->sample, sealed->metrics, d->findings, options, ref);
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
    // A baseline window the job had slowed down before is bounded by that rise too.
    if (rate->slowdown_step) budget.rise_ms = rate->RiseMs();
  }
  for (auto& f : memory) d->findings.push_back(std::move(f));
  MergeAllRankThrottled(d);
  diagnose::BoundCosts(budget, d);  // sorts, whichever categories are present
  d->job.notes.push_back(fmt::format("compared with: {}", fmt::join(against, "; ")));
}

}  // namespace perftracker::server
