#include "diagnose/since_baseline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <set>
#include <string>

#include "diagnose/causes.h"
#include "diagnose/diff.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"
#include "pattern/names.h"
#include "trace/event.h"

namespace perftracker::diagnose {
namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

double MedianIterationMs(const std::vector<pattern::RankSummary>& ranks) {
  std::vector<double> v;
  for (const auto& r : ranks)
    if (!r.iteration_ms.empty()) v.push_back(r.MeanIterationMs());
  return v.empty() ? 0 : internal::Median(v);
}

// The ranks of a window, sorted: those sampled and those with metrics.
std::vector<int> AllRanks(const std::vector<pattern::RankSummary>& now,
                          const pattern::RankMetrics& metrics) {
  std::set<int> all;
  for (const auto& r : now) all.insert(r.rank);
  for (const auto& [r, m] : metrics) all.insert(r);
  return {all.begin(), all.end()};
}

// The ranks the window's own findings named slow (subset problems other than a silent, hung or
// leaking rank), and what the costliest of them loses the job per iteration: every other rank
// waits for them, so a rise on all ranks up to that cost is their echo.
struct SlowRanks {
  std::set<int> ranks;
  double cost_ms = 0;
};
SlowRanks SlowRanksOf(const std::vector<Finding>& existing) {
  SlowRanks slow;
  for (const Finding& f : existing)
    if (f.finding_class == FindingClass::kSubset && f.category != Category::kHang &&
        f.category != Category::kMissingRank && f.category != Category::kMemoryGrowth) {
      slow.ranks.insert(f.ranks.begin(), f.ranks.end());
      slow.cost_ms = std::max(slow.cost_ms, f.impact_ms);
    }
  return slow;
}

bool AllFunctions(const Finding& f, bool (*pred)(const FunctionRef&)) {
  return !f.functions.empty() && std::all_of(f.functions.begin(), f.functions.end(), pred);
}
// A collective's time is mostly the wait for the last peer to arrive.
bool IsCollective(const FunctionRef& fn) { return !pattern::CollectiveOp(fn.name).empty(); }
// A Python function encloses the waits (DDP's all-reduce waits inside run_backward).
bool MayEncloseWaits(const FunctionRef& fn) {
  return fn.kind == trace::EventKindName(trace::EventKind::kPythonFunction) || IsCollective(fn);
}

// The ranks whose own work this comparison finds slower: a subset's calls other than
// collectives (rank 1's aten::addmm 1.6x per call, a process sharing its core). The other ranks
// wait for them at the collectives they share.
std::set<int> OwnWorkSlower(const std::vector<Finding>& changes) {
  std::set<int> ranks;
  for (const Finding& f : changes)
    if (f.finding_class == FindingClass::kSubset && f.category == Category::kRegression &&
        !AllFunctions(f, IsCollective))
      ranks.insert(f.ranks.begin(), f.ranks.end());
  return ranks;
}

// The healthy rate's figures on a finding it measured.
void AddRateEvidence(const HealthyRate& rate, Finding* f) {
  f->evidence["healthy_ms"] = rate.healthy.ms;
  f->evidence["recent_ms"] = rate.recent.ms;
  if (rate.slowdown_step) f->evidence["slowdown_iteration"] = static_cast<double>(*rate.slowdown_step);
}

// A window slower than the baseline by DELTA_MS an iteration with no profiled function to name:
// the finding the OS's change (added by the caller) explains.
Finding SpreadOverAllTheWork(const std::vector<int>& all_ranks, double base_ms, double now_ms,
                             double delta_ms, int64_t baseline_window, const HealthyRate* rate) {
  Finding f;
  f.finding_class = FindingClass::kAll;
  f.category = Category::kRegression;
  f.ranks = all_ranks;
  f.impact_ms = delta_ms;
  f.impact_fraction = now_ms > 0 ? delta_ms / now_ms : 0;
  f.confidence = policy::kConfidenceTimingOnly;
  f.evidence["baseline_ms"] = base_ms;
  f.evidence["window_ms"] = now_ms;
  f.evidence["baseline_window"] = static_cast<double>(baseline_window);
  if (rate) AddRateEvidence(*rate, &f);
  f.summary = fmt::format(
      "the iteration takes {:.1f} ms ({:.1f} ms in the baseline), spread over all the work", now_ms,
      base_ms);
  f.suggestion =
      "Compare the environment of the two windows: other processes on the hosts, CPU quotas "
      "and frequency, the input data, or the job's own periodic work (checkpoints, logging).";
  return f;
}

// The rise since the baseline a window's changes may explain, or why there is none.
struct RiseToExplain {
  double delta_ms = 0;  // what fixing it gives, an iteration
  bool explain = false;
  std::string note;  // when not: why, for the diagnosis (empty: nothing worth saying)
};
// BASE_MS, NOW_MS: the profiled iterations of the baseline window (BASE_NAME) and of this one.
RiseToExplain RiseOf(const HealthyReference& ref, double base_ms, double now_ms,
                     const std::string& base_name) {
  const double profiled_rise_ms = now_ms - base_ms;
  // The job's unprofiled slowdown since it was healthy, where the history knows it (the fit's
  // slowdown, or its latest iterations): what fixing it gives. Profiled iterations are inflated,
  // and differently in each window (CI, torch 2.13, a clean job on 2 shared cores: the baseline
  // window's iterations 1.09x the unprofiled ones, a later window's 1.44x, run_backward and
  // gloo:all_reduce 1.4x per call on every rank while the job's unprofiled rate stayed at
  // 15.2 ms).
  const std::optional<double> unprofiled = ref.rate ? ref.rate->UnprofiledRiseMs() : std::nullopt;
  RiseToExplain r{unprofiled.value_or(profiled_rise_ms), true, ""};
  if (ref.Slowdown()) return r;
  // Nothing to explain: the window is no slower than the healthy job was, unprofiled where the
  // history knows it, else profiled.
  const bool profiled_slower =
      base_ms > 0 && profiled_rise_ms >= policy::kBaselineSlowdown * base_ms;
  if (!unprofiled || !(base_ms > 0)) {
    r.explain = profiled_slower;
  } else if (r.delta_ms < policy::kBaselineSlowdown * ref.rate->healthy.ms) {
    r.explain = false;
    if (profiled_slower)
      r.note = fmt::format(
          "the profiled iteration takes {:.1f} ms, {:.2f}x {} ({:.1f} ms), but the job's last {} "
          "unprofiled iterations before this window took {:.1f} ms, within {:.0f}% of its "
          "healthy rate ({:.1f} ms): the profiler slowed this window more than the baseline, and "
          "nothing is compared with it",
          now_ms, now_ms / base_ms, base_name, base_ms, ref.rate->latest.points,
          ref.rate->latest.ms, 100 * policy::kBaselineSlowdown, ref.rate->healthy.ms);
  }
  return r;
}

// A spoiled baseline window: the comparison is with the job's healthy rate alone.
SinceBaselineResult SinceHealthyRate(const Baseline& base,
                                     const std::vector<pattern::RankSummary>& now,
                                     const pattern::RankMetrics& metrics,
                                     const std::vector<Finding>& existing,
                                     const HealthyReference& ref) {
  SinceBaselineResult result;
  const std::string spoiled =
      fmt::format("the baseline window (iterations {}..{}) is spoiled: {}", base.first_iteration,
                  base.last_iteration, ref.baseline.why);
  const HealthyRate* rate = ref.Slowdown();
  if (rate == nullptr) {
    result.note = spoiled + "; nothing compared with it";
    return result;
  }
  const double rise = rate->RiseMs();
  // What the window found already may be the rise: an all-rank cause the OS shows, or slow ranks
  // that cost the job as much (every rank waits for them).
  const bool os_cause = std::any_of(existing.begin(), existing.end(), [](const Finding& f) {
    return f.finding_class == FindingClass::kAll &&
           (f.category == Category::kCpuThrottled || f.category == Category::kCpuContention);
  });
  if (os_cause || SlowRanksOf(existing).cost_ms * policy::kEchoSlack >= rise) {
    result.note = fmt::format("{}; compared with the job's healthy rate instead: {}", spoiled,
                              rate->Describe());
    return result;
  }
  if (rate->Ratio() < 1 + policy::kHealthyRiseAtLeast) {
    result.note = fmt::format(
        "{}; compared with the job's healthy rate instead: {}, too little to name without a "
        "profiled change",
        spoiled, rate->Describe());
    return result;
  }
  Finding f;
  f.finding_class = FindingClass::kAll;
  f.category = Category::kRegression;
  f.ranks = AllRanks(now, metrics);
  f.impact_ms = rise;
  f.impact_fraction = rate->recent.ms > 0 ? rise / rate->recent.ms : 0;
  f.confidence = policy::kConfidenceTimingOnly;
  AddRateEvidence(*rate, &f);
  f.evidence["baseline_window"] = static_cast<double>(base.window_id);
  f.evidence_text["reference"] = spoiled;
  f.summary = fmt::format(
      "every rank runs {:.2f}x slower than the job's healthy rate since iteration {} ({:.1f} ms an "
      "iteration, {:.1f} ms before); {}, so no profiled function is compared with it",
      rate->Ratio(), *rate->slowdown_step, rate->recent.ms, rate->healthy.ms, spoiled);
  f.suggestion =
      "Look at what changed on every rank at that iteration: the input data or its length, the "
      "host's other processes, CPU quotas and frequency, or the job's own periodic work; a "
      "window opened with `perftracker trigger` now is compared with the healthy rate too.";
  result.findings.push_back(std::move(f));
  return result;
}

}  // namespace

namespace internal {

OsChange OsChangeSince(const pattern::RankMetrics& base, const pattern::RankMetrics& now) {
  OsChange c;
  // A rank without a quota (too few periods to tell) is not throttled: the typical rank is
  // throttled only when most ranks are (one rank under a quota is the peer comparison's).
  const auto throttled = [](const std::map<std::string, double>& m) {
    const double s = ThrottledShare(m);
    return std::isnan(s) ? 0.0 : s;
  };
  const auto any_quota = [](const pattern::RankMetrics& ms) {
    return std::any_of(ms.begin(), ms.end(),
                       [](const auto& rm) { return !std::isnan(ThrottledShare(rm.second)); });
  };
  const double thr_b = any_quota(base) ? MedianOverRanks(base, throttled) : kNone;
  const double thr_n = any_quota(now) ? MedianOverRanks(now, throttled) : kNone;
  const double wait_b = MedianOverRanks(base, RunQueueWaitPerCpu),
               wait_n = MedianOverRanks(now, RunQueueWaitPerCpu);
  if (!std::isnan(thr_n)) c.evidence["throttled_share"] = thr_n;
  if (!std::isnan(thr_b)) c.evidence["baseline_throttled_share"] = thr_b;
  if (!std::isnan(wait_n)) c.evidence["runq_wait_per_cpu_s"] = wait_n;
  if (!std::isnan(wait_b)) c.evidence["baseline_runq_wait_per_cpu_s"] = wait_b;
  // A quota that throttles the typical rank now and did not (half as often at most) then.
  if (!std::isnan(thr_n) && thr_n >= policy::kThrottledShare &&
      (std::isnan(thr_b) || thr_b <= policy::kThrottledPeersAtMost * thr_n)) {
    c.category = Category::kCpuThrottled;
    c.cause = Cause::kHardware;
    c.text = fmt::format(
        "their CPU quota throttles them in {:.0f}% of its scheduling periods ({} in the baseline "
        "window)",
        100 * thr_n,
        std::isnan(thr_b) ? std::string("no quota") : fmt::format("{:.0f}%", 100 * thr_b));
    return c;
  }
  // Every rank waiting longer, not the median of a few: with two ranks one denied the CPU moves
  // the median alone (that rank is the peer comparison's).
  int rose = 0, known = 0;
  for (const auto& [r, m] : now) {
    auto b = base.find(r);
    if (b == base.end()) continue;
    const double wb = RunQueueWaitPerCpu(b->second), wn = RunQueueWaitPerCpu(m);
    if (std::isnan(wb) || std::isnan(wn) || wb <= 0) continue;
    ++known;
    rose += wn >= policy::kRunQueueWaitRatio * wb && wn >= policy::kRunQueueWaitAtLeast;
  }
  if (!std::isnan(wait_n) && !std::isnan(wait_b) && wait_b > 0 &&
      wait_n >= policy::kRunQueueWaitRatio * wait_b && wait_n >= policy::kRunQueueWaitAtLeast &&
      rose >= policy::kBaselineOsRanksShare * known) {
    c.category = Category::kCpuContention;
    c.cause = Cause::kConfiguration;
    c.text = fmt::format(
        "they wait for a CPU {:.2f} s per second of their own CPU ({:.2f} in the baseline "
        "window): something else now runs on their hosts",
        wait_n, wait_b);
    return c;
  }
  if (!std::isnan(thr_n) || !std::isnan(wait_n))
    c.text = "nothing the OS reports changed (CPU quota, run-queue wait)";
  return c;
}

namespace {

// F is a change on every rank of one host, or on most of the job's RANKS there (the others' under
// the significance the comparison asks: aten::mm 1.28x on 3 of 4 ranks, CI, torch 1.13): the
// same calls, each slower, with the OS's figures at hand and none of them changed.
bool SameCallsSlowerOnOneHost(const Finding& f, const OsChange& os, size_t ranks) {
  const auto change = f.evidence_text.find("change");
  const bool most =
      f.finding_class == FindingClass::kAll ||
      static_cast<double>(f.ranks.size()) >= policy::kAllOsRanksShare * static_cast<double>(ranks);
  return most && f.category == Category::kRegression && !os.category && !os.text.empty() &&
         f.hosts.size() == 1 && f.functions.size() == 1 && change != f.evidence_text.end() &&
         change->second == diff::kChangeSameCallsSlower;
}

}  // namespace

bool HostSpeedDrift(const Finding& f, const OsChange& os, size_t ranks) {
  // Within one process the code and its libraries are those of the baseline window: the same
  // CPU calls taking longer on every rank of one host, with the OS's figures at hand and none
  // of them changed, is that host running the same work slower. Measured on this project's CI
  // VM (torch 1.13, a clean 4-rank job on 2 cores beside other tests): aten::mm 1.5x and 2.2x
  // per call on every rank for hundreds of iterations, the run-queue wait 1.22 s per CPU second
  // in both windows, the job back to its healthy speed later. A quota or a competing process
  // shows in the OS's figures and stays a finding (OsChangeSince); so does a change on several
  // hosts at once (not one host's drift: inputs that grew, more likely), a collective's (the
  // network's) and a kernel's (a throttled GPU has NVML's rules).
  if (!SameCallsSlowerOnOneHost(f, os, ranks)) return false;
  const FunctionRef& fn = f.functions.front();
  return fn.kind == trace::EventKindName(trace::EventKind::kCpuOp) &&
         pattern::CollectiveOp(fn.name).empty();
}

double HostDriftRatio(const std::vector<Finding>& changes, const OsChange& os, size_t ranks,
                      bool slow_rank_named) {
  double ratio = 0;
  bool work_changed = false;
  for (const Finding& f : changes) {
    if (HostSpeedDrift(f, os, ranks) && f.evidence.count("ratio"))
      ratio = std::max(ratio, f.evidence.at("ratio"));
    if (HostSpeedDrift(f, os, ranks)) continue;  // the drift itself
    for (const FunctionRef& fn : f.functions)
      if (fn.kind != trace::EventKindName(trace::EventKind::kPythonFunction)) work_changed = true;
  }
  if (ratio > 0 || work_changed || slow_rank_named) return ratio;
  // Nothing the program runs under its Python frames changed, no op, no collective, no rank
  // named slow: a builtin's same calls taking longer on every rank is the host's timing (CI,
  // torch 1.13, a clean job: run_backward 1.30x per call on every rank, aten::mm unchanged,
  // run-queue wait 1.24 s per CPU second in both windows).
  return kAnyDrift;
}

bool BuiltinInHostDrift(const Finding& f, const OsChange& os, size_t ranks, double drift_ratio) {
  // The Python tracer's C calls hold C work in their own time (torch 1.13's backward runs its
  // ops inside run_backward): on CI, beside aten::mm 1.44x per call, <built-in method
  // run_backward> 1.41x on every rank, nothing the OS reports changed.
  if (drift_ratio <= 0 || !SameCallsSlowerOnOneHost(f, os, ranks)) return false;
  const FunctionRef& fn = f.functions.front();
  const auto ratio = f.evidence.find("ratio");
  return fn.kind == trace::EventKindName(trace::EventKind::kPythonFunction) &&
         fn.name.rfind("<built-in", 0) == 0 && ratio != f.evidence.end() &&
         ratio->second <= drift_ratio * policy::kHostDriftSlack;
}

bool IsHostDrift(const Finding& f, const OsChange& os, size_t ranks, double drift_ratio) {
  return HostSpeedDrift(f, os, ranks) || BuiltinInHostDrift(f, os, ranks, drift_ratio);
}

}  // namespace internal

bool InBaselineSample(int rank, int world) {
  const int n = static_cast<int>(policy::kBaselineSampleRanks);
  if (world <= n || rank < 0) return true;
  const int stride = (world + n - 1) / n;
  return rank % stride == 0;
}

namespace {

// The note of a window slower than the baseline where no profiled function or OS figure
// changed. A rank the window names slow (SLOW) is what changed, its peers waiting for it: said
// so, not "nothing", beside the finding that names it.
std::string NothingElseChangedNote(double now_ms, double base_ms, const std::string& base_name,
                                   const std::set<int>& slow, const std::string& os_text) {
  const std::string head = fmt::format("the iteration takes {:.1f} ms, {:.2f}x {} ({:.1f} ms)",
                                       now_ms, now_ms / base_ms, base_name, base_ms);
  const std::string os = os_text.empty() ? "" : ", and " + os_text;
  if (slow.empty())
    return fmt::format("{}, and nothing measurable changed since: no profiled function{}", head,
                       os);
  return fmt::format(
      "{}: the {} named in this window ({}) account{} for it, and nothing else measurable changed "
      "since: no other profiled function{}",
      head, slow.size() == 1 ? "rank" : "ranks", fmt::join(slow, ", "), slow.size() == 1 ? "s" : "",
      os);
}

}  // namespace

SinceBaselineResult SinceBaseline(const Baseline& base,
                                  const std::vector<pattern::RankSummary>& now,
                                  const pattern::RankMetrics& now_metrics,
                                  const std::vector<Finding>& existing,
                                  const DiagnoseOptions& options, const HealthyReference& ref) {
  SinceBaselineResult result;
  std::vector<Finding>& out = result.findings;
  if (base.ranks.empty() || now.empty()) return result;
  if (ref.baseline.spoiled) return SinceHealthyRate(base, now, now_metrics, existing, ref);
  const double base_ms = MedianIterationMs(base.ranks), now_ms = MedianIterationMs(now);
  // The profiled iteration's rise, as the functions' figures are taken (means of profiled
  // iterations): a function enclosing the waits rises with it.
  const double profiled_rise_ms = now_ms - base_ms;
  const HealthyRate* rate = ref.Slowdown();
  const std::string base_name = fmt::format("the baseline window (iterations {}..{})",
                                            base.first_iteration, base.last_iteration);
  RiseToExplain rise = RiseOf(ref, base_ms, now_ms, base_name);
  if (!rise.explain) {
    result.note = std::move(rise.note);
    return result;
  }
  const double delta_ms = rise.delta_ms;
  Diagnosis d = Diff(base.ranks, now, options, DiffNames{base_name, "this window"});
  std::set<int> named;
  for (const Finding& f : existing) named.insert(f.ranks.begin(), f.ranks.end());
  const std::vector<int> all_ranks = AllRanks(now, now_metrics);
  // The ranks that wait for the ranks the window named slow: every other rank. What rose on
  // exactly them since the baseline (DDP's all-reduce waits inside run_backward) is the slow
  // ranks' echo.
  const SlowRanks slow_ranks = SlowRanksOf(existing);
  const std::set<int>& slow = slow_ranks.ranks;
  const double slow_cost_ms = slow_ranks.cost_ms;
  std::vector<int> waiters;
  if (!slow.empty())
    std::set_difference(all_ranks.begin(), all_ranks.end(), slow.begin(), slow.end(),
                        std::back_inserter(waiters));
  const std::set<int> own_slow = OwnWorkSlower(d.findings);
  const internal::OsChange os = internal::OsChangeSince(base.metrics, now_metrics);
  std::vector<std::string> host_speed;  // the functions HostSpeedDrift took, as the note says
  const double ratio = internal::HostDriftRatio(d.findings, os, all_ranks.size(), !slow.empty());
  for (Finding& f : d.findings) {
    if (f.category != Category::kRegression && f.category != Category::kStraggler) continue;
    // "Slower, spread thinly over many functions": on a shared host that is its drift, unless
    // the OS says what changed (below).
    if (f.evidence_text.count("change") &&
        f.evidence_text.at("change") == internal::diff::kChangeSpreadThinly)
      continue;
    if (internal::IsHostDrift(f, os, all_ranks.size(), ratio)) {
      host_speed.push_back(fmt::format("{} {:.2f}x", f.functions.front().name,
                                       f.evidence.count("ratio") ? f.evidence.at("ratio") : 0.0));
      continue;
    }
    if (!f.ranks.empty() &&
        std::all_of(f.ranks.begin(), f.ranks.end(), [&](int r) { return named.count(r) > 0; }))
      continue;
    // The same program in both windows: a call count that moved at no cost is a window's edge
    // or a generator's resumptions, not what slowed the job (measured on torch 1.13: a clean
    // job's sampler __iter__ "called 0.1 instead of 6.4 times per iteration", +0.007 ms of a
    // 51 ms iteration). Diff names it between two runs, where the program may have changed.
    if (MsToUs(f.impact_ms) < internal::diff::ProgramChangeFloorUs(MsToUs(now_ms))) continue;
    // Some ranks waiting longer in a collective while this comparison names slower work on
    // others: they wait for those (CI: gloo:all_reduce 16.2 -> 30.5 ms/iter on rank 0 beside
    // rank 1's aten::addmm 1.6x per call, a process sharing rank 1's core), which are named.
    if (f.evidence.count("waiting_ranks") && !own_slow.empty()) continue;
    if (!waiters.empty() && f.finding_class == FindingClass::kSubset) {
      std::vector<int> ranks = f.ranks;
      std::sort(ranks.begin(), ranks.end());
      if (ranks == waiters) continue;
    }
    // While the window names a slow rank, a rise on every rank within the iteration's own rise
    // is its echo: all of them wait for it in the collectives they share, and its own part is
    // what it is named for (a finding's impact counts only its evidence: rank 2 throttled
    // 25.8 ms/iter, gloo:all_reduce +27.7 on every rank). A rise in collectives alone is that
    // wait whatever its size: the waiters' collectives can grow more than the iteration did
    // (gloo:all_reduce +12.9 ms/iter on a 0.1-CPU rank's peers, the iteration +11). A Python
    // function encloses the waits (DDP's all-reduce waits inside run_backward): its rise is the
    // echo up to what the slow rank costs the job or the iteration rose, whichever is more, and
    // a little beyond (policy kEchoSlack): run_backward +37.8 ms/iter on every rank, the median
    // iteration +37.4, the 0.1-CPU rank costing 58.0 (.ci/run at e183b7a). The iteration's rise
    // is the profiled one too where the healthy rate's (unprofiled) is less: a 0.05-CPU rank's
    // peers' run_backward +79.2, the profiled iteration +79.6, the healthy rate +57.2 (the
    // profiler inflates the throttled rank's work most). A rank whose cost the
    // peer comparison sees only in part (its compute in run_backward too, beside its peers'
    // waits) is named for 10.2 ms/iter while run_backward rises as much as the iteration did.
    if (!slow.empty() && f.finding_class == FindingClass::kAll &&
        (AllFunctions(f, IsCollective) || f.impact_ms <= delta_ms ||
         (AllFunctions(f, MayEncloseWaits) &&
          f.impact_ms <=
              std::max({delta_ms, profiled_rise_ms, slow_cost_ms}) * policy::kEchoSlack)))
      continue;
    // The comparison saw a sample of the ranks; a change on all of them is the job's.
    if (f.finding_class == FindingClass::kAll) f.ranks.assign(all_ranks.begin(), all_ranks.end());
    f.evidence["baseline_window"] = static_cast<double>(base.window_id);
    out.push_back(std::move(f));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Finding& a, const Finding& b) { return a.impact_ms > b.impact_ms; });
  if (out.size() > policy::kBaselineMaxFindings) out.resize(policy::kBaselineMaxFindings);

  const double fraction = now_ms > 0 ? delta_ms / now_ms : 0;
  // What the host's speed explains is said whatever else the window names.
  const std::string drift =
      host_speed.empty()
          ? ""
          : fmt::format(
                "every rank ran the same calls slower per call ({}) and {}: the host ran the same "
                "work slower (its clock, or a neighbour's use of its caches and memory), or every "
                "rank's inputs grew; not named as a finding",
                fmt::join(host_speed, ", "), os.text);
  if (out.empty() && !os.category) {
    result.note = drift.empty()
                      ? NothingElseChangedNote(now_ms, base_ms, base_name, slow, os.text)
                      : fmt::format("the iteration takes {:.1f} ms, {:.2f}x {} ({:.1f} ms); {}",
                                    now_ms, now_ms / base_ms, base_name, base_ms, drift);
    if (rate) result.note += "; " + rate->Describe();
    return result;
  }
  if (!drift.empty()) result.note = "since " + base_name + ", " + drift;
  if (out.empty())  // slower with no profiled function to name, but the OS says what changed
    out.push_back(SpreadOverAllTheWork(all_ranks, base_ms, now_ms, delta_ms, base.window_id, rate));
  Finding& top = out.front();
  for (const auto& [k, v] : os.evidence) top.evidence[k] = v;
  if (!os.text.empty()) top.evidence_text["os"] = os.text;
  if (os.category && top.finding_class == FindingClass::kAll) {
    top.category = *os.category;
    top.cause = os.cause;
    top.confidence = policy::kConfidenceOsEvidence;
    top.impact_ms = std::max(top.impact_ms, delta_ms);
    top.impact_fraction = std::max(top.impact_fraction, fraction);
    top.summary = fmt::format("every rank is {:.2f}x slower than in {} and {}; {}",
                              now_ms / base_ms, base_name, os.text, top.summary);
    top.suggestion =
        *os.category == Category::kCpuThrottled
            ? "Raise or remove the CPU quota of the job's cgroup (cpu.max / cpu.cfs_quota_us), or "
              "ask the scheduler for as many CPUs as the ranks' threads use."
            : "Find what else now runs on the hosts (top, pidstat) and move it, or pin the ranks "
              "to CPUs of their own.";
  }
  return result;
}

}  // namespace perftracker::diagnose
