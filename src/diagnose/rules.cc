// All-rank problems: every rank shows the same pattern, so there are no healthy peers to compare
// with; each rule compares against what a healthy training step looks like instead.
#include "diagnose/rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "base/parallel_for.h"
#include "base/units.h"
#include "diagnose/finding_text.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"
#include "diagnose/problem_finders.h"
#include "diagnose/rank_info.h"

namespace perftracker::diagnose::internal {
namespace rules {
namespace {

using pattern::CompactFunction;
using pattern::CompactRank;
using pattern::FunctionClass;

bool ContainsNoCase(const std::string& s, const std::string& word) {
  auto it = std::search(s.begin(), s.end(), word.begin(), word.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  });
  return it != s.end();
}

// One rule's per-rank measurement.
struct RankValue {
  const CompactRank* r = nullptr;
  double value = 0;  // us per iteration
  bool affected = false;
  // What carries the value; biggest first (by exclusive time when by_self) on the typical rank
  // only, the one whose functions name the finding: sorting every rank's would cost more than
  // the rule at 100,000 ranks.
  std::vector<const CompactFunction*> functions;
  bool by_self = false;
  bool has_self = false;
};

struct RuleResult {
  std::vector<RankValue> per_rank;
  int affected = 0;
  size_t typical = 0;  // index in per_rank of Typical()
};

void SortBy(std::vector<const CompactFunction*>* fs, bool self, bool has_self) {
  std::sort(fs->begin(), fs->end(), [&](const CompactFunction* a, const CompactFunction* b) {
    return (self ? SelfUs(*a, has_self) : a->per_iter_us) >
           (self ? SelfUs(*b, has_self) : b->per_iter_us);
  });
}

// The affected rank whose value is the median of the affected ranks (the first rank when none
// is affected): its functions name the finding.
size_t TypicalIndex(const RuleResult& res) {
  std::vector<size_t> a;
  for (size_t k = 0; k < res.per_rank.size(); ++k)
    if (res.per_rank[k].affected) a.push_back(k);
  if (a.empty()) return 0;
  std::sort(a.begin(), a.end(),
            [&](size_t x, size_t y) { return res.per_rank[x].value < res.per_rank[y].value; });
  return a[a.size() / 2];
}

// Runs FN(rank, &value) on every rank of the job, on the options' threads (FN writes only its
// rank's value), then orders the typical rank's functions.
template <typename Fn>
RuleResult Measure(const RuleInput& in, Fn fn) {
  RuleResult res;
  const auto& ranks = in.cj.ranks();
  res.per_rank.resize(ranks.size());
  ParallelFor(ranks.size(), in.o.threads, [&](size_t k) {
    res.per_rank[k].r = &ranks[k];
    fn(ranks[k], &res.per_rank[k]);
  });
  for (const RankValue& rv : res.per_rank) res.affected += rv.affected;
  if (!res.per_rank.empty()) {
    res.typical = TypicalIndex(res);
    RankValue& t = res.per_rank[res.typical];
    SortBy(&t.functions, t.by_self, t.has_self);
  }
  return res;
}

// More than half of the ranks are affected.
bool Most(const RuleInput& in, const RuleResult& res) {
  return res.affected > 0 && res.affected * 2 > static_cast<int>(in.cj.ranks().size());
}

// Impact of an all-rank rule. Wait-like measurements take the minimum over ranks: a late rank
// makes its peers wait longer, which must not read as an all-rank cost.
double Impact(const RuleResult& res, bool wait_like) {
  std::vector<double> v;
  for (const auto& rv : res.per_rank) v.push_back(rv.value);
  if (v.empty()) return 0;
  return wait_like ? *std::min_element(v.begin(), v.end()) : Median(v);
}

// The impact is worth a finding (--min-impact).
bool Reaches(const RuleInput& in, double impact_us) {
  return impact_us >= MinImpactUs(in.iter_us, in.o);
}

// The rank whose functions name the finding (TypicalIndex), its functions biggest first.
const RankValue& Typical(const RuleResult& res) { return res.per_rank[res.typical]; }

// The finding's common part: affected ranks and hosts, the typical rank's first MAX_FUNCTIONS
// functions, impact and the value's spread over ranks.
Finding Make(const RuleInput& in, const RuleResult& res, Category category, Cause cause,
             double impact_us, size_t max_functions) {
  const double iter_us = in.iter_us;
  Finding f;
  f.finding_class = FindingClass::kAll;
  f.category = category;
  f.cause = cause;
  f.confidence = policy::kConfidenceRule;
  std::vector<const pattern::RankSummary*> affected;
  for (const auto& rv : res.per_rank)
    if (rv.affected) {
      f.ranks.push_back(rv.r->rank);
      affected.push_back(rv.r);
    }
  std::sort(f.ranks.begin(), f.ranks.end());
  f.hosts = HostsOf(affected);
  const RankValue& t = Typical(res);
  for (size_t k = 0; k < t.functions.size() && k < max_functions; ++k)
    f.functions.push_back(MakeFunctionRef(*t.functions[k]->info));
  f.impact_ms = UsToMs(impact_us);
  f.impact_fraction = iter_us > 0 ? impact_us / iter_us : 0;
  std::vector<double> vals;
  for (const auto& rv : res.per_rank) vals.push_back(rv.value);
  f.evidence["ranks_affected"] = res.affected;
  f.evidence["ranks_total"] = static_cast<double>(in.cj.ranks().size());
  f.evidence["median_ms"] = UsToMs(Median(vals));
  f.evidence["min_ms"] = vals.empty() ? 0 : UsToMs(*std::min_element(vals.begin(), vals.end()));
  f.evidence["max_ms"] = vals.empty() ? 0 : UsToMs(*std::max_element(vals.begin(), vals.end()));
  f.evidence["iteration_ms"] = UsToMs(iter_us);
  return f;
}

std::string RanksPhrase(const Finding& f, size_t total) {
  if (f.ranks.size() == total) return total == 1 ? "the rank" : fmt::format("all {} ranks", total);
  return fmt::format("ranks {}", RankList(f.ranks));
}

}  // namespace

// Data loading on the critical path.
std::optional<Fired> DataLoaderRule(const RuleInput& in) {
  const size_t total = in.cj.ranks().size();
  RuleResult loader = Measure(in, [](const CompactRank& r, RankValue* rv) {
    bool any_main = r.any_main;
    for (const auto& f : r.compact) {
      if (f.fclass() != FunctionClass::kDataLoader || (any_main && !f.main_thread)) continue;
      rv->functions.push_back(&f);
      // Loader functions nest (enumerate(DataLoader) around __next__): the outermost counts.
      rv->value = std::max<double>(rv->value, f.per_iter_us);
    }
    double it = IterationUs(r);
    rv->affected = it > 0 && rv->value > policy::kLoaderShare * it;
    rv->value = std::max(0.0, rv->value - policy::kLoaderAllowance * it);
  });
  if (!Most(in, loader)) return std::nullopt;
  double impact = Impact(loader, false);
  if (!Reaches(in, impact)) return std::nullopt;
  Finding f = Make(in, loader, Category::kDataLoader, Cause::kSoftware, impact, 3);
  std::string fn = f.functions.empty() ? "the DataLoader" : f.functions[0].name;
  f.evidence_text["reasoning"] = fmt::format(
      "the training loop waits for the next batch on the main thread: more than {} of the "
      "step on {} of {} ranks (a healthy loader costs about {})",
      Percent(policy::kLoaderShare), loader.affected, total, Percent(policy::kLoaderAllowance));
  f.summary = fmt::format("data loading is slow on {}: {} takes {}/iter ({} of the step)",
                          RanksPhrase(f, total), fn, Ms(impact), Percent(f.impact_fraction));
  f.suggestion =
      "Load data in the background: DataLoader(num_workers=N, pin_memory=True, "
      "prefetch_factor=2, persistent_workers=True); move heavy transforms out of collate; "
      "check the storage the data is read from.";
  return Fired{std::move(f), impact};
}

// Synchronizing calls stall the CPU until the GPU drains; they cost only the GPU idle they cause.
std::optional<Fired> SyncRule(const RuleInput& in) {
  const size_t total = in.cj.ranks().size();
  RuleResult sync = Measure(in, [](const CompactRank& r, RankValue* rv) {
    bool has_self = r.has_self;
    for (const auto& f : r.compact) {
      if (f.fclass() != FunctionClass::kSync) continue;
      rv->functions.push_back(&f);
      rv->value += SelfUs(f, has_self);
    }
    rv->by_self = true;
    rv->has_self = has_self;
    if (r.has_gpu && r.gpu_idle_us > 0) rv->value = std::min(rv->value, r.gpu_idle_us);
    double it = IterationUs(r);
    rv->affected = it > 0 && rv->value > policy::kSyncShare * it;
  });
  if (!Most(in, sync)) return std::nullopt;
  double impact = Impact(sync, true);
  if (!Reaches(in, impact)) return std::nullopt;
  Finding f = Make(in, sync, Category::kSync, Cause::kSoftware, impact, 3);
  std::string fn = f.functions.empty() ? "synchronizing calls" : f.functions[0].name;
  f.evidence_text["reasoning"] =
      "host-device synchronization on the critical path: the CPU stops queueing work until "
      "the GPU drains, so the GPU then idles while the CPU catches up";
  f.summary = fmt::format("{} synchronize with the GPU every step: {} costs {}/iter ({})",
                          RanksPhrase(f, total), fn, Ms(impact), Percent(f.impact_fraction));
  f.suggestion =
      "Remove .item(), .cpu(), .tolist(), print(tensor) and torch.cuda.synchronize() from "
      "the training step; accumulate metrics on the GPU and read them at logging intervals.";
  return Fired{std::move(f), impact};
}

// Pageable host-to-device copies are staged through a bounce buffer and block the host.
std::optional<Fired> PageableCopyRule(const RuleInput& in) {
  const size_t total = in.cj.ranks().size();
  RuleResult pageable = Measure(in, [](const CompactRank& r, RankValue* rv) {
    for (const auto& f : r.compact) {
      bool copy = f.fclass() == FunctionClass::kMemcpy || f.kind() == trace::EventKind::kMemcpy;
      if (!copy || !ContainsNoCase(f.name(), "pageable")) continue;
      rv->functions.push_back(&f);
      rv->value += f.per_iter_us;
    }
    rv->affected = rv->value > 0;
  });
  if (!Most(in, pageable)) return std::nullopt;
  double impact = Impact(pageable, false);
  if (!Reaches(in, impact)) return std::nullopt;
  Finding f = Make(in, pageable, Category::kMemcpy, Cause::kConfiguration, impact, 3);
  f.evidence_text["reasoning"] =
      "copies from pageable host memory go through a staging buffer at lower bandwidth and "
      "cannot overlap with compute";
  f.summary = fmt::format("{} copy from pageable host memory: {}/iter ({})", RanksPhrase(f, total),
                          Ms(impact), Percent(f.impact_fraction));
  f.suggestion =
      "Use pinned memory: DataLoader(pin_memory=True) and tensor.to(device, "
      "non_blocking=True); pin long-lived host buffers with tensor.pin_memory().";
  return Fired{std::move(f), impact};
}

// Launch-bound: many tiny kernels, each finished before the CPU has issued the next, so the
// GPU idles for the difference. The CPU cost of issuing one kernel is the measured launch call
// (cudaLaunchKernel's mean) plus the framework's dispatch of the op around it; the loss is
// that cost minus the kernel's own time, per tiny kernel, bounded by the GPU's idle time. This
// holds for a launch-bound phase (thousands of tiny kernels in an optimizer step or a metric
// loop) inside a step that is otherwise GPU-bound, not only for a whole step that is.
std::optional<Fired> LaunchBoundRule(const RuleInput& in) {
  const size_t total = in.cj.ranks().size();
  RuleResult launch = Measure(in, [](const CompactRank& r, RankValue* rv) {
    if (!r.has_gpu || r.gpu_idle_us <= 0) return;
    double launch_us = 0, launch_calls = 0;
    for (const auto& f : r.compact) {
      if (f.fclass() != FunctionClass::kLaunch || f.name().rfind("cudaLaunchKernel", 0) != 0)
        continue;
      launch_us += f.per_iter_us;
      launch_calls += f.calls_per_iter;
    }
    const double issue_us =
        (launch_calls > 0 ? launch_us / launch_calls : policy::kLaunchOverheadUs) +
        policy::kDispatchUs;
    double calls = 0, gap = 0;
    for (const auto& f : r.compact) {
      if (f.kind() != trace::EventKind::kKernel || f.fclass() == FunctionClass::kCollective)
        continue;
      if (f.mean_us >= policy::kTinyKernelUs) continue;
      calls += f.calls_per_iter;
      gap += f.calls_per_iter * std::max(0.0, issue_us - f.mean_us);
      rv->functions.push_back(&f);
    }
    if (calls < policy::kTinyKernelCalls) return;
    rv->value = std::min<double>(r.gpu_idle_us, gap);
    rv->affected = rv->value > 0;
  });
  if (!Most(in, launch)) return std::nullopt;
  double impact = Impact(launch, false);
  if (!Reaches(in, impact)) return std::nullopt;
  Finding f = Make(in, launch, Category::kLaunchBound, Cause::kSoftware, impact, 5);
  const RankValue& t = Typical(launch);
  double calls = 0;
  for (const auto* fp : t.functions) calls += fp->calls_per_iter;
  f.evidence["tiny_kernel_calls_per_iter"] = calls;
  f.evidence["gpu_busy_ms"] = UsToMs(t.r->gpu_busy_us);
  f.evidence["gpu_idle_ms"] = UsToMs(t.r->gpu_idle_us);
  f.evidence_text["uncertainty"] = fmt::format(
      "the CPU cost of issuing a kernel is the measured launch call plus an assumed {:.0f} us "
      "of op dispatch",
      policy::kDispatchUs);
  f.evidence_text["reasoning"] = fmt::format(
      "{:.0f} kernels per iteration run under {:.0f} us each, less than the CPU needs to "
      "issue the next one, so the GPU idles between them: launch overhead, not GPU work, "
      "sets the pace there",
      calls, policy::kTinyKernelUs);
  f.summary = fmt::format(
      "{} are launch-bound in places: {:.0f} tiny kernels/iter leave the GPU idle between "
      "launches; about {}/iter ({}) could be saved",
      RanksPhrase(f, total), calls, Ms(impact), Percent(f.impact_fraction));
  f.suggestion =
      "Fuse small operations: torch.compile, CUDA graphs (torch.cuda.graphs / "
      "mode=\"reduce-overhead\"), fused optimizers (foreach=True / fused=True), larger "
      "batches.";
  return Fired{std::move(f), impact};
}

// GPU idle behind CPU work not explained by the rules above.
std::optional<Fired> GpuIdleRule(const RuleInput& in, double explained_idle_us) {
  const size_t total = in.cj.ranks().size();
  RuleResult idle = Measure(in, [](const CompactRank& r, RankValue* rv) {
    if (!r.has_gpu) return;
    rv->value = r.cpu_critical_us > 0 ? r.cpu_critical_us : r.gpu_idle_us;
    bool has_self = r.has_self;
    bool any_main = r.any_main;
    for (const auto& f : r.compact) {
      if (trace::IsGpuKind(f.kind()) || (any_main && !f.main_thread)) continue;
      if (IsWaitClass(f.fclass()) || f.fclass() == FunctionClass::kAnnotation) continue;
      rv->functions.push_back(&f);
    }
    rv->by_self = true;
    rv->has_self = has_self;
    double it = IterationUs(r);
    rv->affected = it > 0 && rv->value > policy::kGpuIdleShare * it;
  });
  if (!Most(in, idle)) return std::nullopt;
  double impact = Impact(idle, true) - explained_idle_us;
  if (!Reaches(in, impact)) return std::nullopt;
  Finding f = Make(in, idle, Category::kGpuIdle, Cause::kSoftware, impact, 5);
  std::vector<std::string> names;
  for (const auto& fn : f.functions) names.push_back(fn.name);
  f.evidence_text["suspects"] = fmt::format("{}", fmt::join(names, ", "));
  f.evidence_text["reasoning"] =
      "the GPU sits idle while the CPU works: the step is bound by host-side code; the "
      "suspects are the main-thread functions with the most exclusive time";
  f.summary = fmt::format(
      "the GPU waits for the CPU on {}: {}/iter ({}) idle behind host "
      "work; top suspect {}",
      RanksPhrase(f, total), Ms(impact), Percent(f.impact_fraction),
      names.empty() ? "unknown" : names[0]);
  f.suggestion =
      "Move host work off the step (data preparation into DataLoader workers, logging at "
      "intervals), avoid Python loops over tensors, and overlap with "
      "non_blocking copies; torch.compile / CUDA graphs cut per-op overhead.";
  return Fired{std::move(f), impact};
}

// Large collectives far below the expected bus bandwidth, with little variation (a capped
// link rather than waiting, which fluctuates).
// The expected bandwidth is NVLink-scale: a group known to span hosts (its ranks, from the
// summary's process groups, live on several) runs at network speed and is not judged by it;
// slow cross-node links are found by comparing groups (topology.cc).
std::optional<Fired> LowBandwidthRule(const RuleInput& in) {
  const size_t total = in.cj.ranks().size();
  const DiagnoseOptions& o = in.o;
  std::map<int, const std::string*> host_of;
  for (const auto& r : in.cj.ranks()) host_of[r.rank] = &r.host;
  auto cross_node = [&](const CompactRank& r, const std::string& group) {
    if (group.empty()) return false;
    for (const trace::ProcessGroup* pg : r.groups) {
      if (pg->desc != group && pg->name != group) continue;
      const std::string* first = nullptr;
      for (int m : pg->ranks) {
        auto it = host_of.find(m);
        if (it == host_of.end() || it->second->empty()) continue;
        if (first && *first != *it->second) return true;
        first = it->second;
      }
    }
    return false;
  };
  RuleResult lowbw = Measure(in, [&](const CompactRank& r, RankValue* rv) {
    for (const auto& f : r.compact) {
      if (f.fclass() != FunctionClass::kCollective || !trace::IsGpuKind(f.kind())) continue;
      if (cross_node(r, in.cj.Group(f.group))) continue;
      const pattern::CompactCollective c = r.CollectiveOf(f);
      if (c.msg_bytes < policy::kLargeMessageBytes || c.busbw_gbps <= 0) continue;
      if (c.busbw_gbps >= policy::kFarBelow * o.expected_busbw_gbps || f.cv > policy::kFlatCv)
        continue;
      rv->functions.push_back(&f);
      rv->value += f.per_iter_us * (1.0 - c.busbw_gbps / o.expected_busbw_gbps);
    }
    rv->affected = !rv->functions.empty();
  });
  // Every rank must be low: a rank with normal bandwidth means the others were waiting.
  if (lowbw.affected != static_cast<int>(total)) return std::nullopt;
  double impact = Impact(lowbw, true);
  if (!Reaches(in, impact)) return std::nullopt;
  Finding f = Make(in, lowbw, Category::kLowBandwidth, Cause::kHardware, impact, 3);
  const RankValue& t = Typical(lowbw);
  const CompactFunction* top = t.functions.front();
  const pattern::CompactCollective top_coll = t.r->CollectiveOf(*top);
  f.evidence["busbw_gbps"] = top_coll.busbw_gbps;
  f.evidence["expected_busbw_gbps"] = o.expected_busbw_gbps;
  f.evidence["msg_bytes"] = top_coll.msg_bytes;
  f.evidence["cv"] = top->cv;
  f.evidence_text["uncertainty"] =
      "the expected bandwidth is an assumption (NVLink-scale single node); PCIe-only or "
      "cross-node jobs reach less";
  f.evidence_text["reasoning"] =
      "large messages move far below the expected bus bandwidth on every rank with little "
      "variation between calls: a capped or misconfigured link rather than waiting";
  f.summary = fmt::format(
      "collective bandwidth is low on {}: {} reaches {:.1f} GB/s bus bandwidth for {:.1f} MB "
      "messages (expected about {:.0f}); about {}/iter ({})",
      RanksPhrase(f, total), top->name(), top_coll.busbw_gbps, BytesToMB(top_coll.msg_bytes),
      o.expected_busbw_gbps, Ms(impact), Percent(f.impact_fraction));
  f.suggestion =
      "Check the interconnect: nvidia-smi topo -m and nvlink -s, NIC speed (ibstat), "
      "NCCL_DEBUG=INFO for the transport (P2P/SHM/NET); look for NCCL_P2P_DISABLE, "
      "NCCL_IB_DISABLE or a wrong NCCL_SOCKET_IFNAME.";
  return Fired{std::move(f), impact};
}

}  // namespace rules

void FindAllRankProblems(const pattern::CompactJob& cj, const JobInfo& job,
                         const DiagnoseOptions& o, std::vector<Finding>* out) {
  const rules::RuleInput in{cj, o, MsToUs(job.iteration_ms_median)};
  if (cj.ranks().empty() || in.iter_us <= 0) return;
  // The first rules explain part of the GPU idle time; the GPU-idle rule reports the rest.
  double explained_idle_us = 0;
  for (auto* rule :
       {rules::DataLoaderRule, rules::SyncRule, rules::PageableCopyRule, rules::LaunchBoundRule}) {
    if (std::optional<rules::Fired> fired = rule(in)) {
      explained_idle_us += fired->impact_us;
      out->push_back(std::move(fired->finding));
    }
  }
  if (std::optional<rules::Fired> fired = rules::GpuIdleRule(in, explained_idle_us))
    out->push_back(std::move(fired->finding));
  if (std::optional<rules::Fired> fired = rules::LowBandwidthRule(in))
    out->push_back(std::move(fired->finding));
}

}  // namespace perftracker::diagnose::internal
