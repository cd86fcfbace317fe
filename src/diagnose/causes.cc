#include "diagnose/causes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "diagnose/analysis.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

double Get(const std::map<std::string, double>& m, const char* key) {
  auto v = m.find(key);
  return v == m.end() ? kNone : v->second;
}

template <typename F>
double PeersMedian(const RankMetrics& metrics, int rank, F value) {
  return MedianOverRanks(metrics, value, rank);
}

// Per-iteration ms of a window total in seconds: the window ran window.seconds for its
// iterations of ITERATION_MS each.
double PerIterationMs(const std::map<std::string, double>& m, double seconds, double iteration_ms) {
  const double window = Get(m, "window.seconds");
  if (std::isnan(window) || window <= 0 || iteration_ms <= 0) return kNone;
  return seconds * iteration_ms / window;
}

std::string HostOf(const Finding& f) { return f.hosts.empty() ? "its host" : "host " + f.hosts[0]; }

// What every cause rule sets on the finding it explains.
void Rewrite(Finding* f, const char* category, Cause cause, std::string summary,
             std::string suggestion) {
  f->summary = std::move(summary);
  f->suggestion = std::move(suggestion);
  f->category = category;
  f->cause = cause;
  f->confidence = policy::kConfidenceOsEvidence;
}

bool IsHostExplainable(const Finding& f) {
  return f.finding_class == FindingClass::kSubset && f.ranks.size() == 1 &&
         f.category != "communication" && f.category != "low_bandwidth" && f.category != "hang" &&
         f.category != "missing_rank" && f.category != "collective_mismatch" &&
         f.category != "rank_crash";
}

}  // namespace

double ThrottledShare(const std::map<std::string, double>& m) {
  const double periods = Get(m, "cgroup.nr_periods");
  const double throttled = Get(m, "cgroup.nr_throttled");
  if (std::isnan(periods) || std::isnan(throttled) || periods < policy::kMinQuotaPeriods)
    return kNone;
  return throttled / periods;
}

double RunQueueWaitPerCpu(const std::map<std::string, double>& m) {
  const double run = Get(m, "proc.run_s");
  const double wait = Get(m, "proc.runq_wait_s");
  if (std::isnan(run) || std::isnan(wait) || run <= 0) return kNone;
  return wait / run;
}

bool CpuThrottledRule::Explain(const CauseInput& in, Finding* f) const {
  const int rank = f->ranks[0];
  auto it = in.metrics.find(rank);
  if (it == in.metrics.end()) return false;
  const double share = ThrottledShare(it->second);
  if (std::isnan(share) || share < policy::kThrottledShare) return false;
  const double peers = PeersMedian(in.metrics, rank, ThrottledShare);
  // Throttled alike, the peers are no yardstick: an all-rank limit, not this rank's.
  if (!std::isnan(peers) && peers > share * policy::kThrottledPeersAtMost) return false;
  const std::map<std::string, double>& m = it->second;
  const double throttled_s = Get(m, "cgroup.throttled_s");
  const double quota = Get(m, "cgroup.quota_cpus");
  const double window = Get(m, "window.seconds");
  f->evidence["throttled_periods_share"] = share;
  if (!std::isnan(peers)) f->evidence["peers_throttled_periods_share"] = peers;
  if (!std::isnan(throttled_s)) f->evidence["throttled_s"] = throttled_s;
  if (!std::isnan(quota) && quota > 0) f->evidence["quota_cpus"] = quota;
  if (!std::isnan(window)) f->evidence["window_s"] = window;
  const std::string quota_text =
      !std::isnan(quota) && quota > 0 ? fmt::format(" of {:.2f} CPUs", quota) : "";
  const std::string time_text =
      !std::isnan(throttled_s) && !std::isnan(window) && window > 0
          ? fmt::format(", {:.1f} s throttled in a {:.1f} s window", throttled_s, window)
          : "";
  f->evidence_text["reasoning"] = fmt::format(
      "rank {}'s cgroup CPU quota{} throttled it in {:.0f}% of its scheduling periods{} ({:.0f}% "
      "for its peers): the kernel stops it, not its own work",
      rank, quota_text, share * 100, time_text, std::isnan(peers) ? 0.0 : peers * 100);
  Rewrite(f, name(), Cause::kHardware,
          fmt::format("rank {} is throttled by its cgroup's CPU quota{}: held off the CPU in "
                      "{:.0f}% of its scheduling periods{}, it runs slower than its peers with "
                      "the same work; the job loses {:.1f} ms/iter",
                      rank, quota_text, share * 100, time_text, f->impact_ms),
          "raise or remove the CPU quota of that rank's container or cgroup (cpu.max, "
          "cpu.cfs_quota_us; Kubernetes CPU limits) to at least what its peers use, or give it "
          "fewer threads (OMP_NUM_THREADS, torch.set_num_threads, DataLoader workers)");
  return true;
}

bool RunQueueContentionRule::Explain(const CauseInput& in, Finding* f) const {
  const int rank = f->ranks[0];
  auto it = in.metrics.find(rank);
  if (it == in.metrics.end()) return false;
  const std::map<std::string, double>& m = it->second;
  const double own = RunQueueWaitPerCpu(m);
  const double peers = PeersMedian(in.metrics, rank, RunQueueWaitPerCpu);
  if (std::isnan(own) || std::isnan(peers)) return false;
  if (own < peers * policy::kRunQueueWaitRatio) return false;
  // The wait it has beyond what its peers' rate would give it for the same CPU time.
  const double extra_s = Get(m, "proc.runq_wait_s") - peers * Get(m, "proc.run_s");
  const double extra_ms = PerIterationMs(m, extra_s, in.iteration_ms);
  if (std::isnan(extra_ms) || extra_ms < f->impact_ms * policy::kRunQueueExplainsShare)
    return false;
  f->evidence["runq_wait_per_cpu_s"] = own;
  f->evidence["peers_runq_wait_per_cpu_s"] = peers;
  f->evidence["extra_runq_wait_ms_per_iteration"] = extra_ms;
  const double running = Get(m, "host.procs_running");
  const double cores = Get(m, "host.cores");
  if (!std::isnan(running)) f->evidence["host_runnable_threads"] = running;
  if (!std::isnan(cores)) f->evidence["host_cores"] = cores;
  f->evidence_text["reasoning"] = fmt::format(
      "rank {}'s threads waited {:.2f} s in the run queue per second on a CPU, its peers {:.2f} "
      "s: {:.1f} ms per iteration more than theirs for its own work; the scheduler, not its "
      "work, slows it",
      rank, own, peers, extra_ms);
  Rewrite(f, name(), Cause::kConfiguration,
          fmt::format("rank {} is denied the CPU on {}: its threads wait {:.1f}x longer in the "
                      "run queue per second of CPU than its peers' ({:.1f} ms per iteration "
                      "more), so it runs slower with the same work; the job loses {:.1f} ms/iter",
                      rank, HostOf(*f), peers > 0 ? own / peers : own, extra_ms, f->impact_ms),
          "find what shares that rank's CPUs (top -H, a pinned or high-priority process, a lower "
          "nice value of the rank, more threads than its cores); give every rank its own cores "
          "(taskset, numactl) and move other processes off them");
  return true;
}

const std::vector<std::unique_ptr<CauseRule>>& CauseRules() {
  static const auto* rules = [] {
    auto* v = new std::vector<std::unique_ptr<CauseRule>>;
    v->push_back(std::make_unique<CpuThrottledRule>());
    v->push_back(std::make_unique<RunQueueContentionRule>());
    return v;
  }();
  return *rules;
}

const CauseRule* ExplainRankFinding(const CauseInput& in, Finding* f) {
  if (!IsHostExplainable(*f)) return nullptr;
  for (const auto& rule : CauseRules())
    if (rule->Explain(in, f)) return rule.get();
  // None fired: a busy host is no evidence against this rank. Say so where it is busy, so that
  // nobody reads the host's load as the cause.
  auto it = in.metrics.find(f->ranks[0]);
  if (it == in.metrics.end()) return nullptr;
  const double running = Get(it->second, "host.procs_running");
  const double cores = Get(it->second, "host.cores");
  const double own = RunQueueWaitPerCpu(it->second);
  const double peers = PeersMedian(in.metrics, f->ranks[0], RunQueueWaitPerCpu);
  if (!std::isnan(running) && !std::isnan(cores) && running > cores * policy::kOversubscribed &&
      !std::isnan(own) && !std::isnan(peers)) {
    f->evidence["runq_wait_per_cpu_s"] = own;
    f->evidence["peers_runq_wait_per_cpu_s"] = peers;
    f->evidence_text["host"] = fmt::format(
        "{} is busy ({:.1f} runnable threads on {:.0f} cores) but rank {} waits for a CPU no "
        "more than its peers ({:.2f} vs {:.2f} s per CPU second): the host is not why it is "
        "slower",
        HostOf(*f), running, cores, f->ranks[0], own, peers);
  }
  return nullptr;
}

std::vector<Finding> FindThrottledRanks(const CauseInput& in,
                                        const std::map<int, std::string>& hosts,
                                        const std::vector<Finding>& existing) {
  std::vector<Finding> out;
  if (in.iteration_ms <= 0) return out;
  for (const auto& entry : in.metrics) {
    // A named copy, not a structured binding: clang 14 (the fuzz build) cannot capture one.
    const int rank = entry.first;
    const auto& m = entry.second;
    const bool named = std::any_of(existing.begin(), existing.end(), [&](const Finding& f) {
      return std::find(f.ranks.begin(), f.ranks.end(), rank) != f.ranks.end();
    });
    if (named) continue;
    const double throttled_ms = PerIterationMs(m, Get(m, "cgroup.throttled_s"), in.iteration_ms);
    if (std::isnan(throttled_ms) || throttled_ms < policy::kMinAbsMs ||
        throttled_ms < in.iteration_ms * policy::kMinFraction)
      continue;
    Finding f;
    f.finding_class = FindingClass::kSubset;
    f.category = "straggler";
    f.ranks = {rank};
    if (auto h = hosts.find(rank); h != hosts.end() && !h->second.empty()) f.hosts = {h->second};
    f.impact_ms = throttled_ms;
    f.impact_fraction = throttled_ms / in.iteration_ms;
    f.evidence["throttled_ms_per_iteration"] = throttled_ms;
    if (CpuThrottledRule().Explain(in, &f)) out.push_back(std::move(f));
  }
  return out;
}

}  // namespace perftracker::diagnose
