// Unit tests of the simulator's timing model: transfer times over NVLink and the NIC, fault
// multipliers and periods, and the synchronous iteration every rank shares.
#include "sim/timing.h"

#include <gtest/gtest.h>

#include <string_view>

#include "pattern/names.h"

namespace perftracker::sim {
namespace {

Config Job(int workers, Layout layout, std::vector<const char*> faults = {}) {
  Config c;
  c.workers = workers;
  c.layout = layout;
  c.iterations = 4;
  c.layers = 2;
  c.seed = 3;
  for (const char* f : faults) c.faults.push_back(ParseFault(f).value());
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).message();
  return c;
}

const Spec& Find(const TimingModel& m, int stage, std::string_view prefix) {
  for (const Spec& s : m.Stage(stage)) {
    if (s.raw.substr(0, prefix.size()) == prefix) return s;
  }
  ADD_FAILURE() << prefix;
  return m.Stage(stage).front();
}

TEST(SplitMix, IsSplitMix64) {
  // The first output of SplitMix64 seeded with 0.
  EXPECT_EQ(SplitMix(0), 0xe220a8397b1dcdafULL);
  EXPECT_NE(SplitMix(1), SplitMix(2));
}

TEST(CollectiveGroupSize, GroupsAndPairs) {
  Layout l{.tp = 8, .pp = 4, .dp = 16, .ep = 4};
  EXPECT_EQ(CollectiveGroupSize(l, Role::kCollTp), 8);
  EXPECT_EQ(CollectiveGroupSize(l, Role::kCollPp), 2);
  EXPECT_EQ(CollectiveGroupSize(l, Role::kCollDp), 16);
  EXPECT_EQ(CollectiveGroupSize(l, Role::kCollEp), 4);
  EXPECT_EQ(CollectiveGroupSize(l, Role::kComputeKernel), 0);
}

// The factor the transfer times use: nccl-tests' for the simulator's ops and group sizes.
TEST(BusFactor, NcclTestsFactorsForTheSimulatorsOps) {
  for (int n = 2; n <= 64; ++n) {
    EXPECT_DOUBLE_EQ(pattern::BusFactor("all_reduce", n), 2.0 * (n - 1) / n);
    EXPECT_DOUBLE_EQ(pattern::BusFactor("send_recv", n), 1);
    for (const char* op : {"reduce_scatter", "all_gather", "all_to_all"}) {
      EXPECT_DOUBLE_EQ(pattern::BusFactor(op, n), double(n - 1) / n) << op;
    }
  }
}

TEST(TransferUs, NvlinkInsideANodeNicAcross) {
  Config c = Job(16, {.tp = 8, .pp = 1, .dp = 2});
  Topology topo(c);
  TimingModel m(c, topo);
  // The TP group (8 ranks) is one node: all-reduce over NVLink.
  const Spec& ar = Find(m, 0, "ncclDevKernel_AllReduce");
  EXPECT_DOUBLE_EQ(m.TransferUs(3, ar, true), kTpMsgBytes * 2 * 7 / 8 / (kNvlinkGBps * 1e3));
  // The DP group {3, 11} spans nodes 0 and 1: reduce-scatter over the NIC.
  const Spec& rs = Find(m, 0, "ncclDevKernel_ReduceScatter");
  EXPECT_DOUBLE_EQ(m.TransferUs(3, rs, true), kDpMsgBytes * 0.5 / (kNicGBps * 1e3));
  const Spec& gemm = Find(m, 0, "ampere_");
  EXPECT_EQ(m.TransferUs(3, gemm, true), 0);
}

TEST(TransferUs, SlowLinksOnlyWhereTheyAre) {
  Config c = Job(16, {.tp = 8, .pp = 1, .dp = 2}, {"slow-nvlink@node=1,size=0.5"});
  Topology topo(c);
  TimingModel m(c, topo);
  const Spec& ar = Find(m, 0, "ncclDevKernel_AllReduce");
  const double clean = m.TransferUs(9, ar, false);
  EXPECT_DOUBLE_EQ(m.TransferUs(9, ar, true), clean * (1 + (kSlowNvlinkFactor - 1) * 0.5));
  EXPECT_DOUBLE_EQ(m.TransferUs(1, ar, true), clean);
  // A slow NIC slows every cross-node group with a member on that node, at both ends.
  Config n = Job(16, {.tp = 8, .pp = 1, .dp = 2}, {"slow-nic@node=0"});
  Topology ntopo(n);
  TimingModel nm(n, ntopo);
  const Spec& rs = Find(nm, 0, "ncclDevKernel_ReduceScatter");
  EXPECT_DOUBLE_EQ(nm.TransferUs(11, rs, true), nm.TransferUs(11, rs, false) * kSlowNicFactor);
  EXPECT_DOUBLE_EQ(nm.TransferUs(3, rs, true), nm.TransferUs(3, rs, false) * kSlowNicFactor);
  const Spec& nar = Find(nm, 0, "ncclDevKernel_AllReduce");
  EXPECT_DOUBLE_EQ(nm.TransferUs(3, nar, true), nm.TransferUs(3, nar, false));
}

TEST(Factor, FaultsScaleTheirRolesOnTheirRanks) {
  Config c = Job(8, {.tp = 2, .pp = 2, .dp = 2},
                 {"slow-gpu@rank=5,size=0.25,every=4", "cpu-contention@rank=2", "gc@rank=6"});
  Topology topo(c);
  TimingModel m(c, topo);
  const Spec& gemm = Find(m, 1, "ampere_");
  EXPECT_DOUBLE_EQ(m.Factor(5, gemm, true), 1 + (kSlowGpuFactor - 1) * 0.0625);
  EXPECT_DOUBLE_EQ(m.Factor(5, gemm, false), 1);
  EXPECT_DOUBLE_EQ(m.Factor(4, gemm, true), 1);
  const Spec& op = Find(m, 0, "aten::linear");
  EXPECT_DOUBLE_EQ(m.Factor(2, op, true), kCpuContentionFactor);
  EXPECT_EQ(m.EveryOf(5), 4);
  EXPECT_EQ(m.EveryOf(4), 1);
  EXPECT_DOUBLE_EQ(m.GcUs(6), kGcUs);
  EXPECT_TRUE(m.HasGc(6));
  EXPECT_FALSE(m.HasGc(5));
  EXPECT_EQ(m.hang_rank(), -1);
}

TEST(Own, StallsIncludeTheStepOverhead) {
  Config c = Job(4, {.tp = 2, .pp = 1, .dp = 2}, {"gc@rank=1"});
  Topology topo(c);
  TimingModel m(c, topo);
  double clean_stall = 0, gc_stall = 0;
  m.Own(1, false, &clean_stall);
  m.Own(1, true, &gc_stall);
  // Rank 1 is in stage 0: the data loader stalls too.
  EXPECT_DOUBLE_EQ(clean_stall, kStepOverheadUs + 2500);
  EXPECT_DOUBLE_EQ(gc_stall, clean_stall + kGcUs);
}

TEST(Evaluate, EveryRankSharesTheIterationAndPeersWait) {
  Config c = Job(8, {.tp = 2, .pp = 2, .dp = 2}, {"slow-gpu@rank=5", "hang@rank=2"});
  Topology topo(c);
  TimingModel m(c, topo);
  EXPECT_EQ(m.hang_rank(), 2);
  const RankState slow = m.Evaluate(5), peer = m.Evaluate(4);
  for (int r = 0; r < 8; ++r) EXPECT_DOUBLE_EQ(m.Evaluate(r).iteration_us, slow.iteration_us);
  EXPECT_EQ(slow.stage, 1);
  EXPECT_EQ(slow.iter_factor.size(), 4u);
  EXPECT_GT(slow.compute_us, peer.compute_us * 1.2);
  EXPECT_GT(peer.comm_us, slow.comm_us);
  // Deterministic per (config, rank).
  EXPECT_EQ(m.Evaluate(4).call_us, peer.call_us);
}

}  // namespace
}  // namespace perftracker::sim
