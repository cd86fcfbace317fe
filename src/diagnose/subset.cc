// Subset problems: ranks of one role are compared with each other. The straggler logic follows
// the waiting: a late rank's peers spend longer in collectives while its own collectives stay
// short, so the rank with more own work and less waiting is blamed, never the waiters.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/parallel_for.h"
#include "base/units.h"
#include "diagnose/finding_text.h"
#include "diagnose/peer_groups.h"
#include "diagnose/peer_stats.h"
#include "diagnose/peer_table.h"
#include "diagnose/policy.h"
#include "diagnose/problem_finders.h"
#include "diagnose/rank_info.h"
#include "diagnose/what_if.h"

namespace perftracker::diagnose::internal {
namespace {

using pattern::CompactFunction;
using pattern::CompactRank;
using pattern::FunctionClass;
using pattern::FunctionInfo;

// Added to each culprit's excess before the classes are compared: a class whose culprits all
// lost nothing still counts, so that ties go to the first culprit's class (not a threshold).
constexpr double kTieBreakUs = 1e-9;

// A member's own-work totals against its peers' medians, as evidence (cost_bound.h bounds a
// rank's cost by the largest excess): CPU (Python frames' self time online, the ops' offline);
// online, the CPU ops inside the frames too, as a frame's self time also holds the blocking waits
// no op names (a DDP backward waiting for a late rank's buckets); GPU work.
void AddOwnWork(const Member& mb, double cpu, double ops, double gpu, Finding* f) {
  if (!std::isnan(cpu)) {
    f->evidence["own_work_ms"] = UsToMs(cpu);
    f->evidence["peers_own_work_ms"] = UsToMs(mb.own_cpu.reference);
  }
  if (!std::isnan(ops) && ops > 0) {
    f->evidence["own_op_work_ms"] = UsToMs(ops);
    f->evidence["peers_own_op_work_ms"] = UsToMs(mb.own_ops.reference);
  }
  if (gpu > 0) {
    f->evidence["own_gpu_work_ms"] = UsToMs(gpu);
    f->evidence["peers_own_gpu_work_ms"] = UsToMs(mb.own_gpu.reference);
  }
}

// The subset findings of one group, written from its table: a straggler (the member doing more
// own work while its peers wait), a late arrival, a member whose collectives are slower.
class GroupAnalysis : private PeerTable {
 public:
  GroupAnalysis(const pattern::CompactJob& cj, const std::vector<size_t>& members,
                const JobInfo& job, const DiagnoseOptions& o)
      : PeerTable(cj, members, job, o) {}

  void Run(std::vector<Finding>* out);

 private:
  // A function of member I whose exclusive time exceeds its peers', or whose inclusive time is
  // an outlier.
  struct Culprit {
    const Row* row;
    double self_excess, incl_excess;
    bool outlier;
  };
  // The functions that name member I's straggler finding, the biggest first, at most five: own
  // work (SYNC_ONLY: synchronizing and launch calls instead), by exclusive-time excess.
  std::vector<Culprit> Culprits(size_t i, bool sync_only) const;
  bool StragglerFinding(size_t i, std::vector<Finding>* out) const;
  bool LateArrivalFinding(size_t i, std::vector<Finding>* out) const;
  double CollectiveEffectUs(double reference_us) const;
  bool CommunicationFinding(size_t i, std::vector<Finding>* out) const;
  void FillCommon(size_t i, Finding* f) const;
  std::string PeersPhrase() const { return n() == 2 ? "the other rank (one of two)" : "its peers"; }
};

void GroupAnalysis::FillCommon(size_t i, Finding* f) const {
  const CompactRank& r = *m_[i].r;
  f->finding_class = FindingClass::kSubset;
  f->ranks = {r.rank};
  if (!r.host.empty()) f->hosts = {r.host};
  f->impact_fraction = iter_us_ > 0 ? MsToUs(f->impact_ms) / iter_us_ : 0;
  f->evidence["rank_iteration_ms"] = r.MeanIterationMs();
  f->evidence["peers"] = static_cast<double>(n() - 1);
  if (n() == 2) f->evidence_text["peers"] = "one of two ranks: no majority to compare with";
}

Category CategoryOf(FunctionClass c) {
  switch (c) {
    case FunctionClass::kDataLoader:
      return Category::kDataLoader;
    case FunctionClass::kGc:
      return Category::kGc;
    case FunctionClass::kPython:
      return Category::kPython;
    case FunctionClass::kSync:
      return Category::kSync;
    case FunctionClass::kMemcpy:
      return Category::kMemcpy;
    default:
      return Category::kStraggler;
  }
}

std::string Phrase(Category category, int rank) {
  if (category == Category::kDataLoader) return fmt::format("rank {}'s data loader is slow", rank);
  if (category == Category::kGc)
    return fmt::format("rank {} spends time in garbage collection", rank);
  if (category == Category::kPython) return fmt::format("rank {} runs slow Python code", rank);
  if (category == Category::kSync) return fmt::format("rank {} waits in synchronizing calls", rank);
  if (category == Category::kMemcpy) return fmt::format("rank {}'s memory copies are slow", rank);
  return fmt::format("rank {} is a straggler", rank);
}

std::string Suggestion(Category category, Cause cause, int rank, const std::string& fn) {
  if (category == Category::kDataLoader)
    return fmt::format(
        "Rank {}'s input pipeline cannot keep up: check its storage or network reads and "
        "transforms; raise DataLoader num_workers, set pin_memory=True and prefetch_factor, or "
        "cache the data locally.",
        rank);
  if (category == Category::kGc)
    return "Avoid reference cycles in the training step; call gc.freeze() after setup, or "
           "gc.disable() and run gc.collect() at the same step on every rank.";
  if (category == Category::kPython)
    return fmt::format(
        "Profile rank {}'s Python code at the stack shown (py-spy, with_stack=True); move "
        "rank-specific work (logging, metrics, checkpointing) off the training step.",
        rank);
  if (category == Category::kSync)
    return fmt::format(
        "Remove .item(), .cpu(), print(tensor) and torch.cuda.synchronize() from rank {}'s step, "
        "or do them only at logging intervals.",
        rank);
  if (category == Category::kMemcpy)
    return fmt::format(
        "Check rank {}'s host-device link (nvidia-smi topo -m, PCIe link width and speed) and use "
        "pinned memory.",
        rank);
  if (cause == Cause::kHardware)
    return fmt::format(
        "Check rank {}'s device and host: GPU clocks and thermals (nvidia-smi -q -d "
        "PERFORMANCE,CLOCK), other processes competing for its CPUs, CPU/NUMA binding; drain the "
        "node if it persists.",
        rank);
  return fmt::format(
      "Find why rank {} does more work in {}: rank-dependent code paths, uneven batches or "
      "sequence lengths, extra evaluation or logging on this rank.",
      rank, fn);
}

std::vector<GroupAnalysis::Culprit> GroupAnalysis::Culprits(size_t i, bool sync_only) const {
  std::vector<Culprit> all;
  double max_self = 0;
  for (const Row& row : rows_) {
    FunctionClass fc = row.proto->fclass;
    if (fc == FunctionClass::kCollective) continue;
    if (IsWait(fc) != sync_only) continue;
    PeerComparison s = Compare(row.self, i, row.RefSelf());
    PeerComparison v = Compare(row.v, i, row.ref_v);
    if (s.excess <= 0 && !v.high) continue;
    all.push_back({&row, s.excess, v.excess, v.high});
    max_self = std::max(max_self, s.excess);
  }
  // Wrappers grow with what they contain; exclusive time names the function that really grew.
  std::vector<Culprit> culprits;
  for (const auto& c : all)
    if (max_self > 0 && c.self_excess >= policy::kCulpritShareOfTop * max_self &&
        (c.outlier || c.self_excess >= policy::kCulpritShareNonOutlier * max_self))
      culprits.push_back(c);
  std::sort(culprits.begin(), culprits.end(),
            [](const Culprit& a, const Culprit& b) { return a.self_excess > b.self_excess; });
  if (culprits.empty()) {
    for (const auto& c : all)
      if (c.outlier) culprits.push_back(c);
    std::sort(culprits.begin(), culprits.end(),
              [](const Culprit& a, const Culprit& b) { return a.incl_excess > b.incl_excess; });
  }
  if (culprits.size() > 5) culprits.resize(5);
  return culprits;
}

bool GroupAnalysis::StragglerFinding(size_t i, std::vector<Finding>* out) const {
  const Member& mb = m_[i];
  const CompactRank& r = *mb.r;
  bool sync_only = mb.high_own.empty() && !mb.own_cpu.high && !mb.own_gpu.high;
  const std::vector<Culprit> culprits = Culprits(i, sync_only);
  if (culprits.empty()) return false;

  std::map<FunctionClass, double> by_class;
  for (const auto& c : culprits)
    by_class[c.row->proto->fclass] += std::max(c.self_excess, 0.0) + kTieBreakUs;
  FunctionClass dominant = culprits[0].row->proto->fclass;
  double best = -1;
  for (auto [fc, x] : by_class)
    if (x > best) best = x, dominant = fc;
  // Python frames hold the ops they call (online, an op inside a frame is the frame's time): a
  // rank whose ops grew with its frames computes more (a straggler's extra matmuls show as
  // <built-in method mm>), where slow Python grows the frames alone.
  if (dominant == FunctionClass::kPython && !std::isnan(mb.own_ops.excess) &&
      mb.own_ops.excess >= policy::kOpWorkShareOfPython * best) {
    dominant = FunctionClass::kCompute;
  }

  Finding f;
  f.category = CategoryOf(dominant);
  double impact = std::max({mb.excess, 0.0});
  if (sync_only) {
    for (const auto& c : culprits) impact += std::max(c.self_excess, 0.0);
  }
  impact = std::max(impact, culprits[0].self_excess);
  if (impact < MinImpactUs(iter_us_, o_)) return false;
  f.impact_ms = UsToMs(impact);

  const Culprit& top = culprits[0];
  const FunctionInfo* tf = top.row->proto;
  double top_v = top.row->v[i];
  double top_ref = Compare(top.row->v, i, top.row->ref_v).reference;
  double calls = top.row->calls[i];
  double calls_ref = Compare(top.row->calls, i, top.row->RefCalls()).reference;
  double peers_wait = coll_sorted_->MedianWithout(coll_[i]) - coll_[i];
  // More calls than the peers is a difference in the program. Equal calls and more time is
  // timing alone, which the window's iteration-to-iteration noise (a shared host's scheduling)
  // also produces: it must stand out of that noise.
  bool extra_calls = false;
  for (const auto& c : culprits) {
    double cr = Compare(c.row->calls, i, c.row->RefCalls()).reference;
    if (c.row->calls[i] > cr * policy::kExtraCallsRatio + policy::kExtraCallsAbs)
      extra_calls = true;
  }
  const double z = RowZ(*top.row, i, top_v - top_ref);
  if (!extra_calls && z < policy::kMinSignificanceTimingOnly) return false;
  f.confidence = extra_calls ? policy::kConfidenceExtraCalls : policy::kConfidenceTimingOnly;
  if (std::isfinite(z)) f.evidence["noise_z"] = z;

  // Cause: the same functions uniformly slower with equal call counts point at the device or
  // the host (slow GPU, throttling, CPU contention); extra calls point at the program.
  std::string reasoning;
  if (f.category == Category::kStraggler || f.category == Category::kMemcpy) {
    std::vector<std::string> extra;
    for (const auto& c : culprits) {
      double cr = Compare(c.row->calls, i, c.row->RefCalls()).reference;
      if (c.row->calls[i] > cr * policy::kExtraCallsRatio + policy::kExtraCallsAbs)
        extra.push_back(
            fmt::format("{} {:.1f} vs {:.1f} calls/iter", c.row->proto->name, c.row->calls[i], cr));
    }
    int sig = 0, slower = 0;
    std::vector<double> ratios;
    for (const Row& row : rows_) {
      if (IsWait(row.proto->fclass) || !row.f[i]) continue;
      PeerComparison s = Compare(row.self, i, row.RefSelf());
      if (s.reference < policy::kSignificantShare * iter_us_ || s.reference <= 0) continue;
      ++sig;
      double ratio = row.self[i] / s.reference;
      if (ratio >= policy::kGenerallySlowerRatio) ++slower, ratios.push_back(ratio);
    }
    if (!extra.empty()) {
      f.cause = Cause::kSoftware;
      reasoning =
          fmt::format("rank {} makes more calls than its peers ({}): extra work in the program",
                      r.rank, fmt::join(extra, "; "));
    } else if (sig >= 2 && slower >= 2 && slower * 2 >= sig) {
      f.cause = Cause::kHardware;
      f.evidence["uniform_slowdown_ratio"] = Median(ratios);
      reasoning = fmt::format(
          "{} of {} significant functions are slower by a median x{:.2f} with equal call counts: "
          "the device or host is slower (throttling, a weak GPU, CPU contention)",
          slower, sig, Median(ratios));
    } else {
      f.cause = Cause::kSoftware;
      reasoning = fmt::format(
          "only {} is slower, with equal call counts: different input sizes or a different code "
          "path on this rank",
          tf->name);
    }
    f.evidence["functions_slower"] = slower;
    f.evidence["functions_significant"] = sig;
  } else {
    f.cause = Cause::kSoftware;
    reasoning = fmt::format("the extra time is in {} functions on rank {}",
                            pattern::FunctionClassName(dominant), r.rank);
  }
  if (peers_wait > 0)
    reasoning +=
        fmt::format("; its peers wait {} longer in collectives, as expected when one rank is late",
                    Ms(peers_wait));
  f.evidence_text["reasoning"] = reasoning;

  for (const auto& c : culprits) f.functions.push_back(MakeFunctionRef(*c.row->proto));
  f.evidence["rank_ms"] = UsToMs(top_v);
  f.evidence["peers_ms"] = UsToMs(top_ref);
  if (top_ref > 0) f.evidence["ratio"] = top_v / top_ref;
  f.evidence["calls_per_iter"] = calls;
  f.evidence["peers_calls_per_iter"] = calls_ref;
  f.evidence["excess_self_ms"] = UsToMs(top.self_excess);
  if (!std::isnan(peers_wait))  // NaN: the rank's collectives are in its missing part
    f.evidence["peers_extra_collective_wait_ms"] = UsToMs(std::max(peers_wait, 0.0));
  AddOwnWork(mb, own_cpu_[i], own_ops_[i], own_gpu_[i], &f);
  if (!r.missing_part.empty())
    f.evidence_text["partial_data"] = fmt::format(
        "no {} data on rank {}: compared on its other functions only", r.missing_part, r.rank);
  FillCommon(i, &f);
  f.summary = fmt::format("{}: {} takes {}/iter vs {} on {}; the job loses {}/iter ({})",
                          Phrase(f.category, r.rank), tf->name, Ms(top_v), Ms(top_ref),
                          PeersPhrase(), Ms(impact), Percent(f.impact_fraction));
  f.suggestion = Suggestion(f.category, f.cause, r.rank, tf->name);
  out->push_back(std::move(f));
  return true;
}

// A rank whose collectives are much shorter than its peers' while none of its profiled
// functions is slower: it arrives late, doing work the profiler does not see.
// Collective time is mostly waiting, so it carries every peer's noise (on a shared host a
// healthy rank's all-reduce varies by 40% between ranks). Alone, without a slower function to
// explain it, a collective difference must be large before it names a rank or a link.
double GroupAnalysis::CollectiveEffectUs(double reference_us) const {
  return std::max({policy::kLateWaitShareOfCollective * reference_us,
                   policy::kLateWaitShareOfIteration * iter_us_, MinImpactUs(iter_us_, o_)});
}

bool GroupAnalysis::LateArrivalFinding(size_t i, std::vector<Finding>* out) const {
  const Member& mb = m_[i];
  if (n() < 3 || !mb.coll.low || mb.low_coll.empty()) return false;
  // A function of its own is slower: the straggler rule judged it (and found it within the
  // noise, or too small); "nothing profiled is slower" would be untrue.
  if (!mb.high_own.empty()) return false;
  double wait = -mb.coll.excess;
  if (wait < CollectiveEffectUs(mb.coll.reference)) return false;
  // Late in most of the window, not in a few iterations: the wait stands out of the
  // iteration-to-iteration noise, and exceeds the spread among the healthy peers themselves.
  const double z = CollectiveZ(i, wait);
  if (z < policy::kMinSignificance) return false;
  const double lo = coll_sorted_->MinWithout(coll_[i]), hi = coll_sorted_->MaxWithout(coll_[i]);
  if (hi >= lo && wait <= hi - lo) return false;
  Finding f;
  f.category = Category::kStraggler;
  f.cause = Cause::kUnknown;
  f.confidence = policy::kConfidenceLateArrival;
  if (std::isfinite(z)) f.evidence["noise_z"] = z;
  f.impact_ms = UsToMs(wait);
  std::vector<Outlier> lows = mb.low_coll;
  std::sort(lows.begin(), lows.end(),
            [](const Outlier& a, const Outlier& b) { return a.cmp.excess < b.cmp.excess; });
  for (size_t k = 0; k < lows.size() && k < 3; ++k) {
    const Row* row = lows[k].row;
    f.functions.push_back(MakeFunctionRef(*row->proto));
  }
  f.evidence["rank_collective_ms"] = UsToMs(coll_[i]);
  f.evidence["peers_collective_ms"] = UsToMs(mb.coll.reference);
  f.evidence["peers_extra_collective_wait_ms"] = UsToMs(wait);
  f.evidence_text["reasoning"] =
      "its peers wait for it in collectives while it waits for nobody, but none of its profiled "
      "functions is slower: the extra time is outside profiled code (Python, GC, I/O, sleeps)";
  FillCommon(i, &f);
  f.summary = fmt::format(
      "rank {} is late to collectives: its peers wait {}/iter longer in {} while no profiled "
      "function on rank {} is slower; the job loses {}/iter ({})",
      m_[i].r->rank, Ms(wait), lows[0].row->proto->name, m_[i].r->rank, Ms(wait),
      Percent(f.impact_fraction));
  f.suggestion = fmt::format(
      "Profile rank {} with Python stacks (with_stack=True) or py-spy to see the work the "
      "trace does not show (logging, checkpointing, garbage collection, I/O).",
      m_[i].r->rank);
  out->push_back(std::move(f));
  return true;
}

// A rank whose collectives are slower than its peers' while nobody is late: its link is slow.
bool GroupAnalysis::CommunicationFinding(size_t i, std::vector<Finding>* out) const {
  const Member& mb = m_[i];
  if (n() < 3 || (!mb.coll.high && mb.high_coll.empty())) return false;
  double excess = mb.coll.high ? mb.coll.excess : 0;
  double reference = mb.coll.reference;
  for (const auto& x : mb.high_coll) {
    if (x.cmp.excess > excess) reference = x.cmp.reference;
    excess = std::max(excess, x.cmp.excess);
  }
  if (excess < CollectiveEffectUs(reference)) return false;
  // Timing alone names the link, as it names a straggler: the same bar (policy.h says why).
  const double z = CollectiveZ(i, excess);
  if (z < policy::kMinSignificanceTimingOnly) return false;
  // Synchronous training ends every rank's iteration together, so a longer collective with
  // less own work is a rank that arrived early and waited for slower peers (each within the
  // noise): the scheduler or the data gave it an easier iteration. A slow link lengthens the
  // collective of a rank whose own work is like its peers'.
  double own_deficit = 0;
  if (!std::isnan(own_cpu_[i])) own_deficit += mb.own_cpu.reference - own_cpu_[i];
  if (!std::isnan(own_gpu_[i])) own_deficit += mb.own_gpu.reference - own_gpu_[i];
  if (own_deficit >= policy::kEarlyArrivalShare * excess) return false;
  std::vector<Outlier> highs = mb.high_coll;
  std::sort(highs.begin(), highs.end(),
            [](const Outlier& a, const Outlier& b) { return a.cmp.excess > b.cmp.excess; });
  Finding f;
  f.category = Category::kCommunication;
  f.cause = Cause::kHardware;
  f.confidence = policy::kConfidenceTimingOnly;
  if (std::isfinite(z)) f.evidence["noise_z"] = z;
  f.impact_ms = UsToMs(excess);
  for (size_t k = 0; k < highs.size() && k < 3; ++k) {
    const Row* row = highs[k].row;
    f.functions.push_back(MakeFunctionRef(*row->proto));
  }
  std::string fn = "its collectives";
  std::string bw;
  if (!highs.empty()) {
    const Row* row = highs[0].row;
    fn = row->proto->name;
    f.evidence["rank_ms"] = UsToMs(row->v[i]);
    f.evidence["peers_ms"] = UsToMs(highs[0].cmp.reference);
    if (highs[0].cmp.reference > 0) f.evidence["ratio"] = row->v[i] / highs[0].cmp.reference;
    std::vector<double> peer_bw;  // O(n), once per communication finding
    ThreadPeerWork().elements += n();
    for (size_t k = 0; k < n(); ++k)
      if (k != i && row->f[k]) peer_bw.push_back(m_[k].r->CollectiveOf(*row->f[k]).busbw_gbps);
    const auto c = row->f[i] ? m_[i].r->CollectiveOf(*row->f[i]) : pattern::CompactCollective{};
    if (c.msg_bytes > 0) {
      f.evidence["busbw_gbps"] = c.busbw_gbps;
      f.evidence["peers_busbw_gbps"] = Median(peer_bw);
      f.evidence["msg_bytes"] = c.msg_bytes;
      bw = fmt::format(" (bus bandwidth {:.1f} vs {:.1f} GB/s)", c.busbw_gbps, Median(peer_bw));
    }
  }
  f.evidence["rank_collective_ms"] = UsToMs(coll_[i]);
  f.evidence["peers_collective_ms"] = UsToMs(mb.coll.reference);
  AddOwnWork(mb, own_cpu_[i], own_ops_[i], own_gpu_[i], &f);
  f.evidence_text["reasoning"] =
      "its collectives are slower than its peers' while no rank does more own work, so it is "
      "not waiting for a late rank: its link or NIC is slow";
  FillCommon(i, &f);
  f.summary = fmt::format(
      "rank {}'s communication is slow: {} takes {}/iter vs {} on its peers{} while no rank is "
      "late; the job loses {}/iter ({})",
      m_[i].r->rank, fn, Ms(MsToUs(f.evidence["rank_ms"])), Ms(MsToUs(f.evidence["peers_ms"])), bw,
      Ms(excess), Percent(f.impact_fraction));
  f.suggestion = fmt::format(
      "Check rank {}'s network path: NIC and link speed and errors (ibstat, ethtool), NVLink "
      "status (nvidia-smi nvlink -s), NCCL_DEBUG=INFO for the transport chosen; a capped link "
      "shows as low bandwidth with little variation.",
      m_[i].r->rank);
  out->push_back(std::move(f));
  return true;
}

void GroupAnalysis::Run(std::vector<Finding>* out) {
  if (n() < 2) return;
  bool any = false;
  for (size_t i : Candidates()) any |= StragglerFinding(i, out);
  if (any) return;  // collective outliers are the waiting this straggler causes
  for (size_t i = 0; i < n(); ++i) any |= LateArrivalFinding(i, out);
  if (any) return;
  for (size_t i = 0; i < n(); ++i) CommunicationFinding(i, out);
}

// Several ranks of one host with the same problem are one node-level finding.
void MergeByHost(std::vector<Finding>* findings) {
  std::map<std::tuple<std::string, std::string, int>, std::vector<size_t>> by;
  for (size_t k = 0; k < findings->size(); ++k) {
    const Finding& f = (*findings)[k];
    if (f.finding_class != FindingClass::kSubset || f.hosts.size() != 1) continue;
    // By name: the groups keep the order they had when the category was a string.
    by[{f.hosts[0], CategoryName(f.category), static_cast<int>(f.cause)}].push_back(k);
  }
  std::vector<bool> drop(findings->size(), false);
  for (auto& [key, idx] : by) {
    if (idx.size() < 2) continue;
    Finding& first = (*findings)[idx[0]];
    std::set<std::string> names;
    for (const auto& fn : first.functions) names.insert(fn.name + "\x1f" + fn.kind);
    for (size_t k = 1; k < idx.size(); ++k) {
      Finding& other = (*findings)[idx[k]];
      first.ranks.insert(first.ranks.end(), other.ranks.begin(), other.ranks.end());
      for (auto& fn : other.functions)
        if (names.insert(fn.name + "\x1f" + fn.kind).second && first.functions.size() < 5)
          first.functions.push_back(fn);
      if (other.impact_ms > first.impact_ms) {
        first.impact_ms = other.impact_ms;
        first.impact_fraction = other.impact_fraction;
      }
      drop[idx[k]] = true;
    }
    std::sort(first.ranks.begin(), first.ranks.end());
    first.evidence_text["node"] = fmt::format("ranks {} on host {} show the same problem",
                                              RankList(first.ranks), first.hosts[0]);
    first.summary = fmt::format("ranks {} on host {}: {}", RankList(first.ranks), first.hosts[0],
                                first.summary);
  }
  std::vector<Finding> kept;
  for (size_t k = 0; k < findings->size(); ++k)
    if (!drop[k]) kept.push_back(std::move((*findings)[k]));
  *findings = std::move(kept);
}

}  // namespace

void FindSubsetProblems(const pattern::CompactJob& cj, const JobInfo& job, const DiagnoseOptions& o,
                        std::vector<std::vector<size_t>> groups, std::vector<Finding>* out) {
  const std::vector<CompactRank>& ranks = cj.ranks();
  // Groups are independent: analyzed on o.threads threads, each group's findings in its own
  // slot and kept in group order, so the result does not depend on scheduling.
  std::vector<std::vector<Finding>> per_group(groups.size());
  {
    ScopedPhase p(o.phases, "peer comparison");
    ParallelFor(groups.size(), o.threads, [&](size_t k) {
      GroupAnalysis g(cj, groups[k], job, o);
      g.Run(&per_group[k]);
    });
  }
  std::vector<Finding> found;
  for (auto& v : per_group)
    for (auto& f : v) found.push_back(std::move(f));
  // Only a job that spans hosts has node-level problems; on one host a merge would hide ranks.
  // Slow links found from the groups explain the collective outliers of their members: a
  // victim's longer collectives (communication) and a healthy peer's shorter ones (late
  // arrival, cause unknown) are not findings of their own.
  // Likewise a rank whose longer collectives are waiting for a late member of its group (often
  // in another pipeline stage, so not among its peers), and a "late arrival" that no group
  // instance saw arrive late.
  std::vector<Finding> links;
  CollectiveEvidence ev;
  std::set<int> own_cause;
  for (const auto& f : found)
    if (f.category != Category::kCommunication &&
        !(f.category == Category::kStraggler && f.cause == Cause::kUnknown))
      own_cause.insert(f.ranks.begin(), f.ranks.end());
  {
    ScopedPhase p(o.phases, "link localiser");
    FindLinkProblems(cj, job, o, own_cause, &links, &ev);
  }
  auto all_in = [](const Finding& f, auto pred) {
    return !f.ranks.empty() && std::all_of(f.ranks.begin(), f.ranks.end(), pred);
  };
  std::erase_if(found, [&](const Finding& f) {
    if (f.category == Category::kCommunication)
      return all_in(f, [&](int r) { return ev.explained.count(r) || ev.waiting.count(r); });
    if (f.category == Category::kStraggler && f.cause == Cause::kUnknown)
      return all_in(f, [&](int r) { return ev.covered.count(r) && !ev.late.count(r); });
    return false;
  });
  std::set<std::string> hosts;
  for (const auto& r : ranks) hosts.insert(r.host);
  if (hosts.size() >= 2) MergeByHost(&found);
  for (auto& f : links) found.push_back(std::move(f));
  FoldBySwitch(ranks, &found);
  for (auto& f : found) out->push_back(std::move(f));
}

}  // namespace perftracker::diagnose::internal
