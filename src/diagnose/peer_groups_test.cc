// Peer grouping alone (peer_groups.h): which ranks the diagnosis compares with each other.
#include "diagnose/peer_groups.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "diagnose/testing.h"

namespace perftracker::diagnose {
namespace {

using trace::EventKind;
using Groups = std::vector<std::vector<size_t>>;

// Functions PREFIX0 .. PREFIX<n-1>, 5 ms each: significant in a 100 ms step.
std::vector<FunctionPattern> Fns(const std::string& prefix, int n,
                                 EventKind kind = EventKind::kCpuOp) {
  std::vector<FunctionPattern> out;
  for (int i = 0; i < n; ++i)
    out.push_back(Fn(prefix + std::to_string(i), FunctionClass::kCompute, 5, 1, kind));
  return out;
}

std::vector<FunctionPattern> Concat(std::vector<FunctionPattern> a,
                                    const std::vector<FunctionPattern>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One rank per function list, ranks 0.., in that order.
pattern::CompactJob Job(const std::vector<std::vector<FunctionPattern>>& per_rank) {
  pattern::CompactJob cj;
  const int world = static_cast<int>(per_rank.size());
  for (int r = 0; r < world; ++r) cj.Add(Rank(r, world, per_rank[r], 100));
  return cj;
}

TEST(PeerGroupsTest, IdenticalRanksAreOneGroup) {
  pattern::CompactJob cj = Job(std::vector<std::vector<FunctionPattern>>(5, Fns("op", 6)));
  EXPECT_EQ(PeerGroups(cj), (Groups{{0, 1, 2, 3, 4}}));
}

TEST(PeerGroupsTest, DifferentFunctionSetsAreDifferentRoles) {
  const auto a = Fns("encoder_op", 6), b = Fns("decoder_op", 6);
  pattern::CompactJob cj = Job({a, b, a, b, a, b});
  EXPECT_EQ(PeerGroups(cj), (Groups{{0, 2, 4}, {1, 3, 5}}));
}

TEST(PeerGroupsTest, PipelineStagesAreDifferentRolesEvenWithTheSameFunctions) {
  // Ranks 0-2 are stage 0 and 3-5 stage 1 of their "pp" groups {r, r + 3}.
  pattern::CompactJob cj;
  for (int r = 0; r < 6; ++r) {
    RankSummary rs = Rank(r, 6, Fns("op", 6), 100);
    trace::ProcessGroup pg;
    pg.name = "pp";
    pg.desc = "pp:" + std::to_string(r % 3);
    pg.ranks = {r % 3, r % 3 + 3};
    pg.size = 2;
    rs.process_groups.push_back(pg);
    cj.Add(std::move(rs));
  }
  EXPECT_EQ(PeerGroups(cj), (Groups{{0, 1, 2}, {3, 4, 5}}));
}

// A collective NAME on process group GROUP (its ranks' list, as traces give it).
FunctionPattern Coll(const std::string& name, const std::string& group) {
  FunctionPattern f = Fn(name, FunctionClass::kCollective, 5);
  f.coll.group = group;
  return f;
}

// A hand-written pipeline, 2 stages x 3 replicas: the stages exchange activations with send and
// recv on the world group and all-reduce gradients with their replicas ({0,2,4} and {1,3,5});
// no process group is named for the pipeline, and both stages run the same functions.
std::vector<std::vector<FunctionPattern>> ManualPipeline() {
  std::vector<std::vector<FunctionPattern>> ranks;
  for (int r = 0; r < 6; ++r) {
    auto fns = Fns("op", 6);
    fns.push_back(Coll("c10d::send", "[0, 1, 2, 3, 4, 5]"));
    fns.push_back(Coll("c10d::recv_", "[0, 1, 2, 3, 4, 5]"));
    fns.push_back(Coll("c10d::allreduce_", r % 2 ? "[1, 3, 5]" : "[0, 2, 4]"));
    ranks.push_back(fns);
  }
  return ranks;
}

TEST(PeerGroupsTest, ReplicaSetsTellAHandWrittenPipelinesStagesApart) {
  pattern::CompactJob cj = Job(ManualPipeline());
  EXPECT_EQ(internal::ReplicaSets(cj.ranks()), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(PeerGroups(cj), (Groups{{0, 2, 4}, {1, 3, 5}}));
}

TEST(PeerGroupsTest, ReplicaSetsFromProcessGroupsWhereCollectivesNameNone) {
  // gloo on CPU (torch 2.x): collectives carry no group, the trace's pg_config lists the rank's
  // groups: the world (left out) and its stage's data-parallel group.
  pattern::CompactJob cj;
  for (int r = 0; r < 6; ++r) {
    auto fns = Fns("op", 6);
    fns.push_back(Coll("c10d::allreduce_", ""));
    RankSummary rs = Rank(r, 6, fns, 100);
    trace::ProcessGroup world, dp;
    world.name = "0";
    world.desc = "default_pg";
    world.ranks = {0, 1, 2, 3, 4, 5};
    dp.name = r % 2 ? "2" : "1";
    dp.desc = "undefined";
    dp.ranks = r % 2 ? std::vector<int>{1, 3, 5} : std::vector<int>{0, 2, 4};
    rs.process_groups = {world, dp};
    cj.Add(std::move(rs));
  }
  EXPECT_EQ(PeerGroups(cj), (Groups{{0, 2, 4}, {1, 3, 5}}));
}

TEST(PeerGroupsTest, ShardsThatShareAGroupAreOneSet) {
  // Tensor parallel x data parallel on a 2x2 mesh: tp groups {0,1} {2,3}, dp groups {0,2} {1,3}.
  // Every rank shares a collective group with another: one set, one group (the shards of a
  // layer do the same work).
  std::vector<std::vector<FunctionPattern>> ranks;
  for (int r = 0; r < 4; ++r) {
    auto fns = Fns("op", 6);
    fns.push_back(Coll("c10d::allreduce_", r < 2 ? "[0, 1]" : "[2, 3]"));
    fns.push_back(Coll("c10d::allgather_", r % 2 ? "[1, 3]" : "[0, 2]"));
    ranks.push_back(fns);
  }
  pattern::CompactJob cj = Job(ranks);
  EXPECT_EQ(internal::ReplicaSets(cj.ranks()), (std::vector<int>(4, 0)));
  EXPECT_EQ(PeerGroups(cj), (Groups{{0, 1, 2, 3}}));
}

TEST(PeerGroupsTest, NoReplicaSetsWhenARankRanNoCollective) {
  // A rank whose window lacks the profiler's part has no collectives: no sets, so that it is
  // not cut off from its peers for lack of data.
  auto ranks = ManualPipeline();
  ranks[3] = Fns("op", 6);
  pattern::CompactJob cj = Job(ranks);
  EXPECT_TRUE(internal::ReplicaSets(cj.ranks()).empty());
}

TEST(PeerGroupsTest, AnOddRankIsASingletonAfterTheGroupsThatCanVote) {
  const auto common = Fns("op", 10);
  pattern::CompactJob cj = Job({Fns("other_op", 10), common, common, common, common});
  EXPECT_EQ(PeerGroups(cj), (Groups{{1, 2, 3, 4}, {0}}));
}

TEST(PeerGroupsTest, ARankLeftAloneJoinsTheGroupItResemblesEnough) {
  const auto common = Fns("op", 10);
  // 8 of 10 shared functions: 80% alike, under the 85% of a peer but over the 75% to join a
  // group that can vote.
  const auto close =
      Concat(std::vector<FunctionPattern>(common.begin(), common.begin() + 8), Fns("extra_op", 2));
  EXPECT_EQ(PeerGroups(Job({common, common, common, close})), (Groups{{0, 1, 2, 3}}));
  // 7 of 10: 70% alike, stays alone.
  const auto far =
      Concat(std::vector<FunctionPattern>(common.begin(), common.begin() + 7), Fns("extra_op", 3));
  EXPECT_EQ(PeerGroups(Job({common, common, common, far})), (Groups{{0, 1, 2}, {3}}));
}

TEST(PeerGroupsTest, AFunctionCheapOnOneRankAndSignificantOnAnotherIsShared) {
  auto with_loader = [](double ms) {
    return Concat(Fns("op", 10), {Fn("DataLoader.__next__", FunctionClass::kDataLoader, ms, 1,
                                     EventKind::kUserAnnotation)});
  };
  // 0.1 ms is under 1% of the step on ranks 0-2, 30 ms on rank 3: the same role still.
  pattern::CompactJob cj =
      Job({with_loader(0.1), with_loader(0.1), with_loader(0.1), with_loader(30)});
  EXPECT_EQ(PeerGroups(cj), (Groups{{0, 1, 2, 3}}));
}

TEST(PeerGroupsTest, ARankMissingAPartIsComparedOnWhatItHas) {
  const auto profiler = Fns("op", 5);
  const auto full = Concat(profiler, Fns("train.py:step_", 5, EventKind::kPythonFunction));
  pattern::CompactJob cj;
  for (int r = 0; r < 3; ++r) cj.Add(Rank(r, 4, full, 100));
  RankSummary partial = Rank(3, 4, profiler, 100);
  partial.missing_part = "python";
  cj.Add(partial);
  EXPECT_EQ(PeerGroups(cj), (Groups{{0, 1, 2, 3}}));
  // Without the note, its missing Python functions set it apart.
  pattern::CompactJob unknown;
  for (int r = 0; r < 3; ++r) unknown.Add(Rank(r, 4, full, 100));
  unknown.Add(Rank(3, 4, profiler, 100));
  EXPECT_EQ(PeerGroups(unknown), (Groups{{0, 1, 2}, {3}}));
}

TEST(PeerGroupsTest, EveryRankOfALargeJobIsInExactlyOneSortedGroup) {
  testing::JobSpec spec;  // tp 2, pp 2, dp 4: stage 0 loads data, stage 1 computes the loss
  spec.slow_gpu = 5;
  pattern::CompactJob cj;
  for (auto& r : testing::MakeJob(spec)) cj.Add(std::move(r));
  cj.SortByRank();
  const Groups groups = PeerGroups(cj);
  EXPECT_EQ(groups, internal::PeerGroups(cj.ranks()));
  EXPECT_EQ(groups, (Groups{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}));
}

TEST(PeerGroupsTest, NoRanksNoGroups) { EXPECT_TRUE(PeerGroups(pattern::CompactJob()).empty()); }

}  // namespace
}  // namespace perftracker::diagnose
