#include "diagnose/causes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <span>

#include "base/units.h"
#include "diagnose/cost_bound.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"
#include "pattern/input_shapes.h"
#include "pattern/names.h"

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
void Rewrite(Finding* f, Category category, Cause cause, std::string summary,
             std::string suggestion) {
  f->summary = std::move(summary);
  f->suggestion = std::move(suggestion);
  f->category = category;
  f->cause = cause;
  f->confidence = policy::kConfidenceOsEvidence;
}

bool IsHostExplainable(const Finding& f) {
  return f.finding_class == FindingClass::kSubset && f.ranks.size() == 1 &&
         f.category != Category::kCommunication && f.category != Category::kLowBandwidth &&
         f.category != Category::kHang && f.category != Category::kMissingRank &&
         f.category != Category::kCollectiveMismatch && f.category != Category::kRankCrash;
}

}  // namespace

const pattern::CompactRank* CauseInput::Find(int rank) const {
  // Ranks come sorted by rank (CompactJob::SortByRank); a caller's unsorted span is searched.
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank,
                             [](const pattern::CompactRank& r, int v) { return r.rank < v; });
  if (it != ranks.end() && it->rank == rank) return &*it;
  for (const pattern::CompactRank& r : ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}

bool CauseInput::SamePeers(const pattern::CompactRank& a, const pattern::CompactRank& b) const {
  if (peer_group.size() != ranks.size() || ranks.empty()) return a.role == b.role;
  const auto ia = static_cast<size_t>(&a - ranks.data()),
             ib = static_cast<size_t>(&b - ranks.data());
  if (ia >= ranks.size() || ib >= ranks.size()) return a.role == b.role;
  return peer_group[ia] == peer_group[ib];
}

bool CauseInput::SamePeers(int a, int b) const {
  const pattern::CompactRank *ra = Find(a), *rb = Find(b);
  return ra == nullptr || rb == nullptr || SamePeers(*ra, *rb);
}

double ThrottledShare(const std::map<std::string, double>& m) {
  const double periods = Get(m, "cgroup.nr_periods");
  const double throttled = Get(m, "cgroup.nr_throttled");
  if (std::isnan(periods) || std::isnan(throttled) || periods < policy::kMinQuotaPeriods)
    return kNone;
  return throttled / periods;
}

bool TighterQuota(const RankMetrics& metrics, int rank, double quota) {
  if (std::isnan(quota) || quota <= 0) return false;
  // A peer without a quota (-1) is held by none: any quota of the rank's is tighter.
  const double peers = PeersMedian(metrics, rank, [](const std::map<std::string, double>& p) {
    const double q = Get(p, "cgroup.quota_cpus");
    return std::isnan(q) ? q : q <= 0 ? std::numeric_limits<double>::infinity() : q;
  });
  return !std::isnan(peers) && quota <= peers * policy::kQuotaTighter;
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
  const std::map<std::string, double>& m = it->second;
  const double quota = Get(m, "cgroup.quota_cpus");
  // Throttled alike, the peers are no yardstick: an all-rank limit, not this rank's; unless the
  // rank's own quota is far tighter than theirs (peers in a container its CPU limit throttles,
  // the rank in a cgroup of its own).
  if (!std::isnan(peers) && peers > share * policy::kThrottledPeersAtMost &&
      !TighterQuota(in.metrics, rank, quota))
    return false;
  const double throttled_s = Get(m, "cgroup.throttled_s");
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
  Rewrite(f, category(), Cause::kHardware,
          fmt::format("rank {} is throttled by its cgroup's CPU quota{}: held off the CPU in "
                      "{:.0f}% of its scheduling periods{}, it runs slower than its peers with "
                      "the same work; the job loses {:.1f} ms/iter",
                      rank, quota_text, share * 100, time_text, f->impact_ms),
          "raise or remove the CPU quota of that rank's container or cgroup (cpu.max, "
          "cpu.cfs_quota_us; Kubernetes CPU limits) to at least what its peers use, or give it "
          "fewer threads (OMP_NUM_THREADS, torch.set_num_threads, DataLoader workers)");
  return true;
}

namespace {

// Bytes per iteration of a window total of BYTES (NaN: no window length or iteration).
double PerIterationBytes(const std::map<std::string, double>& m, double bytes,
                         double iteration_ms) {
  const double window = Get(m, "window.seconds");
  if (std::isnan(bytes) || std::isnan(window) || window <= 0 || iteration_ms <= 0) return kNone;
  return bytes * iteration_ms / SToMs(window);
}

}  // namespace

double StorageBytesPerIteration(const std::map<std::string, double>& m, double iteration_ms) {
  const double r = Get(m, "proc.read_bytes"), w = Get(m, "proc.write_bytes");
  if (std::isnan(r) && std::isnan(w)) return kNone;
  return PerIterationBytes(m, (std::isnan(r) ? 0 : r) + (std::isnan(w) ? 0 : w), iteration_ms);
}

namespace {

// NVML's clock-event reasons (nvml.h, nvmlClocksEventReason*): one table drives the names and
// which of them slow the GPU (idle, sync boost and display clocks do not).
struct GpuReason {
  uint64_t bit;
  const char* name;
  bool slows;
};
constexpr GpuReason kGpuReasons[] = {
    {0x1, "idle", false},
    {0x2, "applications clocks setting", true},
    {0x4, "software power cap", true},
    {0x8, "hardware slowdown", true},
    {0x10, "sync boost", false},
    {0x20, "software thermal slowdown", true},
    {0x40, "hardware thermal slowdown", true},
    {0x80, "hardware power brake", true},
    {0x100, "display clocks setting", false},
};

double GpuMetric(const std::map<std::string, double>& m, int gpu, const char* what) {
  auto it = m.find(fmt::format("gpu{}.{}", gpu, what));
  return it == m.end() ? kNone : it->second;
}

int GpuOf(std::span<const pattern::CompactRank> ranks, int rank) {
  for (const pattern::CompactRank& r : ranks)
    if (r.rank == rank) return r.gpu;
  return -1;
}

}  // namespace

std::vector<std::string> GpuClockReasonNames(uint64_t reasons) {
  std::vector<std::string> out;
  for (const GpuReason& r : kGpuReasons)
    if (reasons & r.bit) out.push_back(r.name);
  return out;
}

bool GpuClockReasonsSlow(uint64_t reasons) {
  for (const GpuReason& r : kGpuReasons)
    if ((reasons & r.bit) && r.slows) return true;
  return false;
}

bool GpuThrottledRule::Explain(const CauseInput& in, Finding* f) const {
  const int rank = f->ranks[0];
  auto it = in.metrics.find(rank);
  const int gpu = GpuOf(in.ranks, rank);
  if (it == in.metrics.end() || gpu < 0) return false;
  const std::map<std::string, double>& m = it->second;
  const double clock = GpuMetric(m, gpu, "sm_clock_mhz");
  const double reasons = GpuMetric(m, gpu, "clock_event_reasons");
  if (std::isnan(clock) || std::isnan(reasons) || reasons < 0) return false;
  const uint64_t bits = static_cast<uint64_t>(reasons);
  if (!GpuClockReasonsSlow(bits)) return false;
  // Each peer's clock on its own GPU: one pass over the patterns, then its metrics.
  std::vector<double> peers;
  for (const pattern::CompactRank& r : in.ranks) {
    if (r.rank == rank || r.gpu < 0) continue;
    auto pm = in.metrics.find(r.rank);
    if (pm == in.metrics.end()) continue;
    if (const double c = GpuMetric(pm->second, r.gpu, "sm_clock_mhz"); !std::isnan(c))
      peers.push_back(c);
  }
  if (peers.empty()) return false;
  const double peers_clock = internal::Median(peers);
  if (clock > policy::kGpuClockPeersShare * peers_clock) return false;
  f->evidence["gpu_index"] = gpu;
  f->evidence["sm_clock_mhz"] = clock;
  f->evidence["peers_sm_clock_mhz"] = peers_clock;
  f->evidence["clock_event_reasons"] = reasons;
  std::string extra;
  for (const char* what : {"temperature_c", "power_w", "ecc_uncorrected", "pcie_replay"}) {
    const double v = GpuMetric(m, gpu, what);
    if (std::isnan(v)) continue;
    f->evidence[what] = v;
    if (std::string_view(what) == "temperature_c") extra += fmt::format(", {:.0f} C", v);
    if (std::string_view(what) == "power_w") extra += fmt::format(", {:.0f} W", v);
    if (std::string_view(what) == "ecc_uncorrected" && v > 0)
      extra += fmt::format(", {:.0f} uncorrected ECC errors", v);
    if (std::string_view(what) == "pcie_replay" && v > 0)
      extra += fmt::format(", {:.0f} PCIe replays", v);
  }
  const std::string why = fmt::format("{}", fmt::join(GpuClockReasonNames(bits), ", "));
  f->evidence_text["gpu_clock_reasons"] = why;
  f->evidence_text["reasoning"] = fmt::format(
      "rank {}'s GPU {} runs its SMs at {:.0f} MHz, its peers' at {:.0f} MHz, and NVML says why: "
      "{}{}",
      rank, gpu, clock, peers_clock, why, extra);
  const bool config = bits == 0x2;  // only an applications-clock setting: someone set it
  Rewrite(f, category(), config ? Cause::kConfiguration : Cause::kHardware,
          fmt::format("rank {}'s GPU {} is throttled ({}): its SM clock is {:.0f} MHz, its peers' "
                      "{:.0f} MHz{}; the job loses {:.1f} ms/iter",
                      rank, gpu, why, clock, peers_clock, extra, f->impact_ms),
          config ? "reset the GPU's application clocks (nvidia-smi -rac) or clock lock (nvidia-smi "
                   "-rgc) to match its peers"
                 : "check the GPU's cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,"
                   "POWER): airflow, a power cap, a failing fan or board; move the rank off that "
                   "GPU if it persists");
  return true;
}

bool IoStallRule::Explain(const CauseInput& in, Finding* f) const {
  const int rank = f->ranks[0];
  auto it = in.metrics.find(rank);
  if (it == in.metrics.end()) return false;
  const std::map<std::string, double>& m = it->second;
  const double own = StorageBytesPerIteration(m, in.iteration_ms);
  if (std::isnan(own) || own < policy::kIoMinBytesPerIteration) return false;
  const double peers = PeersMedian(in.metrics, rank, [&](const std::map<std::string, double>& p) {
    return StorageBytesPerIteration(p, in.iteration_ms);
  });
  if (std::isnan(peers) || own < peers * policy::kIoPeersRatio) return false;
  constexpr double kMiB = 1024.0 * 1024.0;
  const double written = PerIterationBytes(m, Get(m, "proc.write_bytes"), in.iteration_ms);
  const double read = PerIterationBytes(m, Get(m, "proc.read_bytes"), in.iteration_ms);
  f->evidence["storage_bytes_per_iteration"] = own;
  f->evidence["peers_storage_bytes_per_iteration"] = peers;
  if (!std::isnan(written)) f->evidence["write_bytes_per_iteration"] = written;
  if (!std::isnan(read)) f->evidence["read_bytes_per_iteration"] = read;
  const bool writes = !std::isnan(written) && (std::isnan(read) || written >= read);
  const std::string where =
      f->functions.empty() ? "" : fmt::format(" (in {})", f->functions[0].name);
  f->evidence_text["reasoning"] = fmt::format(
      "rank {} moved {:.1f} MiB per iteration to and from storage, its peers {:.1f} MiB: the "
      "training thread waits for the disk{}",
      rank, own / kMiB, peers / kMiB, where);
  Rewrite(f, category(), Cause::kConfiguration,
          fmt::format("rank {} stalls on storage I/O: it {} {:.1f} MiB per iteration, its peers "
                      "{:.1f} MiB{}; the job loses {:.1f} ms/iter",
                      rank, writes ? "writes" : "reads", (writes ? written : read) / kMiB,
                      peers / kMiB, where, f->impact_ms),
          "take the I/O off the training thread or out of the step: save checkpoints "
          "asynchronously (torch.distributed.checkpoint.async_save, a background thread) and less "
          "often, write from one rank of a replica group, buffer logs; check that rank's disk "
          "(iostat) if its peers write as much");
  return true;
}

namespace {

// One shaped function of the rank against the same function on its peers.
struct ShapeDiff {
  const pattern::CompactShape* own = nullptr;
  const pattern::CompactFunction* fn = nullptr;
  double peers_elements = 0;  // median over the peers that run it
  double peers_per_iter_us = 0;
  std::string peers_dims;  // the commonest among them
  double rise_us = 0;      // its time per iteration above the peers' median
  double ratio = 0;        // how much larger its data is (pattern::DataInputRatio)
};

// The rank's shaped functions whose inputs are larger than its peers' by kMoreWorkRatio.
std::vector<ShapeDiff> LargerInputs(const CauseInput& in, const pattern::CompactRank& me) {
  struct PeerValues {
    std::vector<double> elements, per_iter_us, calls;
    std::map<std::string, int> dims;
  };
  std::map<uint32_t, PeerValues> peers;  // by function id
  // A collective's inputs are the parameters or activations its group exchanges, and its time
  // is mostly waiting for the group: larger ones are another role's tensors, not more work.
  for (const pattern::CompactShape& s : me.shapes)
    if (pattern::CollectiveOp(me.compact[s.index].name()).empty()) peers[me.compact[s.index].id()];
  for (const pattern::CompactRank& r : in.ranks) {
    if (r.rank == me.rank || !in.SamePeers(r, me)) continue;
    for (const pattern::CompactShape& s : r.shapes) {
      auto it = peers.find(r.compact[s.index].id());
      if (it == peers.end()) continue;
      it->second.elements.push_back(s.elements);
      it->second.per_iter_us.push_back(r.compact[s.index].per_iter_us);
      it->second.calls.push_back(r.compact[s.index].calls_per_iter);
      ++it->second.dims[s.dims];
    }
  }
  std::vector<ShapeDiff> out;
  for (const pattern::CompactShape& s : me.shapes) {
    auto found = peers.find(me.compact[s.index].id());
    if (found == peers.end() || found->second.elements.empty()) continue;
    PeerValues& p = found->second;
    ShapeDiff d;
    d.own = &s;
    d.fn = &me.compact[s.index];
    d.peers_elements = internal::Median(p.elements);
    if (d.peers_elements <= 0) continue;
    // The same calls on larger inputs: an op called far more often on one side is other work
    // there (aten::mm of a straggler's extra matmuls beside the model's backward ones, whose
    // mean input the extra calls raise; aten::fill_ serving many call sites), not the same work
    // on more data.
    const double peer_calls = internal::Median(p.calls);
    if (peer_calls * policy::kMoreWorkSameCalls < d.fn->calls_per_iter ||
        d.fn->calls_per_iter * policy::kMoreWorkSameCalls < peer_calls)
      continue;
    d.peers_dims = std::max_element(p.dims.begin(), p.dims.end(), [](const auto& a, const auto& b) {
                     return a.second < b.second;
                   })->first;
    // The same call on more data: one input larger, the rest alike (aten::linear's [256, 512]
    // against [64, 512] beside a [512, 512] weight: 4x, though 1.4x in total). Shapes of other
    // call sites of the op (aten::mm's backward, a fill of another buffer) are no comparison.
    d.ratio = pattern::DataInputRatio(s.dims, d.peers_dims);
    if (d.ratio < policy::kMoreWorkRatio) continue;
    // The shapes compared are where each rank's time went most; more data shows in the mean of
    // all calls too (a throttled rank's time can go to another of the same shapes).
    if (s.elements < d.peers_elements * policy::kMoreWorkElementsAtLeast) continue;
    d.peers_per_iter_us = internal::Median(p.per_iter_us);
    d.rise_us = d.fn->per_iter_us - d.peers_per_iter_us;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

namespace {

// What a rank's larger inputs cost it: the function whose larger inputs cost the most, and the
// time they explain (on a GPU, the rise of its compute kernels where that is more).
struct MoreWork {
  std::vector<ShapeDiff> larger;
  const ShapeDiff* top = nullptr;
  double explained_ms = 0;
  double compute_rise_ms = kNone;
};

std::optional<MoreWork> MoreWorkOf(const CauseInput& in, int rank) {
  const pattern::CompactRank* me = in.Find(rank);
  if (me == nullptr || me->shapes.empty()) return std::nullopt;
  MoreWork w;
  w.larger = LargerInputs(in, *me);
  if (w.larger.empty()) return std::nullopt;
  // Nested ops (aten::linear holds aten::addmm) share their time, so the largest one rise, not
  // a sum, is what the inputs explain.
  w.top = &*std::max_element(
      w.larger.begin(), w.larger.end(),
      [](const ShapeDiff& a, const ShapeDiff& b) { return a.rise_us < b.rise_us; });
  w.explained_ms = UsToMs(w.top->rise_us);
  // On a GPU the CPU op only launches: the larger inputs' time is in the rank's kernels.
  if (me->has_gpu) {
    std::vector<double> peer_compute;
    for (const pattern::CompactRank& r : in.ranks)
      if (r.rank != rank && in.SamePeers(r, *me) && r.has_gpu) peer_compute.push_back(r.compute_us);
    if (!peer_compute.empty()) {
      w.compute_rise_ms = UsToMs(me->compute_us - internal::Median(peer_compute));
      w.explained_ms = std::max(w.explained_ms, w.compute_rise_ms);
    }
  }
  return w;
}

}  // namespace

bool MoreWorkRule::Explain(const CauseInput& in, Finding* f) const {
  const int rank = f->ranks[0];
  const std::optional<MoreWork> work = MoreWorkOf(in, rank);
  if (!work) return false;
  const std::vector<ShapeDiff>& larger = work->larger;
  const ShapeDiff& top = *work->top;
  const double explained_ms = work->explained_ms, compute_rise_ms = work->compute_rise_ms;
  if (explained_ms <= 0 || explained_ms < f->impact_ms * policy::kMoreWorkExplainsShare)
    return false;
  const double ratio = top.ratio;
  f->evidence["input_elements_per_call"] = top.own->elements;
  f->evidence["peers_input_elements_per_call"] = top.peers_elements;
  f->evidence["input_elements_ratio"] = ratio;
  f->evidence["larger_input_extra_ms_per_iteration"] = UsToMs(top.rise_us);
  if (!std::isnan(compute_rise_ms))
    f->evidence["gpu_compute_extra_ms_per_iteration"] = compute_rise_ms;
  f->evidence_text["input_shapes"] = top.own->dims;
  f->evidence_text["peers_input_shapes"] = top.peers_dims;
  std::vector<std::string> others;
  for (const ShapeDiff& d : larger)
    if (&d != &top && others.size() < 3) others.push_back(d.fn->name());
  if (!others.empty())
    f->evidence_text["also_larger_inputs"] = fmt::format("{}", fmt::join(others, ", "));
  f->evidence_text["reasoning"] = fmt::format(
      "rank {} calls {} on inputs of {:.0f} elements per call, its peers on {:.0f} (up to {:.1f}x "
      "in one input): "
      "the same calls on more data take {:.1f} ms per iteration more; its machine is not slower, "
      "its share of the work is larger",
      rank, top.fn->name(), top.own->elements, top.peers_elements, ratio, explained_ms);
  // The function timing named stays; the one with the larger inputs leads.
  const std::string name = top.fn->name();
  std::erase_if(f->functions, [&](const FunctionRef& r) { return r.name == name; });
  f->functions.insert(f->functions.begin(),
                      FunctionRef{name, std::string(trace::EventKindName(top.fn->kind())), {}});
  Rewrite(f, category(), Cause::kSoftware,
          fmt::format("rank {} does more work than its peers: its {} inputs are {} vs {} on its "
                      "peers ({:.1f}x the data per call), {:.1f} ms/iter more; the job "
                      "loses {:.1f} ms/iter",
                      rank, name, top.own->dims.empty() ? "larger" : top.own->dims,
                      top.peers_dims.empty() ? "smaller" : top.peers_dims, ratio, explained_ms,
                      f->impact_ms),
          "even out the work per rank: batch by length (bucketing) or pad to one length, shard "
          "the data by size rather than by count, and check the sampler gives every rank the "
          "same share");
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
  // The finding that named the rank may be one function that rose; the scheduler held the rank
  // back in all it does, and its peers wait for it as long as its own work takes longer than
  // theirs: the extra wait counts up to that excess, and only where the peer comparison measured
  // it (the wait of all the rank's threads is not the training thread's: rank 0's store server
  // waits too, and a rank in step with its peers makes nobody wait).
  const std::optional<double> own_excess = OwnWorkExcessMs(*f);
  if (in.iteration_ms > 0 && own_excess && extra_ms > f->impact_ms) {
    f->impact_ms = std::max(f->impact_ms, std::min({extra_ms, in.iteration_ms, *own_excess}));
    f->impact_fraction = f->impact_ms / in.iteration_ms;
  }
  const double running = Get(m, "host.procs_running");
  const double cores = Get(m, "host.cores");
  if (!std::isnan(running)) f->evidence["host_runnable_threads"] = running;
  if (!std::isnan(cores)) f->evidence["host_cores"] = cores;
  f->evidence_text["reasoning"] = fmt::format(
      "rank {}'s threads waited {:.2f} s in the run queue per second on a CPU, its peers {:.2f} "
      "s: {:.1f} ms per iteration more than theirs for its own work; the scheduler, not its "
      "work, slows it",
      rank, own, peers, extra_ms);
  Rewrite(f, category(), Cause::kConfiguration,
          fmt::format("rank {} is denied the CPU on {}: its threads wait {:.1f}x longer in the "
                      "run queue per second of CPU than its peers' ({:.1f} ms per iteration "
                      "more), so it runs slower with the same work; the job loses {:.1f} ms/iter",
                      rank, HostOf(*f), peers > 0 ? own / peers : own, extra_ms, f->impact_ms),
          "find what shares that rank's CPUs (top -H, a pinned or high-priority process, a lower "
          "nice value of the rank, more threads than its cores); give every rank its own cores "
          "(taskset, numactl) and move other processes off them");
  return true;
}

namespace {

// What a rank's DataLoader worker processes did in the window (agent/loader_stats.h metrics).
struct LoaderWork {
  double batches = 0;
  double dataset_ms = 0;  // per batch
  double collate_ms = 0;  // per batch
  std::string dataset_fn, collate_fn;
  double PerBatchMs() const { return dataset_ms + collate_ms; }
};

std::optional<LoaderWork> LoaderWorkOf(const std::map<std::string, double>& m) {
  const double batches = Get(m, "loader.batches");
  if (std::isnan(batches) || batches < policy::kLoaderMinBatches) return std::nullopt;
  LoaderWork w;
  w.batches = batches;
  w.dataset_ms = SToMs(Get(m, "loader.dataset_s")) / batches;
  w.collate_ms = SToMs(Get(m, "loader.collate_s")) / batches;
  if (std::isnan(w.dataset_ms) || std::isnan(w.collate_ms)) return std::nullopt;
  // The names ride in the keys ("loader.dataset_fn=<name>"): sorted, so found by prefix.
  for (auto [prefix, out] : {std::pair{std::string_view("loader.collate_fn="), &w.collate_fn},
                             std::pair{std::string_view("loader.dataset_fn="), &w.dataset_fn}}) {
    auto it = m.lower_bound(std::string(prefix));
    if (it != m.end() && std::string_view(it->first).starts_with(prefix))
      *out = it->first.substr(prefix.size());
  }
  return w;
}

// The training thread's time in data-loader functions per iteration, microseconds (the
// outermost: they nest).
double LoaderWaitUs(const pattern::CompactRank& r) {
  double most = 0;
  for (const pattern::CompactFunction& f : r.compact)
    if (f.fclass() == pattern::FunctionClass::kDataLoader && f.main_thread)
      most = std::max(most, static_cast<double>(f.per_iter_us));
  return most;
}

// The rank's extra wait for data over its peers' median, ms per iteration (NaN: unknown). One
// pass over the ranks.
double ExtraLoaderWaitMs(const CauseInput& in, int rank) {
  double own = kNone;
  std::vector<double> peers;
  for (const pattern::CompactRank& r : in.ranks) {
    if (r.rank == rank) {
      own = LoaderWaitUs(r);
    } else if (in.SamePeers(r.rank, rank)) {
      peers.push_back(LoaderWaitUs(r));
    }
  }
  if (std::isnan(own) || peers.empty()) return kNone;
  return UsToMs(own - internal::Median(peers));
}

}  // namespace

bool LoaderWorkersRule::Explain(const CauseInput& in, Finding* f) const {
  const int rank = f->ranks[0];
  auto it = in.metrics.find(rank);
  if (it == in.metrics.end()) return false;
  const std::optional<LoaderWork> own = LoaderWorkOf(it->second);
  if (!own) return false;
  std::vector<double> dataset, collate;
  for (const auto& [r, m] : in.metrics) {
    if (r == rank || !in.SamePeers(r, rank)) continue;
    if (auto w = LoaderWorkOf(m))
      dataset.push_back(w->dataset_ms), collate.push_back(w->collate_ms);
  }
  if (dataset.empty()) return false;
  const double peers_dataset = internal::Median(dataset), peers_collate = internal::Median(collate);
  const double peers = peers_dataset + peers_collate;
  if (own->PerBatchMs() < policy::kLoaderWorkersRatio * peers ||
      own->PerBatchMs() - peers < policy::kMinAbsMs)
    return false;
  // The workers being slow costs the job only where the training thread waits for them.
  const double wait_ms = ExtraLoaderWaitMs(in, rank);
  if (std::isnan(wait_ms) ? f->category != category()
                          : wait_ms < policy::kLoaderWaitExplainsShare * f->impact_ms)
    return false;
  const bool in_collate = own->collate_ms - peers_collate >= own->dataset_ms - peers_dataset;
  const std::string& fn = in_collate ? own->collate_fn : own->dataset_fn;
  const std::string what = fmt::format("{}{}", in_collate ? "the collate function" : "the dataset",
                                       fn.empty() ? "" : " " + fn);
  f->evidence["loader_ms_per_batch"] = own->PerBatchMs();
  f->evidence["peers_loader_ms_per_batch"] = peers;
  f->evidence["loader_dataset_ms_per_batch"] = own->dataset_ms;
  f->evidence["loader_collate_ms_per_batch"] = own->collate_ms;
  f->evidence["loader_workers"] = Get(it->second, "loader.workers");
  if (!std::isnan(wait_ms)) f->evidence["extra_data_wait_ms_per_iteration"] = wait_ms;
  if (!fn.empty())
    f->functions.insert(f->functions.begin(),
                        FunctionRef{fn, "python_function", {"DataLoader worker process"}});
  f->evidence_text["reasoning"] = fmt::format(
      "rank {}'s DataLoader worker processes take {:.1f} ms per batch ({:.1f} ms in the dataset, "
      "{:.1f} ms in the collate function), its peers' {:.1f} ms; its training thread waits for "
      "the next batch",
      rank, own->PerBatchMs(), own->dataset_ms, own->collate_ms, peers);
  Rewrite(f, category(), Cause::kSoftware,
          fmt::format("rank {}'s data loader is slow: its {:.0f} DataLoader worker processes take "
                      "{:.1f} ms per batch in {} vs {:.1f} ms on its peers{}; the job loses {:.1f} "
                      "ms/iter",
                      rank, Get(it->second, "loader.workers"), own->PerBatchMs(), what, peers,
                      std::isnan(wait_ms)
                          ? std::string()
                          : fmt::format(", and its training thread waits {:.1f} ms/iter longer "
                                        "for data",
                                        wait_ms),
                      f->impact_ms),
          fmt::format("make {} faster on rank {} (what it reads, decodes or sleeps on: compare "
                      "its input with the peers'), or give the loader more worker processes "
                      "(num_workers) and prefetch_factor",
                      what, rank));
  return true;
}

bool ExplainLoaderHandOff(const CauseInput& in, Finding* f) {
  if (f->category != Category::kDataLoader || f->ranks.empty() ||
      f->confidence == policy::kConfidenceOsEvidence)
    return false;
  const std::set<int> ranks(f->ranks.begin(), f->ranks.end());
  std::vector<double> work, wait, running, cores;
  for (const auto& [r, m] : in.metrics) {
    if (!ranks.count(r)) continue;
    if (auto w = LoaderWorkOf(m)) work.push_back(w->PerBatchMs());
    if (const double v = Get(m, "host.procs_running"); !std::isnan(v)) running.push_back(v);
    if (const double v = Get(m, "host.cores"); !std::isnan(v)) cores.push_back(v);
  }
  for (const pattern::CompactRank& r : in.ranks)
    if (ranks.count(r.rank)) wait.push_back(UsToMs(LoaderWaitUs(r)));
  if (work.size() * 2 < ranks.size() || wait.empty()) return false;  // most ranks' workers seen
  const double work_ms = internal::Median(work), wait_ms = internal::Median(wait);
  if (!(work_ms < policy::kLoaderHandOffShare * wait_ms)) return false;
  f->evidence["loader_ms_per_batch"] = work_ms;
  f->evidence["data_wait_ms_per_iteration"] = wait_ms;
  // Where the host's CPUs are all taken the workers wait for one; else the time goes to handing
  // the batch over (the worker's queue, the tensors' shared memory, the training thread's
  // unpickling).
  std::string where = "in the hand-off between processes";
  if (!running.empty() && !cores.empty()) {
    const double run = internal::Median(running), n = internal::Median(cores);
    f->evidence["host_runnable_threads"] = run;
    f->evidence["host_cores"] = n;
    where = run > n * policy::kOversubscribed
                ? fmt::format(
                      "for CPU time ({:.1f} runnable threads on {:.0f} cores) or in the "
                      "hand-off between processes",
                      run, n)
                : fmt::format(
                      "in the hand-off between processes (the host has CPUs to spare: "
                      "{:.1f} runnable threads on {:.0f} cores)",
                      run, n);
  }
  f->evidence_text["reasoning"] = fmt::format(
      "the training thread waits {:.1f} ms per iteration for the next batch, and the DataLoader "
      "worker processes spend {:.1f} ms per batch in the dataset and the collate function: the "
      "batch is ready late, not because their work is slow; it waits {}",
      wait_ms, work_ms, where);
  f->summary += fmt::format(
      ", though the DataLoader worker processes work only {:.1f} ms per batch: the batches wait "
      "{}",
      work_ms, where);
  f->cause = Cause::kConfiguration;
  f->suggestion =
      "The workers are not slow at their work, so a faster dataset will not help: keep what a "
      "batch holds cheap to hand over (a few large tensors, not many small ones or Python "
      "objects; pin_memory for GPUs), raise prefetch_factor so batches are ready ahead, and on a "
      "busy host give the workers CPU (fewer ranks or workers per core; separate cores with "
      "taskset or numactl).";
  return true;
}

const std::vector<std::unique_ptr<CauseRule>>& CauseRules() {
  static const auto* rules = [] {
    auto* v = new std::vector<std::unique_ptr<CauseRule>>;
    v->push_back(std::make_unique<GpuThrottledRule>());
    v->push_back(std::make_unique<CpuThrottledRule>());
    v->push_back(std::make_unique<IoStallRule>());
    v->push_back(std::make_unique<LoaderWorkersRule>());
    v->push_back(std::make_unique<MoreWorkRule>());
    v->push_back(std::make_unique<RunQueueContentionRule>());
    return v;
  }();
  return *rules;
}

void AddOwnCpuTime(const CauseInput& in, Finding* f) {
  if (!IsHostExplainable(*f) || !(in.iteration_ms > 0)) return;
  const int rank = f->ranks[0];
  // Per iteration of the window's median: the ranks' windows differ a little in length.
  const auto cpu_ms = [&in](const std::map<std::string, double>& m) {
    return PerIterationMs(m, Get(m, "proc.run_s"), in.iteration_ms);
  };
  auto it = in.metrics.find(rank);
  if (it == in.metrics.end()) return;
  const double own = cpu_ms(it->second);
  std::vector<double> peers;
  for (const auto& [r, m] : in.metrics)
    if (r != rank && in.SamePeers(r, rank))
      if (const double x = cpu_ms(m); !std::isnan(x)) peers.push_back(x);
  if (std::isnan(own) || peers.empty()) return;
  f->evidence["own_cpu_time_ms"] = own;
  f->evidence["peers_own_cpu_time_ms"] = internal::Median(peers);
}

const CauseRule* ExplainRankFinding(const CauseInput& in, Finding* f) {
  if (!IsHostExplainable(*f)) return nullptr;
  for (const auto& rule : CauseRules())
    if (f->category == rule->category() && f->confidence == policy::kConfidenceOsEvidence)
      return nullptr;  // explained already
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

namespace {

// Findings that the OS's evidence alone makes: for every rank that no finding of EXISTING names,
// LOST_MS(rank, its metrics) is what it loses per iteration by that evidence; where that
// reaches the peer comparison's size gates and RULE holds, a finding on the rank. The peer
// comparison's timing gates miss such ranks (a quota or the scheduler slows all a rank does
// alike, a loader's wait varies between iterations) while the kernel's own count is plain.
template <typename LostMs>
std::vector<Finding> FindUnnamedRanks(const CauseInput& in, const std::map<int, std::string>& hosts,
                                      const std::vector<Finding>& existing, LostMs lost_ms,
                                      const CauseRule& rule) {
  std::vector<Finding> out;
  if (in.iteration_ms <= 0) return out;
  std::set<int> ranks;  // those with metrics (a window) or a pattern (a trace)
  for (const auto& entry : in.metrics) ranks.insert(entry.first);
  for (const pattern::CompactRank& r : in.ranks) ranks.insert(r.rank);
  // A rank a finding of its own names. An all-rank finding's ranks share one cause and leave a
  // rank's own beside it to be found (CI: the batches' hand-off on ranks 0,1,3, 10.7 ms/iter,
  // hid rank 1's DataLoader workers at 200 ms a batch); skipping them also keeps the set small
  // on a 100,000-rank job.
  std::set<int> named;
  for (const Finding& f : existing)
    if (f.finding_class == FindingClass::kSubset) named.insert(f.ranks.begin(), f.ranks.end());
  static const std::map<std::string, double> kNoMetrics;
  for (const int rank : ranks) {
    if (named.count(rank)) continue;
    auto m = in.metrics.find(rank);
    const double ms = lost_ms(rank, m == in.metrics.end() ? kNoMetrics : m->second);
    if (std::isnan(ms) || ms < policy::kMinAbsMs || ms < in.iteration_ms * policy::kMinFraction)
      continue;
    Finding f;
    f.finding_class = FindingClass::kSubset;
    f.category = Category::kStraggler;
    f.ranks = {rank};
    if (auto h = hosts.find(rank); h != hosts.end() && !h->second.empty()) f.hosts = {h->second};
    f.impact_ms = ms;
    f.impact_fraction = ms / in.iteration_ms;
    if (rule.Explain(in, &f)) out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

std::vector<Finding> FindThrottledRanks(const CauseInput& in,
                                        const std::map<int, std::string>& hosts,
                                        const std::vector<Finding>& existing) {
  auto lost = [&](int, const std::map<std::string, double>& m) {
    return PerIterationMs(m, Get(m, "cgroup.throttled_s"), in.iteration_ms);
  };
  return FindUnnamedRanks(in, hosts, existing, lost, CpuThrottledRule());
}

std::vector<Finding> FindSlowLoaderWorkers(const CauseInput& in,
                                           const std::map<int, std::string>& hosts,
                                           const std::vector<Finding>& existing) {
  // Every rank's wait and one sorted sample per role, for the same figure as ExtraLoaderWaitMs
  // without its pass over every rank per rank (O(n^2): hours at 100,000 ranks). A stage without
  // a DataLoader waits for no data: a rank is compared with ranks of its role only.
  std::map<int, double> wait_us;
  std::map<int, int> group_of;  // rank -> its sample
  std::map<int, std::vector<double>> by_group;
  const bool grouped = in.peer_group.size() == in.ranks.size();
  for (size_t i = 0; i < in.ranks.size(); ++i) {
    const pattern::CompactRank& r = in.ranks[i];
    const int g = grouped ? in.peer_group[i] : r.role;
    wait_us[r.rank] = LoaderWaitUs(r);
    group_of[r.rank] = g;
    by_group[g].push_back(wait_us[r.rank]);
  }
  std::map<int, internal::SortedSample> samples;
  for (auto& [g, v] : by_group) samples.emplace(g, internal::SortedSample(v));
  auto lost = [&](int rank, const std::map<std::string, double>&) {
    auto own = wait_us.find(rank);
    if (own == wait_us.end()) return kNone;
    const int g = group_of[rank];
    if (by_group[g].size() < 2) return kNone;  // no peer of its role
    return UsToMs(own->second - samples.at(g).MedianWithout(own->second));
  };
  return FindUnnamedRanks(in, hosts, existing, lost, LoaderWorkersRule());
}

std::vector<Finding> FindMoreWorkRanks(const CauseInput& in,
                                       const std::map<int, std::string>& hosts,
                                       const std::vector<Finding>& existing) {
  // Each shaped rank is compared with all its peers (LargerInputs): quadratic in shaped ranks.
  // Traces without shapes (online windows, simulated jobs of 100,000 ranks) cost one pass.
  if (std::none_of(in.ranks.begin(), in.ranks.end(),
                   [](const pattern::CompactRank& r) { return !r.shapes.empty(); }))
    return {};
  auto lost = [&](int rank, const std::map<std::string, double>&) {
    const std::optional<MoreWork> w = MoreWorkOf(in, rank);
    return w ? w->explained_ms : kNone;
  };
  return FindUnnamedRanks(in, hosts, existing, lost, MoreWorkRule());
}

std::vector<Finding> FindContendedRanks(const CauseInput& in,
                                        const std::map<int, std::string>& hosts,
                                        const std::vector<Finding>& existing) {
  // The peers' median from one sorted sample, as PeersMedian gives it, without a pass over
  // every rank per rank (O(n^2): hours at 100,000 ranks).
  std::vector<double> all;
  for (const auto& [r, m] : in.metrics)
    if (const double x = RunQueueWaitPerCpu(m); !std::isnan(x)) all.push_back(x);
  const internal::SortedSample sample(all);
  auto lost = [&](int, const std::map<std::string, double>& m) {
    const double own = RunQueueWaitPerCpu(m);
    const double peers = std::isnan(own) || all.size() < 2 ? kNone : sample.MedianWithout(own);
    if (std::isnan(own) || std::isnan(peers) || own < peers * policy::kRunQueueAloneRatio)
      return kNone;
    return PerIterationMs(m, Get(m, "proc.runq_wait_s") - peers * Get(m, "proc.run_s"),
                          in.iteration_ms);
  };
  return FindUnnamedRanks(in, hosts, existing, lost, RunQueueContentionRule());
}

}  // namespace perftracker::diagnose
