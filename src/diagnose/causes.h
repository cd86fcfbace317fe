// Cause rules that read the OS's evidence (agent/os_stats.h, reaching the diagnosis as the
// window's per-rank metrics) and the ops' input shapes to say why a rank is slower than its peers
// when timing alone cannot: equal calls, longer time could be a throttled quota, a rank denied
// the CPU, or more work.
// Each rule is a class with a name and its own unit test (causes_test.cc); ExplainRankFinding
// runs them in order, and the first whose evidence holds rewrites the finding's category, cause,
// summary and advice, keeping the functions timing named.
//
// The same metrics give a rank's own work as CPU time (AddOwnCpuTime), a floor the cost bound
// reads beside the peer comparison's wall-time totals.
//
// What a busy host alone says is not evidence against one rank: every rank of a host shares
// its CPUs. A rank is starved only when the scheduler makes it wait markedly more per second of
// its own CPU than its peers, or its cgroup's quota throttles it and not them.
#ifndef PERFTRACKER_DIAGNOSE_CAUSES_H_
#define PERFTRACKER_DIAGNOSE_CAUSES_H_

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "diagnose/peer_stats.h"
#include "pattern/collected.h"
#include "pattern/compact_job.h"

namespace perftracker::diagnose {

using pattern::RankMetrics;

// Share of a rank's cgroup scheduling periods in which its CPU quota throttled it, from its
// window metrics (NaN: no quota data, or too few periods to tell: policy kMinQuotaPeriods).
double ThrottledShare(const std::map<std::string, double>& metrics);
// Storage bytes a rank read and wrote per iteration of ITERATION_MS in its window (NaN: no I/O
// figures or no window length).
double StorageBytesPerIteration(const std::map<std::string, double>& metrics, double iteration_ms);
// Whether RANK's cgroup CPU QUOTA (in CPUs; <= 0 or NaN: none) is far tighter than its peers'
// median (policy kQuotaTighter; a peer without a quota counts as unlimited): its own limit, even
// where its peers are throttled by theirs.
bool TighterQuota(const RankMetrics& metrics, int rank, double quota);
// Seconds its threads waited in the run queue per second they ran (NaN: no scheduler
// statistics).
double RunQueueWaitPerCpu(const std::map<std::string, double>& metrics);

// The median of VALUE(a rank's metrics) over every rank but SKIP_RANK where it is not NaN (NaN
// when no rank has it): a rank's peers, or with SKIP_RANK -1 the typical rank.
template <typename F>
double MedianOverRanks(const RankMetrics& metrics, F value, int skip_rank = -1) {
  std::vector<double> v;
  for (const auto& [r, m] : metrics) {
    if (r == skip_rank) continue;
    if (const double x = value(m); !std::isnan(x)) v.push_back(x);
  }
  return v.empty() ? std::numeric_limits<double>::quiet_NaN() : internal::Median(v);
}

// What every cause rule reads: the window's metrics of every rank, the job's iteration and its
// ranks' patterns (for the functions' input shapes).
struct CauseInput {
  const RankMetrics& metrics;
  double iteration_ms = 0;  // the window's median iteration (0: unknown)
  std::span<const pattern::CompactRank> ranks = {};
  // Each rank's peer group (by index into RANKS: diagnose/peer_groups.h PeerGroupOf), so that a
  // rank is compared only with ranks of its role (a pipeline stage, a tensor-parallel shard):
  // a stage without a DataLoader waits for no data, a stage's all-reduce moves its own
  // parameters. Empty: the ranks' pipeline stage (CompactRank::role) alone tells roles apart.
  std::span<const int> peer_group = {};

  // Whether A and B (elements of RANKS) are of one role.
  bool SamePeers(const pattern::CompactRank& a, const pattern::CompactRank& b) const;
  // The same by rank number (a rank not in RANKS is of every role: nothing tells otherwise).
  bool SamePeers(int a, int b) const;
  // RANK's element of RANKS, or null.
  const pattern::CompactRank* Find(int rank) const;
};

class CauseRule {
 public:
  virtual ~CauseRule() = default;
  virtual Category category() const = 0;  // the category it gives a finding
  const char* name() const { return CategoryName(category()); }
  // Rewrites F (a finding on one rank) when the rule's evidence holds; false otherwise.
  virtual bool Explain(const CauseInput& in, Finding* f) const = 0;
};

// "cpu_throttled": the rank's cgroup CPU quota throttles it in a good share of its scheduling
// periods while its peers' do not.
class CpuThrottledRule : public CauseRule {
 public:
  Category category() const override { return Category::kCpuThrottled; }
  bool Explain(const CauseInput& in, Finding* f) const override;
};

// "gpu_throttled": the rank's GPU (the device its kernels ran on: CompactRank::gpu, NVML's index
// on its node) runs at a markedly lower SM clock than its peers' GPUs (policy
// kGpuClockPeersShare) while NVML gives it a reason that slows it: a power cap or brake, a
// thermal or hardware slowdown, an applications-clock setting. Names the clock, the reasons,
// the temperature and power, and any uncorrected ECC errors or PCIe replays.
class GpuThrottledRule : public CauseRule {
 public:
  Category category() const override { return Category::kGpuThrottled; }
  bool Explain(const CauseInput& in, Finding* f) const override;
};

// The names of NVML's clock-event reasons set in REASONS (nvmlClocksEventReasons*: "power
// cap", "hardware thermal slowdown", ...), and whether any of them slows the GPU.
std::vector<std::string> GpuClockReasonNames(uint64_t reasons);
bool GpuClockReasonsSlow(uint64_t reasons);

// "io_stall": the rank moves far more bytes to or from storage per iteration than its peers
// (/proc/PID/io read_bytes + write_bytes over the window: a checkpoint written on the training
// thread, logging flushed every step, a dataset read by one rank), at least a MiB per
// iteration and policy kIoPeersRatio times the peers' median.
class IoStallRule : public CauseRule {
 public:
  Category category() const override { return Category::kIoStall; }
  bool Explain(const CauseInput& in, Finding* f) const override;
};

// "more_work": the rank runs the same functions on larger inputs than its peers of the same
// role (record_shapes' input shapes: a quarter more elements per call, policy kMoreWorkRatio),
// and those functions' extra time (or, on a GPU, its compute kernels') is a good part of what it
// loses: data skew, padding or uneven shards, not a slow machine. Names the function and both
// shapes ("aten::mm inputs [512, 256], [256, 256] vs [64, 256], [256, 256] on its peers").
class MoreWorkRule : public CauseRule {
 public:
  Category category() const override { return Category::kMoreWork; }
  bool Explain(const CauseInput& in, Finding* f) const override;
};

// "data_loader": the rank's DataLoader worker processes take markedly longer per batch than its
// peers' (their own account, agent/loader_stats.h: the dataset's __getitem__ and the collate
// function), and its training thread waits for data longer than its peers' (its data-loader
// functions, a good part of what it loses). Names the worker function that grew. The training
// thread shows only the wait (a queue's poll), which varies too much between iterations for
// the peer comparison's timing gate; the workers' time per batch does not.
class LoaderWorkersRule : public CauseRule {
 public:
  Category category() const override { return Category::kDataLoader; }
  bool Explain(const CauseInput& in, Finding* f) const override;
};

// "cpu_contention": the rank's threads wait in the run queue markedly more per second of CPU
// than its peers', and that extra wait is a good part of what it loses per iteration.
class RunQueueContentionRule : public CauseRule {
 public:
  Category category() const override { return Category::kCpuContention; }
  bool Explain(const CauseInput& in, Finding* f) const override;
};

// The rules in the order they are tried: the direct evidence (a quota, storage I/O) first, then
// the rank's own work (its inputs), then the scheduler's wait.
const std::vector<std::unique_ptr<CauseRule>>& CauseRules();

// Runs the rules on F when it is a finding on one rank that a host cause could explain (a
// straggler by timing or by its functions; not communication, a hang or a missing rank). When
// none fires and the rank shares an oversubscribed host, the finding says why the host is not
// the cause (the rank waits no more than its peers). A finding a rule already explained (an
// offline diagnosis runs the shape rule before a window adds its metrics) is kept as it is.
// Returns the rule that fired, or nullptr.
const CauseRule* ExplainRankFinding(const CauseInput& in, Finding* f);

// On a finding of one rank from the peer comparison, the CPU time its process ran (all its
// threads, from the scheduler's statistics: proc.run_s) per iteration against the median of its
// role-true peers', as evidence (own_cpu_time_ms, peers_own_cpu_time_ms) for the cost bound's
// own-work floors (cost_bound.h). The ops' own times are wall time: where ranks share cores they
// hold whatever preemption fell inside them (measured: the same 7 matrix multiplies an iteration
// took 0.9 to 3.2 ms on three peers), while CPU time counts only the work. Untouched without
// the rank's and a peer's figures.
void AddOwnCpuTime(const CauseInput& in, Finding* f);

// A finding for every rank that its own cgroup quota throttles (CpuThrottledRule's evidence) and
// that no finding of EXISTING names yet, when the time throttled per iteration reaches the
// peer comparison's size gates (policy kMinAbsMs, kMinFraction). A quota slows all a rank does
// alike and makes its peers wait in collectives, so its functions may stand under the timing
// noise gates while the kernel's own count is plain. HOSTS: rank -> host, where known.
std::vector<Finding> FindThrottledRanks(const CauseInput& in,
                                        const std::map<int, std::string>& hosts,
                                        const std::vector<Finding>& existing);

// A finding for every rank whose DataLoader workers LoaderWorkersRule holds slow and that no
// finding of EXISTING names yet, when its training thread's extra wait for data reaches the
// peer comparison's size gates (policy kMinAbsMs, kMinFraction).
std::vector<Finding> FindSlowLoaderWorkers(const CauseInput& in,
                                           const std::map<int, std::string>& hosts,
                                           const std::vector<Finding>& existing);

// A data-loading finding of the training thread's wait (DataLoaderRule: every rank, or a few)
// whose ranks' DataLoader worker processes work far less per batch than the thread waits: the
// workers are not slow at their work, so "make the dataset faster" is the wrong advice. Says
// so, with the workers' time per batch and the host's load; false (F untouched) otherwise.
bool ExplainLoaderHandOff(const CauseInput& in, Finding* f);

// A finding for every rank whose larger inputs (MoreWorkRule's evidence) cost it past the size
// gates and that no finding of EXISTING names: 4x the data per call is no timing noise, though
// the rank's time may stand under the peer comparison's noise gate on a shared host.
std::vector<Finding> FindMoreWorkRanks(const CauseInput& in,
                                       const std::map<int, std::string>& hosts,
                                       const std::vector<Finding>& existing);

// A finding for every rank that the scheduler holds back (RunQueueContentionRule's evidence, at
// policy kRunQueueAloneRatio: stricter, with no slower function to back it) and that no finding
// of EXISTING names, when its extra run-queue wait per iteration reaches the size gates. DDP
// hides such a rank from the peer comparison: its peers' wait for it is inside the same
// run_backward frame as its own slower compute.
std::vector<Finding> FindContendedRanks(const CauseInput& in,
                                        const std::map<int, std::string>& hosts,
                                        const std::vector<Finding>& existing);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_CAUSES_H_
