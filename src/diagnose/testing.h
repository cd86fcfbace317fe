// Builders for synthetic behaviour patterns, shared by the diagnose and report tests.
#ifndef PERFTRACKER_DIAGNOSE_TESTING_H_
#define PERFTRACKER_DIAGNOSE_TESTING_H_

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "pattern/pattern.h"

namespace perftracker::diagnose::testing {

// A file of the source tree, whole ("" when absent): the docs the tables are checked against.
inline std::string SourceFile(const std::string& relative) {
  std::string path = PT_SOURCE_DIR;
  path += '/';
  path += relative;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline pattern::FunctionPattern Fn(const std::string& name, pattern::FunctionClass c,
                                   double per_iter_ms, double calls = 1,
                                   trace::EventKind kind = trace::EventKind::kCpuOp,
                                   const std::string& stack = "") {
  pattern::FunctionPattern f;
  f.name = name;
  f.kind = kind;
  f.fclass = c;
  f.stack = stack;
  f.main_thread = true;
  f.top_level = true;
  f.per_iter_us = per_iter_ms * 1000.0;
  f.self_per_iter_us = f.per_iter_us;
  f.calls_per_iter = calls;
  f.count = static_cast<uint64_t>(calls * 20);
  f.mean_us = calls > 0 ? f.per_iter_us / calls : 0;
  f.p50_us = f.mean_us;
  return f;
}

inline pattern::RankSummary Rank(int rank, int world, std::vector<pattern::FunctionPattern> fns,
                                 double iteration_ms, const std::string& host = "node0",
                                 int iterations = 20) {
  pattern::RankSummary r;
  r.rank = rank;
  r.world_size = world;
  r.host = host;
  r.source = "rank-" + std::to_string(rank) + ".json";
  r.iteration_source = "ProfilerStep";
  r.iteration_ms.assign(iterations, iteration_ms);
  r.window_ms = iteration_ms * iterations;
  for (auto& f : fns) f.share = iteration_ms > 0 ? f.per_iter_us / (iteration_ms * 1000) : 0;
  r.functions = std::move(fns);
  return r;
}

// A Megatron-style job (rank = pp_idx*(dp*tp) + dp_idx*tp + tp_idx, node = rank / gpus_per_node,
// host "node-<n>", switch "switch-<node / nodes_per_switch>"; with ep > 1, expert-parallel groups
// of ep consecutive dp indices) with the faults the simulator injects, modelled as the contract
// says: a collective's time is the rank's own transfer plus the wait for the group's slowest
// arrival.
struct JobSpec {
  int tp = 2, pp = 2, dp = 4;
  int ep = 1;
  int gpus_per_node = 8;
  int nodes_per_switch = 0;  // 0: no switch names
  int functions = 12;        // compute functions per rank (besides the stage's own)
  int slow_gpu = -1;         // rank whose compute is 40% slower
  int slow_loader = -1;      // rank whose data loader is slow
  int slow_nvlink = -1;      // node whose TP collectives are slow
  int slow_nic = -1;         // node whose cross-node collectives are slow
  int slow_switch = -1;      // switch whose nodes' cross-node collectives are slow
  // The slow NIC's own ranks finish their sends last and wait least (C4's late, slow hop):
  // their cross-node collectives grow by a third of what their peers' grow.
  bool nic_sender_late = false;
  // Waits as the simulator attributes them: every rank is delayed by its own extra work (its
  // slow compute and each of its slowed transfers); its TP group waits for the latest member,
  // its PP group for the latest TP group along the pipeline, DP for the rest up to the job's
  // slowest rank; EP waits for nobody. So a rank whose DP/EP transfers a slow link lengthens
  // arrives late to its (healthy) PP groups.
  bool staged_waits = false;
  int missing = -1;  // rank left out
};

inline std::vector<pattern::RankSummary> MakeJob(const JobSpec& s) {
  using pattern::FunctionClass;
  const int world = s.tp * s.pp * s.dp;
  auto node = [&](int r) { return r / s.gpus_per_node; };
  auto sw = [&](int r) { return s.nodes_per_switch > 0 ? node(r) / s.nodes_per_switch : -1; };
  auto stage = [&](int r) { return r / (s.dp * s.tp); };
  auto dpi = [&](int r) { return (r / s.tp) % s.dp; };
  auto tpi = [&](int r) { return r % s.tp; };
  auto rank_of = [&](int p, int d, int t) { return p * s.dp * s.tp + d * s.tp + t; };
  // Members of each group kind for rank r.
  auto members = [&](const std::string& kind, int r) {
    std::vector<int> m;
    if (kind == "tp")
      for (int t = 0; t < s.tp; ++t) m.push_back(rank_of(stage(r), dpi(r), t));
    if (kind == "dp")
      for (int d = 0; d < s.dp; ++d) m.push_back(rank_of(stage(r), d, tpi(r)));
    if (kind == "pp")
      for (int p = 0; p < s.pp; ++p) m.push_back(rank_of(p, dpi(r), tpi(r)));
    if (kind == "ep" && s.ep > 1)
      for (int d = dpi(r) / s.ep * s.ep; d < (dpi(r) / s.ep + 1) * s.ep; ++d)
        m.push_back(rank_of(stage(r), d, tpi(r)));
    return m;
  };
  const double compute_ms = 60, slow_extra = 24, link_extra = 20;
  std::vector<std::pair<std::string, std::string>> colls = {
      {"tp", "all_reduce"}, {"pp", "send_recv"}, {"dp", "reduce_scatter"}};
  if (s.ep > 1) colls.push_back({"ep", "all_to_all"});
  const std::map<std::string, double> base = {{"tp", 5}, {"pp", 2}, {"dp", 8}, {"ep", 3}};
  auto crosses_link = [&](const std::string& kind, const std::vector<int>& m) {
    for (int r : m) {
      if (kind == "tp" && node(r) == s.slow_nvlink) return true;
      if (kind != "tp" && node(r) == s.slow_nic) return true;
      if (kind != "tp" && s.slow_switch >= 0 && sw(r) == s.slow_switch) return true;
    }
    return false;
  };
  // staged_waits: each rank's delay, then the latest arrival it has seen after its TP and its
  // PP groups synchronize (d1, d2), and the job's slowest rank.
  std::vector<double> delay(world, 0), d1(world, 0), d2(world, 0);
  double slowest = 0;
  if (s.staged_waits) {
    for (int r = 0; r < world; ++r) {
      delay[r] = r == s.slow_gpu ? slow_extra : 0;
      for (const auto& [kind, op] : colls) {
        std::vector<int> m = members(kind, r);
        if (m.size() >= 2 && crosses_link(kind, m)) delay[r] += link_extra;
      }
      slowest = std::max(slowest, delay[r]);
    }
    for (int r = 0; r < world; ++r)
      for (int x : members("tp", r)) d1[r] = std::max(d1[r], delay[x]);
    for (int r = 0; r < world; ++r)
      for (int x : members("pp", r)) d2[r] = std::max(d2[r], d1[x]);
  }
  std::vector<pattern::RankSummary> out;
  for (int r = 0; r < world; ++r) {
    if (r == s.missing) continue;
    std::vector<pattern::FunctionPattern> fns;
    double k = r == s.slow_gpu ? 1.4 : 1.0;
    int n = std::max(s.functions, 1);
    for (int i = 0; i < n; ++i)
      fns.push_back(Fn("layer_op_" + std::to_string(i), FunctionClass::kCompute, k * compute_ms / n,
                       2, trace::EventKind::kKernel));
    if (stage(r) == 0) {
      fns.push_back(Fn("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                       FunctionClass::kDataLoader, r == s.slow_loader ? 30 : 0.5, 1,
                       trace::EventKind::kUserAnnotation));
      fns.push_back(
          Fn("embedding_fwd", FunctionClass::kCompute, k * 3, 1, trace::EventKind::kKernel));
    }
    if (stage(r) == s.pp - 1)
      fns.push_back(
          Fn("cross_entropy_loss", FunctionClass::kCompute, k * 2, 1, trace::EventKind::kKernel));
    double total = 0;
    for (const auto& f : fns) total += f.per_iter_us / 1000;
    for (const auto& [kind, op] : colls) {
      std::vector<int> m = members(kind, r);
      if (m.size() < 2) continue;
      double t = base.at(kind);
      if (crosses_link(kind, m))
        t += s.nic_sender_late && node(r) == s.slow_nic ? link_extra / 3 : link_extra;
      // Waiting for the latest member: the slow GPU, or a rank held up by its node's slow
      // NVLink (in the cross-node collectives that follow).
      auto late = [&](int x) {
        double l = x == s.slow_gpu ? slow_extra : 0;
        if (kind != "tp" && node(x) == s.slow_nvlink) l = std::max(l, link_extra);
        return l;
      };
      double latest = 0;
      for (int x : m) latest = std::max(latest, late(x));
      if (!s.staged_waits) {
        t += latest - late(r);
      } else if (kind == "tp") {
        t += d1[r] - delay[r];
      } else if (kind == "pp") {
        t += d2[r] - d1[r];
      } else if (kind == "dp") {
        t += slowest - d2[r];
      }
      auto f =
          Fn("ncclDevKernel_" + op, FunctionClass::kCollective, t, 1, trace::EventKind::kKernel);
      f.coll.op = op;
      f.coll.group = kind + ":" + std::to_string(m[0]);
      f.coll.group_size = static_cast<int>(m.size());
      f.coll.msg_bytes = 1 << 30;
      f.coll.busbw_gbps = f.coll.msg_bytes / (t * 1e6);
      fns.push_back(f);
      total += t;
    }
    auto rs = Rank(r, world, std::move(fns), total, "node-" + std::to_string(node(r)));
    if (sw(r) >= 0) rs.network_switch = "switch-" + std::to_string(sw(r));
    rs.has_gpu = true;
    for (const auto& [kind, op] : colls) {
      trace::ProcessGroup pg;
      pg.ranks = members(kind, r);
      pg.name = kind;
      pg.desc = kind + ":" + std::to_string(pg.ranks[0]);
      pg.backend = "nccl";
      pg.size = static_cast<int>(pg.ranks.size());
      rs.process_groups.push_back(pg);
    }
    out.push_back(std::move(rs));
  }
  return out;
}

}  // namespace perftracker::diagnose::testing

// The names the diagnosis tests write unqualified, declared once for all of them.
namespace perftracker::diagnose {
using pattern::FunctionClass;
using pattern::FunctionPattern;
using pattern::RankSummary;
using testing::Fn;
using testing::Rank;
}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_TESTING_H_
