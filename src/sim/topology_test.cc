// Unit tests of the simulator's topology: Megatron's rank order, rank -> node -> switch, and
// which ranks a fault's place covers.
#include "sim/topology.h"

#include <gtest/gtest.h>

#include <vector>

namespace perftracker::sim {
namespace {

Config Job(int workers, Layout layout, int gpus_per_node = 8, int nodes_per_switch = 4) {
  Config c;
  c.workers = workers;
  c.layout = layout;
  c.gpus_per_node = gpus_per_node;
  c.nodes_per_switch = nodes_per_switch;
  return c;
}

Fault At(FaultKind kind, PlaceKind place, int index) {
  Fault f;
  f.kind = kind;
  f.place_kind = place;
  f.index = index;
  return f;
}

TEST(Topology, RankToNodeToSwitch) {
  // 8 GPUs a node, 4 nodes a switch: 32 ranks a switch.
  Topology t(Job(128, {.tp = 8, .pp = 2, .dp = 8}));
  EXPECT_EQ(t.Node(0), 0);
  EXPECT_EQ(t.Node(7), 0);
  EXPECT_EQ(t.Node(8), 1);
  EXPECT_EQ(t.Switch(31), 0);
  EXPECT_EQ(t.Node(32), 4);
  EXPECT_EQ(t.Switch(32), 1);
  EXPECT_EQ(t.Switch(127), 3);
  Topology small(Job(12, {.tp = 2, .pp = 1, .dp = 6}, 2, 3));
  EXPECT_EQ(small.Node(5), 2);
  EXPECT_EQ(small.Switch(5), 0);
  EXPECT_EQ(small.Switch(6), 1);
}

TEST(Topology, SizesBelowOneCountAsOne) {
  Topology t(Job(4, {.tp = 1, .pp = 1, .dp = 4}, 0, 0));
  EXPECT_EQ(t.Node(3), 3);
  EXPECT_EQ(t.Switch(3), 3);
}

TEST(Topology, CoordAndRankAreInverse) {
  Topology t(Job(48, {.tp = 2, .pp = 3, .dp = 8, .ep = 4}));
  for (int r = 0; r < 48; ++r) {
    Coord c = t.CoordOf(r);
    EXPECT_EQ(t.RankOf(c), r);
    EXPECT_EQ(r, c.pp * 16 + c.dp * 2 + c.tp);
  }
  EXPECT_EQ(t.EpGroup(21), (std::vector<int>{17, 19, 21, 23}));
  EXPECT_EQ(t.PpGroup(21), (std::vector<int>{5, 21, 37}));
  Topology dense(Job(8, {.tp = 2, .pp = 2, .dp = 2}));
  EXPECT_TRUE(dense.EpGroup(3).empty());
  EXPECT_EQ(dense.Groups(3).size(), 3u);
}

TEST(InPlace, EachPlaceKind) {
  Topology t(Job(64, {.tp = 8, .pp = 2, .dp = 4}));
  EXPECT_TRUE(InPlace(t, At(FaultKind::kSlowGpu, PlaceKind::kRank, 5), 5));
  EXPECT_FALSE(InPlace(t, At(FaultKind::kSlowGpu, PlaceKind::kRank, 5), 6));
  EXPECT_TRUE(InPlace(t, At(FaultKind::kSlowNic, PlaceKind::kNode, 1), 15));
  EXPECT_FALSE(InPlace(t, At(FaultKind::kSlowNic, PlaceKind::kNode, 1), 16));
  EXPECT_TRUE(InPlace(t, At(FaultKind::kSlowSwitch, PlaceKind::kSwitch, 1), 32));
  EXPECT_FALSE(InPlace(t, At(FaultKind::kSlowSwitch, PlaceKind::kSwitch, 1), 31));
  EXPECT_TRUE(InPlace(t, At(FaultKind::kSync, PlaceKind::kAll, -1), 63));
}

TEST(FaultRanks, PlacesAndTheLoadersStage) {
  Config c = Job(64, {.tp = 4, .pp = 2, .dp = 8});
  EXPECT_EQ(FaultRanks(c, At(FaultKind::kSlowGpu, PlaceKind::kRank, 9)), std::vector<int>{9});
  EXPECT_EQ(FaultRanks(c, At(FaultKind::kSlowNic, PlaceKind::kNode, 7)).front(), 56);
  EXPECT_EQ(FaultRanks(c, At(FaultKind::kSlowNic, PlaceKind::kNode, 7)).size(), 8u);
  EXPECT_EQ(FaultRanks(c, At(FaultKind::kSlowSwitch, PlaceKind::kSwitch, 1)).size(), 32u);
  EXPECT_EQ(FaultRanks(c, At(FaultKind::kSync, PlaceKind::kAll, -1)).size(), 64u);
  // Stage 0 is ranks 0..31: a slow loader on node 3 (24..31) hits them all, on node 4 none.
  EXPECT_EQ(FaultRanks(c, At(FaultKind::kSlowLoader, PlaceKind::kNode, 3)).size(), 8u);
  EXPECT_TRUE(FaultRanks(c, At(FaultKind::kSlowLoader, PlaceKind::kNode, 4)).empty());
  // A place past the last rank covers nothing.
  EXPECT_TRUE(FaultRanks(c, At(FaultKind::kSlowNic, PlaceKind::kNode, 9)).empty());
}

}  // namespace
}  // namespace perftracker::sim
