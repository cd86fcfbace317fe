#include "diagnose/all_rank_os.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "base/median.h"
#include "base/units.h"
#include "diagnose/causes.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

double Value(const std::map<std::string, double>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? std::nan("") : it->second;
}

// The finding of an all-rank cause the OS names: every rank, a configuration the kernel shows.
Finding AllRankOsFinding(Category category, const std::vector<int>& ranks,
                         const std::set<std::string>& hosts) {
  Finding f;
  f.finding_class = FindingClass::kAll;
  f.category = category;
  f.cause = Cause::kConfiguration;
  f.confidence = policy::kConfidenceOsEvidence;
  f.ranks = ranks;
  f.hosts.assign(hosts.begin(), hosts.end());
  return f;
}

}  // namespace

std::optional<Finding> AllRanksThrottledRule::Find(const pattern::RankMetrics& metrics,
                                                   double iteration_ms,
                                                   const std::map<int, std::string>& hosts) const {
  std::vector<double> shares, lost_ms, quotas, throttled_s, windows_s;
  int throttled = 0;
  std::vector<int> ranks;
  std::set<std::string> host_set;
  for (const auto& [rank, m] : metrics) {
    ranks.push_back(rank);
    const double share = ThrottledShare(m);
    if (std::isnan(share)) continue;  // no quota, or too few periods to tell: not throttled
    shares.push_back(share);
    if (share < policy::kAllThrottledShare) continue;
    ++throttled;
    const double window_s = Value(m, "window.seconds"), thr_s = Value(m, "cgroup.throttled_s");
    if (window_s > 0 && !std::isnan(thr_s) && iteration_ms > 0) {
      lost_ms.push_back(thr_s * iteration_ms / window_s);
      throttled_s.push_back(thr_s);
      windows_s.push_back(window_s);
    }
    if (const double q = Value(m, "cgroup.quota_cpus"); q > 0) quotas.push_back(q);
    if (auto h = hosts.find(rank); h != hosts.end() && !h->second.empty())
      host_set.insert(h->second);
  }
  const auto total = static_cast<double>(ranks.size());
  if (ranks.empty() || throttled < policy::kAllOsRanksShare * total) return std::nullopt;
  Finding f = AllRankOsFinding(Category::kCpuThrottled, ranks, host_set);
  const double share = Median(shares);
  // A single-threaded rank loses what its quota holds it back; several threads of one rank are
  // throttled together, so the figure is at most the iteration.
  const double lost = lost_ms.empty() ? 0.0 : std::min(Median(lost_ms), iteration_ms);
  f.impact_ms = lost;
  f.impact_fraction = iteration_ms > 0 ? lost / iteration_ms : 0;
  f.evidence["throttled_share"] = share;
  f.evidence["ranks_affected"] = throttled;
  f.evidence["ranks_total"] = total;
  if (!throttled_s.empty()) {
    f.evidence["throttled_s"] = Median(throttled_s);
    f.evidence["window_s"] = Median(windows_s);
  }
  if (!quotas.empty()) f.evidence["quota_cpus"] = Median(quotas);
  f.evidence_text["reasoning"] = fmt::format(
      "the kernel throttled {} of {} ranks' CPU quota in most of its scheduling periods (median "
      "{:.0f}%): a healthy job meets its quota now and then, not every period; no baseline is "
      "needed to see it",
      throttled, ranks.size(), 100 * share);
  f.summary = fmt::format(
      "every rank is held by its CPU quota: throttled in {:.0f}% of its scheduling periods{}, "
      "{:.1f} ms per iteration",
      100 * share, quotas.empty() ? "" : fmt::format(" ({:.2f} CPUs)", Median(quotas)), lost);
  f.suggestion =
      "Raise or remove the CPU quota of the job's cgroup (cpu.max / cpu.cfs_quota_us), or ask the "
      "scheduler for as many CPUs as the ranks' threads use.";
  return f;
}

std::optional<Finding> AllRanksIoStallRule::Find(const pattern::RankMetrics& metrics,
                                                 double iteration_ms,
                                                 const std::map<int, std::string>& hosts) const {
  if (!(iteration_ms > 0)) return std::nullopt;
  std::vector<double> shares, bytes, written;
  std::vector<int> ranks;
  std::set<std::string> host_set;
  for (const auto& [rank, m] : metrics) {
    ranks.push_back(rank);
    const double moved = StorageBytesPerIteration(m, iteration_ms);
    const double window_s = Value(m, "window.seconds"), some_s = Value(m, "host.io_some_s");
    if (std::isnan(moved) || moved < policy::kIoMinBytesPerIteration || !(window_s > 0) ||
        std::isnan(some_s))
      continue;
    const double share = std::min(some_s / window_s, 1.0);
    if (share < policy::kAllIoStallShare) continue;
    shares.push_back(share);
    bytes.push_back(moved);
    const double w = Value(m, "proc.write_bytes");
    written.push_back(std::isnan(w) ? 0.0 : w * iteration_ms / SToMs(window_s));
    if (auto h = hosts.find(rank); h != hosts.end() && !h->second.empty())
      host_set.insert(h->second);
  }
  const auto total = static_cast<double>(ranks.size());
  const auto stalled = static_cast<double>(shares.size());
  if (ranks.empty() || stalled < policy::kAllOsRanksShare * total) return std::nullopt;
  constexpr double kMiB = 1024.0 * 1024.0;
  const double share = Median(shares), moved = Median(bytes);
  const bool writes = Median(written) * 2 >= moved;
  Finding f = AllRankOsFinding(Category::kIoStall, ranks, host_set);
  // A rank that reads or writes on its training thread waits as long as the disk makes some
  // task wait, at most: the estimate is the stalled share of its iteration.
  f.impact_ms = std::min(share, 1.0) * iteration_ms;
  f.impact_fraction = iteration_ms > 0 ? f.impact_ms / iteration_ms : 0;
  f.evidence["io_stall_share"] = share;
  f.evidence["storage_bytes_per_iteration"] = moved;
  f.evidence["ranks_affected"] = stalled;
  f.evidence["ranks_total"] = total;
  f.evidence_text["reasoning"] = fmt::format(
      "{:.0f} of {} ranks {} {:.1f} MiB per iteration to storage, and their hosts' tasks waited "
      "for storage {:.0f}% of the window (the kernel's pressure stall information): a healthy "
      "step does not wait for the disk; no baseline is needed to see it",
      stalled, ranks.size(), writes ? "write" : "read", moved / kMiB, 100 * share);
  f.summary = fmt::format(
      "every rank stalls on storage I/O: each {} {:.1f} MiB per iteration and the host waited for "
      "storage {:.0f}% of the time, about {:.1f} ms per iteration",
      writes ? "writes" : "reads", moved / kMiB, 100 * share, f.impact_ms);
  f.suggestion =
      writes ? "Take the writes off the training thread and out of every step: save checkpoints "
               "asynchronously (torch.distributed.checkpoint.async_save, a background thread) and "
               "less often, from one rank of each replica group; buffer logs."
             : "Read ahead of the step: more DataLoader workers and prefetch_factor, a local copy "
               "or cache of the dataset, larger sequential reads; check the disk (iostat).";
  return f;
}

void FoldAllRanksThrottled(std::vector<Finding>* findings) {
  auto is = [](const Finding& f) {
    return f.finding_class == FindingClass::kAll && f.category == Category::kCpuThrottled;
  };
  auto first = std::find_if(findings->begin(), findings->end(), is);
  if (first == findings->end()) return;
  for (auto it = first + 1; it != findings->end();) {
    if (!is(*it)) {
      ++it;
      continue;
    }
    const size_t base_it = it->evidence.count("baseline_window");
    const size_t base_first = first->evidence.count("baseline_window");
    const bool later = base_it > base_first ||
                       (base_it == base_first && it->functions.size() > first->functions.size());
    Finding& keep = later ? *it : *first;
    Finding& gone = later ? *first : *it;
    keep.impact_ms = std::max(keep.impact_ms, gone.impact_ms);
    keep.impact_fraction = std::max(keep.impact_fraction, gone.impact_fraction);
    for (const auto& [k, v] : gone.evidence) keep.evidence.emplace(k, v);
    if (later) *first = std::move(keep);
    it = findings->erase(it);
  }
}

}  // namespace perftracker::diagnose
