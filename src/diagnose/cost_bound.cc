#include "diagnose/cost_bound.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "diagnose/finding_text.h"
#include "diagnose/policy.h"
#include "diagnose/what_if.h"

namespace perftracker::diagnose {

bool IsTimeCost(Category c) {
  switch (c) {
    case Category::kMissingRank:
    case Category::kHang:
    case Category::kStall:
    case Category::kCollectiveMismatch:
    case Category::kRankCrash:
    case Category::kMemoryGrowth:
    case Category::kImprovement:
    case Category::kHardwareChange:
    case Category::kConfigurationChange:
      return false;
    default:
      return true;
  }
}

namespace {

// A rank that computes more than its peers, takes longer for the same work because the
// scheduler holds it back, or waits longer for its data: its peers wait for its excess, no more.
// A loader's wait is in the ops' total (torch's DataLoader annotation is an op; measured: slow
// loaders 12-81 ms over their peers' there, a loader 5.3 ms slower on a busy host 1.6 ms, its
// peers waiting no longer for it).
bool PeersWaitForItsExcess(Category c) {
  return c == Category::kStraggler || c == Category::kMoreWork || c == Category::kCpuContention ||
         c == Category::kDataLoader;
}

// The own-work totals (rank, its peers' median), as evidence keys: the peer comparison's, and
// the process's CPU time from the window's metrics (AddOwnCpuTime, diagnose/causes.h).
constexpr std::pair<const char*, const char*> kOwnWorkTotals[] = {
    {"own_work_ms", "peers_own_work_ms"},
    {"own_op_work_ms", "peers_own_op_work_ms"},
    {"own_gpu_work_ms", "peers_own_gpu_work_ms"},
    {"own_cpu_time_ms", "peers_own_cpu_time_ms"},
};

double Evidence(const Finding& f, const char* key) {
  auto it = f.evidence.find(key);
  return it == f.evidence.end() ? std::nan("") : it->second;
}

// Whether the clean baseline window named this problem already: then the healthy rate includes it.
bool BeforeRise(const Finding& f, const CostBudget& b) {
  if (f.finding_class != FindingClass::kSubset) return false;
  return std::any_of(f.ranks.begin(), f.ranks.end(),
                     [&](int r) { return b.before_rise.count({f.category, r}) > 0; });
}

// A rank finding nobody pays for: its peers wait no longer for the rank at their collectives, the
// replay gives nothing for fixing it, and neither its iteration nor its process's CPU time exceeds
// its peers' (every figure measured). Its ops' extra wall time was absorbed: the rank waited less
// elsewhere, or lost the CPU inside them on a shared host. Recorded (CI, a clean 4-rank job on 2
// cores): "rank 0 is a straggler: aten::mm takes 9.2 ms/iter vs 1.6", its iteration 25.21 ms
// against its peers' 25.21, its CPU time 7.70 against 7.82, its peers' extra wait 0, replay 0.
bool NobodyWaitsForIt(const Finding& f, double floor_ms) {
  if (f.finding_class != FindingClass::kSubset || !PeersWaitForItsExcess(f.category) ||
      f.what_if_ms < 0 || f.what_if_ms >= floor_ms)
    return false;
  const double wait = Evidence(f, "peers_extra_collective_wait_ms");
  const double work = Evidence(f, "own_work_ms") - Evidence(f, "peers_own_work_ms");
  const double cpu = Evidence(f, "own_cpu_time_ms") - Evidence(f, "peers_own_cpu_time_ms");
  return wait <= 0 && work <= 0 && cpu <= 0;  // a missing figure (NaN) compares false
}

}  // namespace

std::optional<double> OwnWorkExcessMs(const Finding& f) {
  // Each total is a floor of how much more the rank computes (a Python frame's self time also
  // holds waits no op names, which hides excess in the CPU total): the largest one counts.
  std::optional<double> excess;
  for (const auto& [own_key, peers_key] : kOwnWorkTotals) {
    const double own = Evidence(f, own_key), peers = Evidence(f, peers_key);
    if (std::isnan(own) || std::isnan(peers)) continue;
    excess = excess ? std::max(*excess, own - peers) : own - peers;
  }
  return excess;
}

std::optional<CostLimit> LimitOf(const Finding& f, const CostBudget& budget) {
  if (!IsTimeCost(f.category) || f.impact_ms <= 0) return std::nullopt;
  std::optional<CostLimit> limit;
  const auto tighten = [&limit](double ms, std::string why) {
    if (std::isnan(ms) || ms < 0) ms = 0;
    if (!limit || ms < limit->ms) limit = CostLimit{ms, std::move(why)};
  };
  if (budget.iteration_ms > 0)
    tighten(budget.iteration_ms,
            fmt::format("the whole iteration takes {:.1f} ms", budget.iteration_ms));
  if (f.finding_class == FindingClass::kSubset && PeersWaitForItsExcess(f.category)) {
    if (const std::optional<double> excess = OwnWorkExcessMs(f))
      tighten(policy::kCostSlack * *excess,
              fmt::format("its own work exceeds its peers' by {:.1f} ms an iteration, all they "
                          "wait for it",
                          std::max(*excess, 0.0)));
  }
  if (budget.rise_ms && !BeforeRise(f, budget))
    tighten(policy::kCostSlack * std::max(*budget.rise_ms, 0.0),
            fmt::format("the iteration rose {:.1f} ms over the job's healthy rate",
                        std::max(*budget.rise_ms, 0.0)));
  if (budget.since_baseline_rise_ms && f.evidence.count("baseline_window"))
    tighten(policy::kCostSlack * std::max(*budget.since_baseline_rise_ms, 0.0),
            fmt::format("the job's unprofiled iterations before this window ran {:.1f} ms over "
                        "its healthy rate",
                        std::max(*budget.since_baseline_rise_ms, 0.0)));
  return limit;
}

void BoundCosts(const CostBudget& budget, Diagnosis* d) {
  const double floor_ms = std::max(policy::kMinAbsMs, policy::kMinFraction * budget.iteration_ms);
  std::vector<Finding> kept;
  kept.reserve(d->findings.size());
  for (Finding& f : d->findings) {
    const std::optional<CostLimit> limit = LimitOf(f, budget);
    if (!limit || f.impact_ms <= limit->ms) {
      kept.push_back(std::move(f));
      continue;
    }
    const double claimed = f.impact_ms;
    if (limit->ms < floor_ms) {
      d->job.notes.push_back(fmt::format(
          "dropped: \"{}\" claimed {:.1f} ms an iteration, but {} (under the {:.1f} ms a finding "
          "must cost)",
          f.summary, claimed, limit->why, floor_ms));
      continue;
    }
    f.impact_ms = limit->ms;
    if (budget.iteration_ms > 0) f.impact_fraction = f.impact_ms / budget.iteration_ms;
    f.evidence["claimed_ms"] = claimed;
    f.evidence_text["cost_bound"] = fmt::format(
        "its rule's figure, {:.1f} ms an iteration, is more than was lost: {}; {:.1f} ms counted",
        claimed, limit->why, f.impact_ms);
    f.summary +=
        fmt::format(" (at most {:.1f} ms/iter of it is lost: {})", f.impact_ms, limit->why);
    kept.push_back(std::move(f));
  }
  d->findings = std::move(kept);
  // The replay of what fixing each one gives, on the bounded figures; the ranking follows it.
  AddWhatIf(d->arrivals, d);
  std::erase_if(d->findings, [&](const Finding& f) {
    if (!NobodyWaitsForIt(f, floor_ms)) return false;
    d->job.notes.push_back(fmt::format(
        "dropped: \"{}\": its peers wait no longer for it, its iteration and CPU time are no "
        "more than theirs, and the replay gives {:.1f} ms for fixing it",
        f.summary, f.what_if_ms));
    return true;
  });
  internal::SortFindings(&d->findings);
}

}  // namespace perftracker::diagnose
