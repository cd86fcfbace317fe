// Unit tests of the simulator: layout math, process groups and topology, determinism per seed,
// what each fault changes (and on which ranks), and summaries round-tripping the real format.
#include <gtest/gtest.h>

#include <map>

#include "pattern/summary_io.h"
#include "sim/simulator.h"

namespace perftracker::sim {
namespace {

Config Make(int workers, const char* layout, std::vector<const char*> faults = {}) {
  Config c;
  c.workers = workers;
  c.layout = ParseLayout(layout, workers).value();
  c.iterations = 6;
  c.seed = 7;
  for (const char* f : faults) c.faults.push_back(ParseFault(f).value());
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).message();
  return c;
}

const pattern::FunctionPattern* Find(const pattern::RankSummary& s, std::string_view prefix) {
  for (const auto& f : s.functions) {
    if (f.name.substr(0, prefix.size()) == prefix) return &f;
  }
  return nullptr;
}

double PerIter(const pattern::RankSummary& s, std::string_view prefix) {
  const pattern::FunctionPattern* f = Find(s, prefix);
  return f ? f->per_iter_us : 0;
}

TEST(Layout, ParsesAndDefaultsDp) {
  auto l = ParseLayout("tp=2,pp=2", 16);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->dp, 4);
  EXPECT_EQ(l->ep, 1);
  auto e = ParseLayout("tp=2,pp=1,dp=8,ep=4", 16);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->ep, 4);
}

TEST(Layout, RejectsBadInput) {
  for (const char* bad : {"tp=2", "tp=3,pp=2", "tp=x,pp=1", "tp=2,pp=2,dp=3", "zz=1,tp=1,pp=1",
                          "tp=2,pp=1,ep=3", ""}) {
    auto l = ParseLayout(bad, 16);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().message().rfind("--layout: ", 0), 0u) << l.status().message();
  }
}

TEST(Fault, ParsesAndRejects) {
  auto f = ParseFault("slow-gpu@rank=5");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, FaultKind::kSlowGpu);
  EXPECT_EQ(f->index, 5);
  for (const char* bad : {"slow-gpu", "fast-gpu@rank=1", "slow-gpu@node=1", "slow-gpu@rank=-1",
                          "tiny-kernels@rank=2", "slow-switch@node=0", "slow-nic@moon=1"}) {
    auto b = ParseFault(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().message().rfind("--fault: ", 0), 0u) << b.status().message();
  }
  Config c = Make(16, "tp=2,pp=2");
  c.faults.push_back(ParseFault("slow-gpu@rank=16").value());
  EXPECT_FALSE(Validate(c).ok());
  c.faults = {ParseFault("slow-loader@rank=9").value()};  // stage 1: no data loader
  EXPECT_FALSE(Validate(c).ok());
}

TEST(Topology, MegatronRankOrderAndGroups) {
  Config c = Make(16, "tp=2,pp=2");
  Topology t(c);
  Coord k = t.CoordOf(13);  // pp=1, dp=2, tp=1
  EXPECT_EQ(k.pp, 1);
  EXPECT_EQ(k.dp, 2);
  EXPECT_EQ(k.tp, 1);
  EXPECT_EQ(t.RankOf(k), 13);
  EXPECT_EQ(t.TpGroup(13), (std::vector<int>{12, 13}));
  EXPECT_EQ(t.PpGroup(13), (std::vector<int>{5, 13}));
  EXPECT_EQ(t.DpGroup(13), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(t.Node(13), 1);
  auto g = t.Groups(13);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[2].name, "dp");
  EXPECT_EQ(g[2].desc, "dp:9");
  EXPECT_EQ(g[2].backend, "nccl");
  Config e = Make(16, "tp=2,pp=1,dp=8,ep=4");
  Topology te(e);
  EXPECT_EQ(te.EpGroup(11), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(te.Groups(11).back().name, "ep");
}

TEST(Simulator, SummaryShapeAndRoundTrip) {
  Simulator sim(Make(16, "tp=2,pp=2"));
  pattern::RankSummary s = sim.SimulateRank(13);
  EXPECT_EQ(s.rank, 13);
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.host, "node-1");
  EXPECT_EQ(s.network_switch, "switch-0");
  EXPECT_EQ(s.iteration_ms.size(), 6u);
  EXPECT_GE(s.functions.size(), 300u);
  EXPECT_LE(s.functions.size(), 600u);
  const auto* ar = Find(s, "ncclDevKernel_AllReduce");
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->coll.op, "all_reduce");
  EXPECT_EQ(ar->coll.group, "tp:12");
  EXPECT_EQ(ar->fclass, pattern::FunctionClass::kCollective);
  // Stage 0 has the data loader, the last stage the loss.
  EXPECT_EQ(Find(s, "enumerate(DataLoader)"), nullptr);
  EXPECT_NE(Find(sim.SimulateRank(1), "enumerate(DataLoader)"), nullptr);
  auto back = pattern::ParseSummary(pattern::SerializeSummary(s), "x");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->functions.size(), s.functions.size());
  EXPECT_EQ(back->network_switch, "switch-0");
  EXPECT_EQ(back->process_groups.size(), 3u);
}

TEST(Simulator, DeterministicPerSeed) {
  Config c = Make(16, "tp=2,pp=2", {"slow-gpu@rank=5"});
  Simulator a(c), b(c);
  EXPECT_EQ(pattern::SerializeSummary(a.SimulateRank(3)),
            pattern::SerializeSummary(b.SimulateRank(3)));
  c.seed = 8;
  Simulator d(c);
  EXPECT_NE(pattern::SerializeSummary(a.SimulateRank(3)),
            pattern::SerializeSummary(d.SimulateRank(3)));
}

TEST(Faults, SlowGpuIsAStragglerItsPeersWaitFor) {
  Simulator clean(Make(16, "tp=2,pp=2"));
  Simulator sim(Make(16, "tp=2,pp=2", {"slow-gpu@rank=5"}));
  const char* gemm = "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn";
  EXPECT_GT(PerIter(sim.SimulateRank(5), gemm), 1.3 * PerIter(clean.SimulateRank(5), gemm));
  EXPECT_LT(PerIter(sim.SimulateRank(7), gemm), 1.1 * PerIter(clean.SimulateRank(7), gemm));
  // Its TP peer waits in the TP all-reduce; the slow rank itself does not.
  const char* ar = "ncclDevKernel_AllReduce";
  EXPECT_GT(PerIter(sim.SimulateRank(4), ar), PerIter(sim.SimulateRank(5), ar) + 20000);
  // Everyone's iteration is longer (synchronous training).
  EXPECT_GT(sim.SimulateRank(0).MeanIterationMs(), clean.SimulateRank(0).MeanIterationMs() + 20);
}

TEST(Faults, SlowNvlinkSlowsTpCollectivesOfThatNode) {
  Simulator clean(Make(32, "tp=4,pp=2"));
  Simulator sim(Make(32, "tp=4,pp=2", {"slow-nvlink@node=1"}));
  const char* ar = "ncclDevKernel_AllReduce";
  for (int r : {8, 12, 15}) {
    EXPECT_GT(PerIter(sim.SimulateRank(r), ar), 2 * PerIter(clean.SimulateRank(r), ar)) << r;
  }
}

TEST(Faults, SlowNicSlowsCrossNodeGroupsWithAMemberThere) {
  Simulator clean(Make(32, "tp=8,pp=2"));
  Simulator sim(Make(32, "tp=8,pp=2", {"slow-nic@node=0"}));
  // Rank 3's DP group {3, 11} crosses nodes 0 and 1: its transfers slow on both ends.
  const char* rs = "ncclDevKernel_ReduceScatter";
  EXPECT_GT(PerIter(sim.SimulateRank(11), rs), 2 * PerIter(clean.SimulateRank(11), rs));
  EXPECT_GT(PerIter(sim.SimulateRank(3), rs), 2 * PerIter(clean.SimulateRank(3), rs));
}

TEST(Faults, LoaderGcContentionTinySync) {
  Simulator sim(Make(16, "tp=2,pp=2",
                     {"slow-loader@rank=1", "gc@rank=6", "cpu-contention@rank=2",
                      "tiny-kernels@all", "sync@all"}));
  Simulator clean(Make(16, "tp=2,pp=2"));
  const char* dl = "enumerate(DataLoader)";
  EXPECT_GT(PerIter(sim.SimulateRank(1), dl), PerIter(sim.SimulateRank(3), dl) + 50000);
  const auto* gc = Find(sim.SimulateRank(6), "<gc>");
  ASSERT_NE(gc, nullptr);
  EXPECT_EQ(gc->fclass, pattern::FunctionClass::kGc);
  EXPECT_EQ(Find(sim.SimulateRank(7), "<gc>"), nullptr);
  EXPECT_GT(PerIter(sim.SimulateRank(2), "aten::linear"),
            2 * PerIter(sim.SimulateRank(3), "aten::linear"));
  EXPECT_GT(sim.SimulateRank(2).gpu_idle_us, sim.SimulateRank(3).gpu_idle_us + 10000);
  for (int r : {0, 9}) {
    auto s = sim.SimulateRank(r);
    const auto* sync = Find(s, "cudaDeviceSynchronize");
    ASSERT_NE(sync, nullptr);
    EXPECT_EQ(sync->fclass, pattern::FunctionClass::kSync);
    EXPECT_GT(PerIter(s, "cudaLaunchKernel"), PerIter(clean.SimulateRank(r), "cudaLaunchKernel"));
    EXPECT_GT(s.gpu_idle_us, clean.SimulateRank(r).gpu_idle_us + 20000);
  }
}

// Kernel noise must not eat a rank's CPU-side stalls: with syncs (16 x 1.5 ms) and tiny kernels
// (3000 x 13 us launch gap) plus the 2 ms step overhead, every rank's GPU idles at least
// 65 ms, whatever its compute noise; the noise moves into its collective waits instead.
TEST(Faults, GpuIdleIsAtLeastTheRanksOwnStalls) {
  Simulator sim(Make(320, "tp=8,pp=5", {"tiny-kernels@all", "sync@all"}));
  for (int r = 0; r < 320; r += 3) {
    auto s = sim.SimulateRank(r);
    EXPECT_GE(s.gpu_idle_us, 16 * 1500 + 3000 * 13 + 2000 - 1) << "rank " << r;
    EXPECT_NEAR(s.gpu_busy_us + s.gpu_idle_us, s.window_ms * 1000 / 6, 0.02 * s.gpu_busy_us);
  }
}

TEST(Faults, HangWritesNothingAndTruthNamesIt) {
  Config c = Make(16, "tp=2,pp=2", {"hang@rank=3", "slow-nic@node=1"});
  Simulator sim(c);
  EXPECT_FALSE(sim.Writes(3));
  EXPECT_TRUE(sim.Writes(4));
  std::string truth = TruthJson(c);
  EXPECT_NE(truth.find("\"missing_rank\""), std::string::npos);
  EXPECT_NE(truth.find("\"node-1\""), std::string::npos);
  EXPECT_EQ(FaultRanks(c, c.faults[1]).size(), 8u);
  Config s = Make(64, "tp=2,pp=2", {"slow-switch@switch=1"});
  s.nodes_per_switch = 2;
  EXPECT_EQ(FaultRanks(s, s.faults[0]).front(), 16);
  EXPECT_EQ(FaultRanks(s, s.faults[0]).size(), 16u);
}

TEST(Simulator, TraceIsKinetoShaped) {
  Config c = Make(4, "tp=2,pp=1");
  c.iterations = 2;
  Simulator sim(c);
  std::string t = sim.TraceJson(1);
  for (const char* want :
       {"\"distributedInfo\"", "\"pg_config\"", "ProfilerStep#", "\"Collective name\"",
        "\"Process Group Ranks\"", "\"correlation\"", "cudaLaunchKernel", "python_function"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want;
  }
}

}  // namespace
}  // namespace perftracker::sim
