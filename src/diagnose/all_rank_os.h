// All-rank causes the OS shows on its own, without a baseline to compare with: an expected
// pattern of the kernel's accounting. A healthy job is not throttled by its CPU quota in most of
// its scheduling periods on every rank; when it is, every rank is held back every step, whether
// or not a baseline window (spoiled, or taken under the same quota) saw it too.
//
// The same holds of storage: a healthy step does not wait for the disk; when every rank moves
// megabytes to storage each iteration and the kernel's pressure stall information (PSI,
// /proc/pressure/io) says tasks waited for it through much of the window, every rank stalls on
// I/O (a checkpoint saved on the training thread by every rank, a dataset read from a slow disk).
//
// One rule, one class each (AllRanksThrottledRule, AllRanksIoStallRule), run by
// AddMetricFindings on every window. A rank throttled or writing while its peers are not is the
// peer comparison's (diagnose/causes.h CpuThrottledRule, IoStallRule); these rules speak only
// when three in four ranks are (policy kAllOsRanksShare, kAllThrottledShare, kAllIoStallShare).
//
// Why no all-rank run-queue rule: on a host whose ranks outnumber its cores the job's own ranks
// wait in the run queue (measured: 1.65 to 2.03 s a CPU-second on healthy 4-rank jobs on 2
// cores), so no fixed wait tells a competing process from the job's own oversubscription; a
// rise in every rank's wait since a clean baseline is the comparison's (diagnose/since_baseline.h).
#ifndef PERFTRACKER_DIAGNOSE_ALL_RANK_OS_H_
#define PERFTRACKER_DIAGNOSE_ALL_RANK_OS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "pattern/collected.h"

namespace perftracker::diagnose {

class AllRanksThrottledRule {
 public:
  static constexpr const char* kName = "all_ranks_throttled";
  // The finding (class all, category cpu_throttled) when most ranks' quota throttles them in
  // most periods; ITERATION_MS is the window's median iteration (its impact: the median rank's
  // throttled time per iteration, at most the iteration); HOSTS by rank.
  std::optional<Finding> Find(const pattern::RankMetrics& metrics, double iteration_ms,
                              const std::map<int, std::string>& hosts) const;
};

class AllRanksIoStallRule {
 public:
  static constexpr const char* kName = "all_ranks_io_stall";
  // The finding (class all, category io_stall) when most ranks move at least
  // kIoMinBytesPerIteration to storage per iteration of ITERATION_MS and their host's tasks
  // waited for storage through kAllIoStallShare of the window; its impact is the median rank's
  // share of the window stalled times the iteration (at most the iteration). HOSTS by rank.
  std::optional<Finding> Find(const pattern::RankMetrics& metrics, double iteration_ms,
                              const std::map<int, std::string>& hosts) const;
};

// Folds FINDINGS' all-rank cpu_throttled findings into one: the rule above and the comparison with
// the baseline window (diagnose/since_baseline.h) both name every rank's quota, and it is one
// problem. The one that names the baseline window (then the one with more functions) is kept, in
// the first one's place, with the larger cost and both findings' evidence.
void FoldAllRanksThrottled(std::vector<Finding>* findings);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_ALL_RANK_OS_H_
