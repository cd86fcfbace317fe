// Diagnosis of Megatron-layout jobs: peer groups by stage, node and switch folding, slow links
// localized from collective groups, two faults at once, and a scale benchmark run by hand.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "diagnose/diagnose.h"
#include "diagnose/testing.h"

namespace perftracker::diagnose {
namespace {

using testing::JobSpec;
using testing::MakeJob;

std::string Dump(const Diagnosis& d) {
  std::string s;
  for (const auto& f : d.findings)
    s += fmt::format("{} [{}] {} ms: {}\n", f.category, RankList(f.ranks), f.impact_ms, f.summary);
  return s;
}

std::vector<int> Range(int a, int b) {
  std::vector<int> v;
  for (int i = a; i < b; ++i) v.push_back(i);
  return v;
}

// The top finding is a hardware link problem of one node: all its RANKS, HOST, and LINK.
void ExpectNodeLink(const Diagnosis& d, const std::vector<int>& ranks, const std::string& host,
                    const std::string& link) {
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.category, Category::kCommunication) << Dump(d);
  EXPECT_EQ(f.cause, Cause::kHardware);
  EXPECT_EQ(f.ranks, ranks) << Dump(d);
  EXPECT_EQ(f.hosts, std::vector<std::string>{host});
  ASSERT_TRUE(f.evidence_text.count("link")) << Dump(d);
  EXPECT_EQ(f.evidence_text.at("link"), link);
}

TEST(TopologyTest, HealthyJobWithStagesIsClean) {
  // Stage 0 has the loader and embedding, stage 1 the loss: different roles, no findings.
  Diagnosis d = Diagnose(MakeJob({}));
  EXPECT_TRUE(d.findings.empty()) << Dump(d);
}

TEST(TopologyTest, StagesAreNeverPeersEvenWhenTheyLookAlike) {
  // Four stages; the middle two run identical function sets and differ only in pipeline
  // position. A slow GPU in stage 2 is compared with stage 2 alone and named.
  JobSpec s;
  s.pp = 4;
  s.slow_gpu = 21;
  Diagnosis d = Diagnose(MakeJob(s));
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].category, Category::kStraggler) << Dump(d);
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>{21}) << Dump(d);
  EXPECT_EQ(d.findings[0].cause, Cause::kHardware) << Dump(d);
}

TEST(TopologyTest, SlowGpuIsAStragglerNotALink) {
  JobSpec s;
  s.slow_gpu = 5;
  Diagnosis d = Diagnose(MakeJob(s));
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.category, Category::kStraggler) << Dump(d);
  EXPECT_EQ(f.cause, Cause::kHardware);
  EXPECT_EQ(f.ranks, std::vector<int>{5});
  for (const auto& g : d.findings) EXPECT_NE(g.category, Category::kCommunication) << Dump(d);
}

TEST(TopologyTest, SlowNvlinkIsTheNode) {
  // 4 nodes of 4 GPUs; node 1's TP groups (ranks 4-7) are slow.
  JobSpec s;
  s.gpus_per_node = 4;
  s.slow_nvlink = 1;
  Diagnosis d = Diagnose(MakeJob(s));
  ExpectNodeLink(d, Range(4, 8), "node-1", "nvlink");
  EXPECT_EQ(d.findings.size(), 1u) << Dump(d);
}

TEST(TopologyTest, SlowNicIsTheNode) {
  // Node 0 (ranks 0-3) is in both stage-0 DP groups (with node 1) and in PP groups with node 2:
  // only node 0 has every cross-node group slow.
  JobSpec s;
  s.gpus_per_node = 4;
  s.slow_nic = 0;
  Diagnosis d = Diagnose(MakeJob(s));
  ExpectNodeLink(d, Range(0, 4), "node-0", "nic");
  EXPECT_EQ(d.findings.size(), 1u) << Dump(d);
}

TEST(TopologyTest, SlowNicWhoseRanksArriveLastIsTheNode) {
  // Its groups wait for node 0's ranks, which look late but do no more own work.
  JobSpec s;
  s.gpus_per_node = 4;
  s.slow_nic = 0;
  s.nic_sender_late = true;
  Diagnosis d = Diagnose(MakeJob(s));
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.category, Category::kCommunication) << Dump(d);
  EXPECT_EQ(f.ranks, Range(0, 4)) << Dump(d);
  EXPECT_EQ(f.evidence_text.count("link") ? f.evidence_text.at("link") : "", "nic") << Dump(d);
  EXPECT_EQ(d.findings.size(), 1u) << Dump(d);
}

TEST(TopologyTest, GroupsSpanningEveryNodeAreNotLocalized) {
  // One pipeline stage, DP groups across all 8 nodes: a slow switch slows every group alike, so
  // nothing tells its nodes from the others, and no node or switch may be named.
  JobSpec s;
  s.gpus_per_node = 2;
  s.nodes_per_switch = 4;
  s.dp = 8;
  s.pp = 1;
  s.slow_switch = 1;
  Diagnosis d = Diagnose(MakeJob(s));
  for (const auto& f : d.findings) EXPECT_EQ(f.evidence_text.count("link"), 0u) << Dump(d);
}

TEST(TopologyTest, SlowSwitchIsAllItsNodes) {
  // 8 nodes of 2 GPUs, 2 nodes per switch; dp=4 groups span 2 switches, pp=2. Switch 0 is in
  // half of the DP and PP groups, so the median group is not healthy; the lower quartile is.
  JobSpec s;
  s.gpus_per_node = 2;
  s.nodes_per_switch = 2;
  s.slow_switch = 0;
  Diagnosis d = Diagnose(MakeJob(s));
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.category, Category::kCommunication) << Dump(d);
  EXPECT_EQ(f.ranks, Range(0, 4)) << Dump(d);
  EXPECT_EQ(f.hosts, (std::vector<std::string>{"node-0", "node-1"}));
  EXPECT_EQ(f.evidence_text.at("switch"), "switch-0");
}

// The only finding is a slow switch: SW, its HOSTS and their RANKS.
void ExpectOnlySwitch(const Diagnosis& d, const std::string& sw,
                      const std::vector<std::string>& hosts, const std::vector<int>& ranks) {
  ASSERT_EQ(d.findings.size(), 1u) << Dump(d);
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.category, Category::kCommunication) << Dump(d);
  EXPECT_EQ(f.ranks, ranks) << Dump(d);
  EXPECT_EQ(f.hosts, hosts) << Dump(d);
  ASSERT_TRUE(f.evidence_text.count("switch")) << Dump(d);
  EXPECT_EQ(f.evidence_text.at("switch"), sw);
  EXPECT_EQ(f.evidence_text.at("link"), "switch");
}

TEST(TopologyTest, SlowSwitchWhoseRanksArriveLateToDataParallelIsTheSwitch) {
  // tp=2, pp=3, dp=8 on 24 nodes of 2 GPUs (one TP group each), 2 nodes per switch. Switch 5
  // (nodes 10-11, ranks 20-23) sits in stage 1, whose every DP group it slows; its ranks'
  // PP transfers are slow too, so they arrive last to DP, where the others wait for them while
  // the PP groups wait for nobody. Every node of stage 1 has its DP groups slow; only the
  // switch's nodes have their PP groups slow as well.
  JobSpec s;
  s.pp = 3;
  s.dp = 8;
  s.gpus_per_node = 2;
  s.nodes_per_switch = 2;
  s.slow_switch = 5;
  s.staged_waits = true;
  Diagnosis d = Diagnose(MakeJob(s));
  ExpectOnlySwitch(d, "switch-5", {"node-10", "node-11"}, Range(20, 24));
}

// tp=2, pp=2, dp=6, ep=3 on 12 nodes of 2 GPUs, waits in the simulator's order (TP, PP, DP).
JobSpec ExpertParallelJob(int nodes_per_switch) {
  JobSpec s;
  s.pp = 2;
  s.dp = 6;
  s.ep = 3;
  s.gpus_per_node = 2;
  s.nodes_per_switch = nodes_per_switch;
  s.staged_waits = true;
  return s;
}

TEST(TopologyTest, SlowNicWithExpertParallelismIsTheNodeNotItsBlock) {
  // tp=2, pp=2, dp=6, ep=3 on 12 nodes of 2 GPUs: each EP group spans 3 consecutive nodes (0-2,
  // 3-5, 6-8, 9-11) and each DP group every node of its stage. Node 1's slow NIC slows every EP
  // group of nodes 0-2 and every DP group of stage 0, so nodes 0 and 2 have their EP and DP
  // groups slow too, and arrive late to their (healthy) PP groups; only node 1's PP groups are
  // slow. The switch (nodes 0-2) is not slow: its other nodes' groups without node 1 are fine.
  JobSpec s = ExpertParallelJob(3);
  s.slow_nic = 1;
  Diagnosis d = Diagnose(MakeJob(s));
  ExpectNodeLink(d, Range(2, 4), "node-1", "nic");
  EXPECT_EQ(d.findings.size(), 1u) << Dump(d);
}

TEST(TopologyTest, SlowSwitchWithExpertParallelismIsTheSwitchAlone) {
  // Same job, 2 nodes per switch: switch 1 (nodes 2-3) straddles EP blocks 0-2 and 3-5, so all
  // six nodes of stage 0 have slow EP and DP groups; nodes 2 and 3 also have slow PP groups, and
  // node 3's groups without node 2 (its PP and EP groups) are slow: the switch, and no NIC of
  // the blocks' other nodes.
  JobSpec s = ExpertParallelJob(2);
  s.slow_switch = 1;
  Diagnosis d = Diagnose(MakeJob(s));
  ExpectOnlySwitch(d, "switch-1", {"node-2", "node-3"}, Range(4, 8));
}

TEST(TopologyTest, SlowGpuAndSlowNicWithExpertParallelismAreBothNamed) {
  // The slow NIC of node 7 (stage 1, EP block 6-8) and a slow GPU on rank 9 (node 4, stage 0):
  // the straggler and the NIC, nothing else.
  JobSpec s = ExpertParallelJob(3);
  s.slow_nic = 7;
  s.slow_gpu = 9;
  Diagnosis d = Diagnose(MakeJob(s));
  ASSERT_EQ(d.findings.size(), 2u) << Dump(d);
  bool gpu = false, nic = false;
  for (const auto& f : d.findings) {
    gpu |= f.category == Category::kStraggler && f.ranks == std::vector<int>{9};
    nic |= f.category == Category::kCommunication && f.ranks == Range(14, 16) &&
           f.hosts == std::vector<std::string>{"node-7"} && f.evidence_text.count("link") &&
           f.evidence_text.at("link") == "nic";
  }
  EXPECT_TRUE(gpu) << Dump(d);
  EXPECT_TRUE(nic) << Dump(d);
}

TEST(TopologyTest, LoaderSlowOnEveryRankOfANodeIsOneNodeFinding) {
  // A slow loader on two stage-0 ranks of node 0: one node finding listing both.
  JobSpec s;
  s.gpus_per_node = 4;
  s.tp = 1;
  s.dp = 8;
  auto ranks = MakeJob(s);
  for (auto& r : ranks)
    if (r.host == "node-0")
      for (auto& f : r.functions)
        if (f.fclass == pattern::FunctionClass::kDataLoader)
          f.per_iter_us = f.self_per_iter_us = 30000;
  Diagnosis d = Diagnose(ranks);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].category, Category::kDataLoader) << Dump(d);
  EXPECT_EQ(d.findings[0].ranks, Range(0, 4)) << Dump(d);
  EXPECT_EQ(d.findings[0].hosts, std::vector<std::string>{"node-0"});
}

TEST(TopologyTest, TwoFaultsAreBothReported) {
  JobSpec s;
  s.gpus_per_node = 4;
  s.slow_gpu = 13;    // node 3
  s.slow_nvlink = 1;  // ranks 4-7
  Diagnosis d = Diagnose(MakeJob(s));
  bool gpu = false, link = false;
  for (const auto& f : d.findings) {
    gpu |= f.category == Category::kStraggler && f.ranks == std::vector<int>{13};
    link |= f.category == Category::kCommunication && f.ranks == Range(4, 8) &&
            f.evidence_text.count("link") && f.evidence_text.at("link") == "nvlink";
  }
  EXPECT_TRUE(gpu) << Dump(d);
  EXPECT_TRUE(link) << Dump(d);
  ASSERT_FALSE(d.findings.empty());
  // Ranked by what fixing each gives (diagnose/what_if.h), each pipeline stage replayed on its
  // own: in stage 1, ranks 8 and 10 reach their collectives as late as rank 13 does (their waits
  // as this job's model gives them: 15 ms each), so fixing rank 13 alone gives the job nothing,
  // and the slow links' 20 ms come first though the straggler's rule says 24.8.
  EXPECT_EQ(d.findings[0].category, Category::kCommunication) << Dump(d);
  for (const auto& f : d.findings) {
    if (f.category == Category::kStraggler) {
      EXPECT_EQ(f.what_if_ms, 0) << Dump(d);
    }
  }
}

TEST(TopologyTest, MissingRankIsNamed) {
  JobSpec s;
  s.missing = 9;
  Diagnosis d = Diagnose(MakeJob(s));
  bool found = false;
  for (const auto& f : d.findings)
    found |= f.category == Category::kMissingRank && f.ranks == std::vector<int>{9};
  EXPECT_TRUE(found) << Dump(d);
}

}  // namespace
}  // namespace perftracker::diagnose
