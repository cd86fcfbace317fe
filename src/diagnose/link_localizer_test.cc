// The steps of link localization, each on small hand-built inputs.
#include "diagnose/link_localizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "diagnose/rank_info.h"
#include "diagnose/testing.h"

namespace perftracker::diagnose::internal {
namespace {

using pattern::CompactRank;

// A collective of GROUP taking MS per iteration.
pattern::FunctionPattern Coll(const std::string& op, const std::string& group, double ms) {
  auto f = testing::Fn("ncclDevKernel_" + op, FunctionClass::kCollective, ms, 1,
                       trace::EventKind::kKernel);
  f.coll.op = op;
  f.coll.group = group;
  f.coll.msg_bytes = 1 << 20;
  return f;
}

// Four ranks on hosts "a" (0, 1) and "b" (2, 3): intra-node TP groups "tp:0" and "tp:2" and
// cross-node DP groups "dp:0" (0, 2) and "dp:1" (1, 3), 100 ms iterations.
pattern::CompactJob TwoNodeJob() {
  pattern::CompactJob cj;
  for (int r = 0; r < 4; ++r) {
    std::vector<pattern::FunctionPattern> fns = {
        testing::Fn("gemm", FunctionClass::kCompute, 80, 1, trace::EventKind::kKernel),
        Coll("all_reduce", "tp:" + std::to_string(r / 2 * 2), 5),
        Coll("reduce_scatter", "dp:" + std::to_string(r % 2), 8)};
    cj.Add(testing::Rank(r, 4, std::move(fns), 100, r < 2 ? "a" : "b"));
  }
  return cj;
}

// Ranks 0..N-1 on hosts "n-<rank>", under switches named by SWITCH_OF (none when empty).
std::vector<CompactRank> Ranks(int n, const std::vector<std::string>& switch_of = {}) {
  std::vector<CompactRank> ranks(n);
  for (int r = 0; r < n; ++r) {
    ranks[r].rank = r;
    ranks[r].host = "n-" + std::to_string(r);
    if (!switch_of.empty()) ranks[r].network_switch = switch_of[r];
  }
  return ranks;
}

TEST(HostMapTest, HostsNumberedByNameWithTheirRanksAndSwitches) {
  std::vector<CompactRank> ranks = Ranks(4, {"s1", "s1", "s0", ""});
  ranks[0].host = "z";
  ranks[3].host = "";  // unnamed: no host
  HostMap hosts(ranks);
  EXPECT_EQ(hosts.name, (std::vector<std::string>{"n-1", "n-2", "z"}));
  EXPECT_EQ(hosts.id.at("z"), 2);
  EXPECT_EQ(hosts.ranks_of_host.at("z"), std::vector<int>{0});
  EXPECT_EQ(hosts.switch_of.at("n-2"), "s0");
  EXPECT_EQ(hosts.hosts_of_switch.at("s1"), (std::set<std::string>{"n-1", "z"}));
  EXPECT_EQ(hosts.size(), 3u);
}

TEST(BuildInstancesTest, OneInstancePerGroupAndCollective) {
  pattern::CompactJob cj = TwoNodeJob();
  std::vector<GroupInstance> inst = BuildInstances(cj);
  ASSERT_EQ(inst.size(), 4u);  // the compute function has none
  // In order of first appearance: rank 0's groups, then rank 1's new one, then rank 2's.
  EXPECT_EQ(inst[0].group, "tp:0");
  EXPECT_EQ(inst[1].group, "dp:0");
  EXPECT_EQ(inst[2].group, "dp:1");
  EXPECT_EQ(inst[3].group, "tp:2");
  const GroupInstance& dp = inst[1];
  EXPECT_EQ(dp.kind, "dp");
  EXPECT_EQ(cj.function(dp.fn).name, "ncclDevKernel_reduce_scatter");
  EXPECT_DOUBLE_EQ(dp.msg_bytes, 1 << 20);
  ASSERT_EQ(dp.m.size(), 2u);
  EXPECT_EQ(dp.m[0].r->rank, 0);
  EXPECT_EQ(dp.m[1].r->rank, 2);
  EXPECT_DOUBLE_EQ(dp.m[1].us, 8000);
  EXPECT_EQ(dp.m[0].shape, dp.m[1].shape);
  EXPECT_EQ(dp.hosts, (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(inst[0].hosts, std::set<std::string>{"a"});
  EXPECT_EQ(inst[0].fn, inst[3].fn);  // the same collective, another instance
}

TEST(MeasureMembersTest, ExcessOverTheLowQuartileOfTheSameShape) {
  std::vector<CompactRank> ranks = Ranks(16);
  std::vector<GroupInstance> inst;
  // Four "dp" instances of function 7; the last one 20 ms slower on both members.
  for (int k = 0; k < 4; ++k) {
    GroupInstance x;
    x.kind = "dp";
    x.fn = 7;
    const double us = k == 3 ? 30000 : 10000;
    x.m = {{&ranks[2 * k], us, 1, -1}, {&ranks[2 * k + 1], us, 1, -1}};
    inst.push_back(x);
  }
  // A single-member instance is measured against nobody.
  GroupInstance lone;
  lone.kind = "dp";
  lone.fn = 8;
  lone.m = {{&ranks[8], 5000, 1, -1}};
  inst.push_back(lone);
  PeerSets peers = MeasureMembers(&inst);
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers.at({"dp", 7}), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(inst[0].m[0].ex, 0);
  EXPECT_DOUBLE_EQ(inst[3].m[1].ex, 20000);
  EXPECT_DOUBLE_EQ(inst[3].value, 20000);
  EXPECT_DOUBLE_EQ(inst[3].ref_us, 10000);
  EXPECT_DOUBLE_EQ(inst[4].value, 0);
}

TEST(MeasureMembersTest, MembersOfDifferentRolesCompareWithTheirOwnRole) {
  // Pipeline groups: stage 0 sends in 2 ms, stage 1 in 5 ms, in every instance. Measured across
  // roles, stage 1 would look 3 ms slow.
  std::vector<CompactRank> ranks = Ranks(6);
  std::vector<GroupInstance> inst;
  for (int k = 0; k < 3; ++k) {
    GroupInstance x;
    x.kind = "pp";
    x.fn = 9;
    x.m = {{&ranks[2 * k], 2000, 1, 0}, {&ranks[2 * k + 1], 5000, 1, 1}};
    inst.push_back(x);
  }
  MeasureMembers(&inst);
  for (const auto& x : inst) {
    EXPECT_DOUBLE_EQ(x.m[0].ex, 0);
    EXPECT_DOUBLE_EQ(x.m[1].ex, 0);
    EXPECT_EQ(x.m[1].shape, 1 * 131 + 1 + 1);
  }
}

// An instance of kind "dp", function 7, with VALUE and members (ranks R) of excesses EX.
GroupInstance Measured(const std::vector<CompactRank>& ranks, std::vector<int> r,
                       std::vector<double> ex, double value) {
  GroupInstance x;
  x.kind = "dp";
  x.fn = 7;
  x.ref_us = 10000;
  x.value = value;
  for (size_t j = 0; j < r.size(); ++j) {
    x.m.push_back({&ranks[r[j]], 10000 + ex[j], 1, -1});
    x.m.back().ex = ex[j];
  }
  return x;
}

TEST(JudgeInstancesTest, SlowTransfersAndLateMembers) {
  std::vector<CompactRank> ranks = Ranks(14);
  std::vector<GroupInstance> inst = {
      Measured(ranks, {0, 1}, {0, 0}, 0),
      Measured(ranks, {2, 3}, {0, 0}, 0),
      Measured(ranks, {4, 5}, {0, 0}, 0),
      // Both members 20 ms slower, the one that waited least included: a slow link.
      Measured(ranks, {6, 7}, {20000, 20000}, 20000),
      // Rank 8 waits 20 ms for rank 9, which took as long as elsewhere: rank 9 is late.
      Measured(ranks, {8, 9}, {20000, 0}, 10000),
      // Only two instances of their kind: not judged.
      Measured(ranks, {10, 11}, {30000, 30000}, 30000),
      Measured(ranks, {12, 13}, {0, 0}, 0),
  };
  inst[5].kind = inst[6].kind = "ep";
  PeerSets peers = {{{"dp", 7}, {0, 1, 2, 3, 4}}, {{"ep", 7}, {5, 6}}};
  CollectiveEvidence ev;
  JudgeInstances(peers, 100000, DiagnoseOptions{}, &inst, &ev);
  for (int k = 0; k < 5; ++k) EXPECT_TRUE(inst[k].counted) << k;
  EXPECT_FALSE(inst[5].counted);
  EXPECT_FALSE(inst[5].slow);
  EXPECT_FALSE(inst[0].slow);
  EXPECT_TRUE(inst[3].slow);
  EXPECT_DOUBLE_EQ(inst[3].excess, 20000);
  EXPECT_TRUE(inst[3].late.empty());
  EXPECT_FALSE(inst[4].slow);
  EXPECT_DOUBLE_EQ(inst[4].excess, 10000);
  ASSERT_EQ(inst[4].late.size(), 1u);
  EXPECT_EQ(inst[4].late[0]->rank, 9);
  EXPECT_EQ(ev.late, std::set<int>{9});
  EXPECT_EQ(ev.waiting, std::set<int>{8});
  EXPECT_EQ(ev.covered, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(JudgeInstancesTest, SmallExcessIsNoise) {
  // 0.3 ms is under the 1 ms threshold (1% of a 100 ms iteration).
  std::vector<CompactRank> ranks = Ranks(8);
  std::vector<GroupInstance> inst = {
      Measured(ranks, {0, 1}, {0, 0}, 0), Measured(ranks, {2, 3}, {0, 0}, 0),
      Measured(ranks, {4, 5}, {0, 0}, 0), Measured(ranks, {6, 7}, {300, 300}, 300)};
  CollectiveEvidence ev;
  JudgeInstances({{{"dp", 7}, {0, 1, 2, 3}}}, 100000, DiagnoseOptions{}, &inst, &ev);
  EXPECT_TRUE(inst[3].counted);
  EXPECT_FALSE(inst[3].slow);
  EXPECT_TRUE(inst[3].late.empty());
  EXPECT_TRUE(ev.late.empty());
}

// A judged instance on HOSTS.
GroupInstance Judged(std::set<std::string> hosts, bool slow, double excess = 0) {
  GroupInstance x;
  x.hosts = std::move(hosts);
  x.counted = true;
  x.slow = slow;
  x.excess = excess;
  return x;
}

TEST(FindSlowNvlinkTest, ANodeWithHalfItsIntraNodeGroupsSlow) {
  std::vector<GroupInstance> inst = {
      Judged({"a"}, true, 5000),      Judged({"a"}, true, 7000),  // a: 2 of 2 slow
      Judged({"b"}, false),           Judged({"b"}, false),       // b: healthy
      Judged({"c"}, true, 9000),      Judged({"c"}, false),      Judged({"c"}, false),  // c: 1 of 3
      Judged({"a", "b"}, true, 9000),  // cross-node
  };
  inst.push_back(Judged({"b"}, true, 9000));
  inst.back().counted = false;  // not judged: does not count
  NvlinkVerdict v = FindSlowNvlink(inst, 3);
  EXPECT_EQ(v.hosts, std::set<std::string>{"a"});
  EXPECT_EQ(v.named, std::vector<std::string>{"a"});
  EXPECT_EQ(v.intra.at("a").excess, (std::vector<double>{5000, 7000}));
  EXPECT_EQ(v.intra.at("b").total, 2);
  EXPECT_EQ(v.intra.at("b").slow, 0);
  EXPECT_EQ(v.intra.at("c").slow, 1);
}

TEST(FindSlowNvlinkTest, EveryHostAtOnceIsNotNamed) {
  std::vector<GroupInstance> inst = {Judged({"a"}, true, 5000), Judged({"b"}, true, 5000)};
  NvlinkVerdict v = FindSlowNvlink(inst, 2);
  EXPECT_EQ(v.hosts, (std::set<std::string>{"a", "b"}));  // still NVLink's lateness
  EXPECT_TRUE(v.named.empty());
}

TEST(FindNicSuspectsTest, SlowTransfersSuspectEveryHostLateMembersTheirOwn) {
  std::vector<CompactRank> ranks = Ranks(5);
  ranks[1].host = "n-0";  // hosts n-0 (ranks 0, 1), n-2, n-3, n-4: ids 0..3
  HostMap hosts(ranks);
  auto cross = [&](std::vector<int> members, bool slow, std::vector<int> late) {
    GroupInstance x = Judged({}, slow);
    for (int r : members) {
      x.m.push_back({&ranks[r], 0, 1, -1});
      x.hosts.insert(ranks[r].host);
    }
    for (int r : late) x.late.push_back(&ranks[r]);
    return x;
  };
  std::vector<GroupInstance> inst = {
      cross({2, 0}, true, {}),    // 0: slow transfers: both hosts
      cross({1, 3}, false, {3}),  // 1: rank 3 late: its host
      cross({0, 4}, false, {0}),  // 2: rank 0 late, but slowed in group 0: nobody
      cross({1, 4}, false, {4}),  // 3: rank 4 late for a reason of its own
      cross({2, 3}, false, {2}),  // 4: rank 2 late, but waiting elsewhere
      cross({0, 1}, true, {}),    // intra-node: not cross-node
  };
  inst.push_back(cross({3, 4}, true, {}));
  inst.back().counted = false;  // not judged
  std::vector<CrossInstance> c = FindNicSuspects(inst, hosts, {}, {4}, {2});
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].k, 0u);
  EXPECT_EQ(c[0].hosts, (std::vector<int>{0, 1}));
  EXPECT_EQ(c[0].suspects, (std::vector<int>{0, 1}));
  EXPECT_EQ(c[1].suspects, std::vector<int>{2});
  EXPECT_TRUE(c[2].suspects.empty());
  EXPECT_TRUE(c[3].suspects.empty());
  EXPECT_TRUE(c[4].suspects.empty());
  // A late rank on a node with slow NVLink is late because of it.
  c = FindNicSuspects(inst, hosts, {"n-3"}, {4}, {2});
  EXPECT_TRUE(c[1].suspects.empty());
}

TEST(CrossGroupsTest, ShareSuspectAndExplain) {
  CrossGroups g({{10, {0, 1}, {0, 1}}, {11, {0, 2}, {0}}, {12, {1, 2}, {}}}, 3);
  EXPECT_EQ(g.open(0), 2);
  EXPECT_DOUBLE_EQ(g.Share(0), 1);
  EXPECT_DOUBLE_EQ(g.Share(1), 0.5);
  EXPECT_TRUE(g.Suspect(0));
  EXPECT_FALSE(g.Suspect(1));  // half its groups: not the 80% a slow NIC makes
  EXPECT_FALSE(g.Suspect(2));
  EXPECT_EQ(g.of_host(2), (std::vector<int>{1, 2}));
  std::vector<size_t> explained;
  g.Explain(0, &explained);
  EXPECT_EQ(explained, (std::vector<size_t>{10, 11}));
  EXPECT_EQ(g.open(0), 0);
  EXPECT_EQ(g.open(1), 1);
  EXPECT_EQ(g.bad(1), 0);
  EXPECT_TRUE(g.cross()[0].explained);
  g.Explain(0, &explained);  // once only
  EXPECT_EQ(explained.size(), 2u);
}

TEST(ExplainAwayTest, TheNodeWhosePartnersAreHealthyElsewhere) {
  // n-0 is in three slow groups, each of its partners in one slow group (with n-0) and two
  // healthy ones: n-0's NIC, and naming it explains every slow group.
  HostMap hosts(Ranks(4));
  CrossGroups g({{0, {0, 1}, {0, 1}},
                 {1, {0, 2}, {0, 2}},
                 {2, {1, 2}, {}},
                 {3, {1, 3}, {}},
                 {4, {2, 3}, {}},
                 {5, {0, 3}, {0, 3}}},
                4);
  std::vector<NamedLink> named = ExplainAway(hosts, &g);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].hosts, std::vector<std::string>{"n-0"});
  EXPECT_TRUE(named[0].sw.empty());
  EXPECT_EQ(named[0].instances, (std::vector<size_t>{0, 1, 5}));
}

TEST(ExplainAwayTest, EveryHostSuspectIsNoLocalization) {
  HostMap hosts(Ranks(3));
  CrossGroups g({{0, {0, 1}, {0, 1}}, {1, {1, 2}, {1, 2}}, {2, {0, 2}, {0, 2}}}, 3);
  EXPECT_TRUE(ExplainAway(hosts, &g).empty());
}

TEST(ExplainAwayTest, TheSwitchWhenItsOtherNodeIsSlowWithoutTheFirst) {
  // Switch s0 holds n-0 and n-1; n-1's groups without n-0 are slow too.
  HostMap hosts(Ranks(4, {"s0", "s0", "s1", "s1"}));
  CrossGroups g({{0, {0, 2}, {0, 2}},
                 {1, {1, 3}, {1, 3}},
                 {2, {0, 3}, {0, 3}},
                 {3, {1, 2}, {1, 2}},
                 {4, {2, 3}, {}}},
                4);
  std::vector<NamedLink> named = ExplainAway(hosts, &g);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].sw, "s0");
  EXPECT_EQ(named[0].hosts, (std::vector<std::string>{"n-0", "n-1"}));
  EXPECT_EQ(named[0].instances, (std::vector<size_t>{0, 2, 1, 3}));
}

TEST(ExplainAwayTest, TheNodeWhenItsSwitchPartnerIsHealthy) {
  HostMap hosts(Ranks(4, {"s0", "s0", "s1", "s1"}));
  CrossGroups g(
      {{0, {0, 2}, {0, 2}}, {1, {0, 3}, {0, 3}}, {2, {1, 2}, {}}, {3, {1, 3}, {}}, {4, {2, 3}, {}}},
      4);
  std::vector<NamedLink> named = ExplainAway(hosts, &g);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_TRUE(named[0].sw.empty());
  EXPECT_EQ(named[0].hosts, std::vector<std::string>{"n-0"});
  EXPECT_EQ(named[0].instances, (std::vector<size_t>{0, 1}));
}

TEST(FoldSwitchesTest, EveryNodeOfASwitchNamedAloneIsTheSwitch) {
  HostMap hosts(Ranks(4, {"s0", "s0", "s1", "s1"}));
  std::vector<NamedLink> named = {{{"n-1"}, "", {5}}, {{"n-2"}, "", {6}}, {{"n-0"}, "", {7}}};
  FoldSwitches(hosts, &named);
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].hosts, (std::vector<std::string>{"n-0", "n-1"}));
  EXPECT_EQ(named[0].sw, "s0");
  EXPECT_EQ(named[0].instances, (std::vector<size_t>{5, 7}));
  EXPECT_EQ(named[1].hosts, std::vector<std::string>{"n-2"});  // half of s1: stays a node
  EXPECT_TRUE(named[1].sw.empty());
}

TEST(FoldSwitchesTest, OneSwitchIsNotFolded) {
  // With every node under one switch, the switch would be the whole job.
  HostMap hosts(Ranks(2, {"s0", "s0"}));
  std::vector<NamedLink> named = {{{"n-0"}, "", {1}}, {{"n-1"}, "", {2}}};
  FoldSwitches(hosts, &named);
  EXPECT_EQ(named.size(), 2u);
}

TEST(LinkFindingWriterTest, NvlinkFinding) {
  pattern::CompactJob cj = TwoNodeJob();
  std::vector<GroupInstance> inst = BuildInstances(cj);
  HostMap hosts(cj.ranks());
  inst[0].slow = true;  // tp:0, on host a
  inst[0].excess = 4000;
  std::map<std::string, IntraCount> intra = {{"a", {1, 1, {4000}}}, {"b", {0, 1, {}}}};
  CollectiveEvidence ev;
  LinkFindingWriter w(cj, inst, hosts, intra, {}, 100000, &ev);
  Finding f = w.Emit({"a"}, "nvlink", "", {});
  EXPECT_EQ(f.category, Category::kCommunication);
  EXPECT_EQ(f.cause, Cause::kHardware);
  EXPECT_EQ(f.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(f.hosts, std::vector<std::string>{"a"});
  EXPECT_DOUBLE_EQ(f.impact_ms, 4);
  EXPECT_DOUBLE_EQ(f.impact_fraction, 0.04);
  EXPECT_EQ(f.evidence.at("groups_slow"), 1);
  EXPECT_EQ(f.evidence.at("groups_total"), 1);
  EXPECT_EQ(f.evidence_text.at("link"), "nvlink");
  ASSERT_EQ(f.functions.size(), 1u);
  EXPECT_EQ(f.functions[0].name, "ncclDevKernel_all_reduce");
  EXPECT_EQ(f.summary.rfind("node a's NVLink is slow: its intra-node collectives take 4.0 ms", 0),
            0u)
      << f.summary;
  EXPECT_EQ(ev.explained, (std::set<int>{0, 1}));
}

TEST(LinkFindingWriterTest, NicFindingExplainsTheGroupsWaitingForItsRanks) {
  pattern::CompactJob cj = TwoNodeJob();
  std::vector<GroupInstance> inst = BuildInstances(cj);
  HostMap hosts(cj.ranks());
  GroupInstance& dp0 = inst[1];  // ranks 0 and 2, waiting for rank 2 (host b)
  ASSERT_EQ(dp0.group, "dp:0");
  dp0.late = {dp0.m[1].r};
  dp0.excess = 6000;
  std::vector<CrossInstance> cross = {{1, {0, 1}, {1}}, {2, {0, 1}, {}}};
  CollectiveEvidence ev;
  ev.late = {2};
  LinkFindingWriter w(cj, inst, hosts, {}, cross, 100000, &ev);
  Finding f = w.Emit({"b"}, "nic", "", {1});
  EXPECT_EQ(f.ranks, (std::vector<int>{2, 3}));
  EXPECT_DOUBLE_EQ(f.impact_ms, 6);
  EXPECT_EQ(f.evidence.at("groups_slow"), 1);
  EXPECT_EQ(f.evidence.at("groups_total"), 2);
  EXPECT_EQ(f.evidence_text.at("link"), "nic");
  EXPECT_EQ(f.evidence_text.count("switch"), 0u);
  ASSERT_EQ(f.functions.size(), 1u);
  EXPECT_EQ(f.functions[0].name, "ncclDevKernel_reduce_scatter");
  EXPECT_EQ(f.summary.rfind("node b's NIC is slow", 0), 0u) << f.summary;
  EXPECT_EQ(f.suggestion.rfind("Check b's NIC and cable", 0), 0u) << f.suggestion;
  EXPECT_EQ(ev.explained, (std::set<int>{0, 2, 3}));  // b's ranks and dp:0's members
  EXPECT_TRUE(ev.late.empty());                       // rank 2's lateness is the NIC's
}

TEST(LinkFindingWriterTest, SwitchFindingNamesTheSwitch) {
  pattern::CompactJob cj = TwoNodeJob();
  std::vector<GroupInstance> inst = BuildInstances(cj);
  HostMap hosts(cj.ranks());
  inst[1].slow = true;
  inst[1].excess = 3000;
  std::vector<CrossInstance> cross = {{1, {0, 1}, {0, 1}}, {2, {0, 1}, {}}};
  CollectiveEvidence ev;
  LinkFindingWriter w(cj, inst, hosts, {}, cross, 100000, &ev);
  Finding f = w.Emit({"a", "b"}, "switch", "s0", {1});
  EXPECT_EQ(f.ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(f.evidence_text.at("switch"), "s0");
  EXPECT_EQ(f.evidence_text.at("link"), "switch");
  EXPECT_EQ(f.summary.rfind("switch s0 (a, b)'s network is slow", 0), 0u) << f.summary;
  EXPECT_EQ(f.suggestion.rfind("Check switch s0:", 0), 0u) << f.suggestion;
}

// LinkLocalizer on a simulated job: RUN's findings and evidence.
std::vector<Finding> Localize(const std::vector<pattern::RankSummary>& job,
                              CollectiveEvidence* ev) {
  pattern::CompactJob cj;
  for (const auto& r : job) cj.Add(r);
  cj.SortByRank();
  JobInfo info = BuildJobInfo(Pointers(cj.ranks()));
  std::vector<Finding> out;
  LinkLocalizer(cj, info, DiagnoseOptions{}, {}, ev).Run(&out);
  return out;
}

TEST(LinkLocalizerTest, RunsTheStepsInOrder) {
  testing::JobSpec s;
  s.gpus_per_node = 4;
  s.slow_nic = 0;
  CollectiveEvidence ev;
  std::vector<Finding> out = Localize(testing::MakeJob(s), &ev);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].evidence_text.at("link"), "nic");
  EXPECT_EQ(out[0].hosts, std::vector<std::string>{"node-0"});
  EXPECT_EQ(out[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ev.covered.size(), 16u);
}

TEST(LinkLocalizerTest, OneHostIsNothingToLocalize) {
  testing::JobSpec s;
  s.gpus_per_node = 16;  // every rank on node-0
  s.slow_nvlink = 0;
  CollectiveEvidence ev;
  EXPECT_TRUE(Localize(testing::MakeJob(s), &ev).empty());
  EXPECT_TRUE(ev.covered.empty());
}

}  // namespace
}  // namespace perftracker::diagnose::internal
