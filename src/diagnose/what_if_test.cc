#include "diagnose/what_if.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/finding_text.h"
#include "diagnose/testing.h"

namespace perftracker::diagnose {
namespace {

using pattern::FunctionClass;

std::vector<RankArrival> Group(const std::vector<double>& waits) {
  std::vector<RankArrival> g;
  for (size_t r = 0; r < waits.size(); ++r) g.push_back({static_cast<int>(r), 0, waits[r], true});
  return g;
}

// Eight ranks: rank 3 arrives last (waits 2 ms), rank 1 next (waits 7 ms), the others wait
// 20 ms give or take their noise.
std::vector<RankArrival> Eight() { return Group({20, 7, 20, 2, 20.1, 19.9, 20, 20.2}); }

TEST(WhatIfTest, FixingTheLastArrivalGivesTheGapToTheNextOneAndNoMore) {
  const std::vector<RankArrival> g = Eight();
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(g, {{3, 3.0}}), 3.0);   // still the last: all of it
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(g, {{3, 12.0}}), 5.0);  // then rank 1 holds everyone
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(g, {{1, 4.0}}), 0.0);   // not the last: the job gains nothing
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(g, {{1, 12.0}, {3, 12.0}}), 12.0);  // both: 18 ms behind now
  std::map<int, double> every;
  for (int r = 0; r < 8; ++r) every[r] = 5.0;
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(g, every), 5.0);
  // A rank whose arrival is unknown moves nothing and holds nobody.
  std::vector<RankArrival> partial = g;
  partial[1].known = false;
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(partial, {{3, 30.0}}), 18.0);
}

TEST(WhatIfTest, WaitsWithinTheGroupsNoiseAreTheGroups) {
  // The earliest of many noisy waits is early by noise alone: the others' 19.9 is 20 here, so
  // fixing rank 3 (2 ms) gives 18 ms, not 17.9 (16 simulated ranks read 17% short before).
  const std::vector<RankArrival> g = WithoutNoise(Eight());
  EXPECT_DOUBLE_EQ(g[5].wait_ms, 20);
  EXPECT_DOUBLE_EQ(g[7].wait_ms, 20);
  EXPECT_DOUBLE_EQ(g[1].wait_ms, 7);  // beyond the noise: late in truth
  EXPECT_DOUBLE_EQ(g[3].wait_ms, 2);
  std::vector<RankArrival> one_late = Eight();
  one_late[1].wait_ms = 19.8;
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(one_late, {{3, 30.0}}), 18.0);
}

TEST(WhatIfTest, SlackIsHowMuchLongerARankWaitsThanTheLastArrival) {
  Arrivals a;
  a.ranks = Group({20, 7, 20, 2});
  a.replayable = true;
  const std::map<int, double> slack = SlackMs(a);
  EXPECT_EQ(slack, (std::map<int, double>{{0, 18}, {1, 5}, {2, 18}, {3, 0}}));
  a.replayable = false;
  EXPECT_TRUE(SlackMs(a).empty());
}

Finding Make(Category c, FindingClass k, std::vector<int> ranks, double impact_ms) {
  Finding f;
  f.category = c;
  f.finding_class = k;
  f.ranks = std::move(ranks);
  f.impact_ms = impact_ms;
  f.confidence = 0.9;
  return f;
}

TEST(WhatIfTest, EachFindingGetsTheReplaysSavingAndAnOverclaimIsShown) {
  Diagnosis d;
  d.job.iteration_ms_median = 100;
  d.arrivals.ranks = Eight();
  d.arrivals.replayable = true;
  d.findings = {
      Make(Category::kStraggler, FindingClass::kSubset, {3}, 12),     // replay: 5
      Make(Category::kPython, FindingClass::kSubset, {3}, 5),         // replay: 5, as claimed
      Make(Category::kGc, FindingClass::kAll, {0, 1, 2, 3}, 8),       // every rank: 8
      Make(Category::kCommunication, FindingClass::kSubset, {0}, 6),  // transfer everyone waits
      Make(Category::kMemoryGrowth, FindingClass::kSubset, {1}, 0),   // no time cost
  };
  AddWhatIf(d.arrivals, &d);
  EXPECT_DOUBLE_EQ(d.findings[0].what_if_ms, 5);
  EXPECT_DOUBLE_EQ(d.findings[0].what_if_iteration_ms, 95);
  EXPECT_NE(d.findings[0].evidence_text["what_if"].find("2.4x the replay's 5.0 ms"),
            std::string::npos)
      << d.findings[0].evidence_text["what_if"];
  EXPECT_DOUBLE_EQ(d.findings[1].what_if_ms, 5);
  EXPECT_FALSE(d.findings[1].evidence_text.count("what_if"));
  EXPECT_DOUBLE_EQ(d.findings[2].what_if_ms, 8);
  EXPECT_DOUBLE_EQ(d.findings[3].what_if_ms, 6);
  EXPECT_LT(d.findings[4].what_if_ms, 0);
  EXPECT_EQ(d.job.slack_ms_per_rank.at(3), 0);
  // Ranked by what fixing each gives: the all-rank collection first, the 12 ms claim after it.
  internal::SortFindings(&d.findings);
  EXPECT_EQ(d.findings[1].category, Category::kGc);
  EXPECT_EQ(d.findings[2].category, Category::kCommunication);
}

TEST(WhatIfTest, WithoutArrivalsToGoBySubsetFindingsAreNotReplayed) {
  Diagnosis d;
  d.job.iteration_ms_median = 100;
  d.arrivals.ranks = Group({0, 0});
  d.findings = {Make(Category::kStraggler, FindingClass::kSubset, {1}, 12)};
  AddWhatIf(d.arrivals, &d);
  EXPECT_LT(d.findings[0].what_if_ms, 0);
  EXPECT_TRUE(d.job.slack_ms_per_rank.empty());
  // One rank alone: its problem's time is what fixing it gives, up to the iteration.
  d.arrivals.single_rank = true;
  d.findings = {Make(Category::kStraggler, FindingClass::kSubset, {0}, 150)};
  AddWhatIf(d.arrivals, &d);
  EXPECT_DOUBLE_EQ(d.findings[0].what_if_ms, 100);
  EXPECT_DOUBLE_EQ(d.findings[0].what_if_iteration_ms, 0);
}

TEST(WhatIfTest, ArrivalsComeFromTheCollectivesThePeerComparisonCounts) {
  pattern::CompactJob job;
  for (int r = 0; r < 3; ++r) {
    std::vector<pattern::FunctionPattern> fns = {
        testing::Fn("aten::mm", FunctionClass::kCompute, 10),
        testing::Fn("gloo:all_reduce", FunctionClass::kCollective, 4.0 + r),
        testing::Fn("ncclKernel_AllReduce", FunctionClass::kCollective, 1.0, 1,
                    trace::EventKind::kKernel)};
    // Online, an op inside a Python frame is that frame's time: not counted again.
    fns.push_back(testing::Fn("c10d::allreduce_", FunctionClass::kCollective, 50));
    fns.back().in_python = true;
    job.Add(testing::Rank(r, 3, std::move(fns), 40));
  }
  job.SortByRank();
  Arrivals a = CollectiveArrivals(job, {0, 0, 0});
  ASSERT_EQ(a.ranks.size(), 3u);
  EXPECT_TRUE(a.replayable);
  EXPECT_DOUBLE_EQ(a.ranks[2].wait_ms, 7.0);
  EXPECT_TRUE(a.ranks[2].known);
  // Two roles (a pipeline's stages) that both wait: replayed, each on its own.
  EXPECT_TRUE(CollectiveArrivals(job, {0, 0, 1}).replayable);
  // A stage that never waits says nothing of when it arrives.
  pattern::CompactJob quiet_stage;
  for (int r = 0; r < 3; ++r) {
    std::vector<pattern::FunctionPattern> fns = {
        testing::Fn("aten::mm", FunctionClass::kCompute, 10)};
    if (r < 2) fns.push_back(testing::Fn("gloo:all_reduce", FunctionClass::kCollective, 3));
    // Transfers between stages are no arrival at a group's collectives.
    fns.push_back(testing::Fn("gloo:recv", FunctionClass::kCollective, 30));
    quiet_stage.Add(testing::Rank(r, 3, std::move(fns), 40));
  }
  quiet_stage.SortByRank();
  const Arrivals staged = CollectiveArrivals(quiet_stage, {0, 0, 1});
  EXPECT_FALSE(staged.replayable);
  EXPECT_DOUBLE_EQ(staged.ranks[0].wait_ms, 3.0);
  EXPECT_DOUBLE_EQ(staged.ranks[2].wait_ms, 0.0);
  EXPECT_TRUE(CollectiveArrivals(quiet_stage, {0, 0, 0}).replayable);
}

TEST(WhatIfTest, AWaitSeenOnTwoThreadsCountsOnce) {
  // The training thread waits 147 ms in Work.wait() while gloo's worker runs the all-reduce:
  // one wait of 147 ms, not 294. DDP's gradient all-reduce runs on the worker alone: 40 ms.
  pattern::CompactJob job;
  for (int r = 0; r < 2; ++r) {
    std::vector<pattern::FunctionPattern> fns;
    fns.push_back(testing::Fn("gloo:all_reduce", FunctionClass::kCollective, r == 0 ? 147 : 40));
    fns.back().main_thread = false;  // gloo's worker thread
    if (r == 0) {
      fns.push_back(testing::Fn("<built-in method wait>", FunctionClass::kCollective, 147, 1,
                                trace::EventKind::kPythonFunction,
                                "train.py(9): step;/t/torch/distributed/distributed_c10d.py(N): "
                                "all_reduce"));
      fns.back().main_thread = true;
    }
    job.Add(testing::Rank(r, 2, std::move(fns), 200));
  }
  job.SortByRank();
  const Arrivals a = CollectiveArrivals(job, {0, 0});
  EXPECT_DOUBLE_EQ(a.ranks[0].wait_ms, 147.0);
  EXPECT_DOUBLE_EQ(a.ranks[1].wait_ms, 40.0);
}

TEST(WhatIfTest, APipelinesStagesAreReplayedEachOnItsOwn) {
  // Stage 0 (ranks 0-2) waits ~50 ms an iteration for stage 1's gradients; stage 1 (ranks 3-5)
  // waits ~30 ms, except rank 5, which computes more and waits 5. Its stage waits for rank 5:
  // fixing 40 ms of its work makes it arrive with its stage, 25 ms sooner.
  Arrivals a;
  const double waits[] = {50, 51, 49, 30, 31, 5};
  for (int r = 0; r < 6; ++r) a.ranks.push_back({r, r < 3 ? 0 : 1, waits[r], true});
  a.replayable = true;
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(a.ranks, {{5, 40.0}}), 25.0);
  // Stage 0's ranks arrive together, within its noise: one of them fixed gains nothing.
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(a.ranks, {{0, 10.0}}), 0.0);
  // Each stage's noise on its own: taken across the stages, the 20 ms between them would read
  // as noise (a spread of 10 ms from the job's median of 40), rank 5's 35 ms with it, and every
  // rank of the job would arrive at that median: no saving.
  const std::vector<RankArrival> quiet = WithoutNoise(a.ranks);
  EXPECT_DOUBLE_EQ(quiet[0].wait_ms, 50);
  EXPECT_DOUBLE_EQ(quiet[4].wait_ms, 30);
  EXPECT_DOUBLE_EQ(quiet[5].wait_ms, 5);
  // Through AddWhatIf: the straggler's rule says 40 ms, the replay 25; slack within each stage.
  Diagnosis d;
  d.job.iteration_ms_median = 200;
  d.findings = {Make(Category::kStraggler, FindingClass::kSubset, {5}, 40)};
  AddWhatIf(a, &d);
  EXPECT_DOUBLE_EQ(d.findings[0].what_if_ms, 25.0);
  EXPECT_EQ(d.job.slack_ms_per_rank.at(5), 0);
  EXPECT_EQ(d.job.slack_ms_per_rank.at(3), 25);
  EXPECT_EQ(d.job.slack_ms_per_rank.at(2), 0);
  EXPECT_EQ(d.job.slack_ms_per_rank.at(0), 1);
}

TEST(WhatIfTest, DiagnoseReplaysItsFindings) {
  // Rank 2 computes 20 ms more and waits 20 ms less than its peers: fixing it gives 20 ms.
  std::vector<pattern::RankSummary> ranks;
  for (int r = 0; r < 4; ++r) {
    const bool slow = r == 2;
    ranks.push_back(
        testing::Rank(r, 4,
                      {testing::Fn("aten::mm", FunctionClass::kCompute, slow ? 30 : 10, 7),
                       testing::Fn("gloo:all_reduce", FunctionClass::kCollective, slow ? 1 : 21)},
                      40));
  }
  const Diagnosis d = Diagnose(ranks);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>{2});
  EXPECT_NEAR(d.findings[0].what_if_ms, 20, 0.01);
  EXPECT_EQ(d.job.slack_ms_per_rank.at(2), 0);
  EXPECT_EQ(d.job.slack_ms_per_rank.at(0), 20);
}

TEST(WhatIfTest, LateRanksAreThoseBeyondTheGroupsNoise) {
  Arrivals a;
  a.ranks = Eight();
  a.replayable = true;
  // Rank 3 waits 18 ms less than the typical rank, rank 1 13 ms less; the rest is noise.
  EXPECT_EQ(LateRanks(SlackMs(a)), (std::vector<std::pair<int, double>>{{3, 18}, {1, 13}}));
  // Ranks that wait alike: nobody holds the others.
  a.ranks = Group({20, 20.1, 19.9, 20, 20.2});
  EXPECT_TRUE(LateRanks(SlackMs(a)).empty());
  EXPECT_TRUE(LateRanks({}).empty());
}

TEST(WhatIfTest, ARankAtItsPeersMedianArrivesWhenTheyDo) {
  Arrivals a;
  a.ranks = Eight();
  a.replayable = true;
  auto r3 = RankAtPeersMedian(a, 3);
  ASSERT_TRUE(r3.ok()) << r3.status().message();
  EXPECT_EQ(*r3, (std::map<int, double>{{3, 18}}));    // its peers wait 20 (median), it 2
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(a.ranks, *r3), 5);  // then rank 1 is the last
  EXPECT_EQ(*RankAtPeersMedian(a, 0), (std::map<int, double>{{0, 0}}));  // already early
  EXPECT_NE(RankAtPeersMedian(a, 9).status().message().find("rank 9: not in the job"),
            std::string::npos);
  a.replayable = false;
  EXPECT_FALSE(RankAtPeersMedian(a, 3).ok());
}

TEST(WhatIfTest, AFunctionAtItsPeersMedianOrRemovedMovesEachRanksArrival) {
  pattern::CompactJob job;
  for (int r = 0; r < 3; ++r) {
    std::vector<pattern::FunctionPattern> fns = {
        testing::Fn("t.py(5): step", FunctionClass::kPython, r == 1 ? 12 : 4),
        // A recursive call of step inside step: counted in the outer one already.
        testing::Fn("t.py(5): step", FunctionClass::kPython, 3, 1, trace::EventKind::kCpuOp,
                    "t.py(1): main;t.py(5): step"),
        testing::Fn("gloo:all_reduce", FunctionClass::kCollective, r == 1 ? 1 : 9)};
    job.Add(testing::Rank(r, 3, std::move(fns), 40));
  }
  job.SortByRank();
  const Arrivals a = CollectiveArrivals(job, {0, 0, 0});
  auto median = FunctionAtPeersMedian(job, a, "step", /*zero=*/false);
  ASSERT_TRUE(median.ok()) << median.status().message();
  EXPECT_EQ(*median, (std::map<int, double>{{1, 8}}));
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(a.ranks, *median), 8);
  auto zero = FunctionAtPeersMedian(job, a, "t.py(5): step", /*zero=*/true);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, (std::map<int, double>{{0, 4}, {1, 12}, {2, 4}}));
  EXPECT_DOUBLE_EQ(ArrivalSavingMs(a.ranks, *zero), 12);
  EXPECT_NE(FunctionAtPeersMedian(job, a, "gloo:all_reduce", false)
                .status()
                .message()
                .find("a collective"),
            std::string::npos);
  EXPECT_NE(FunctionAtPeersMedian(job, a, "nothing", false).status().message().find("no rank runs"),
            std::string::npos);
}

// An all-reduce kernel of MS per iteration whose messages moved at GBPS of bus bandwidth.
pattern::FunctionPattern AllReduce(double ms, double gbps, const std::string& name = "ncclKernel") {
  pattern::FunctionPattern f =
      testing::Fn(name, FunctionClass::kCollective, ms, 1, trace::EventKind::kKernel);
  f.coll.op = "allreduce";
  f.coll.msg_bytes = 64 << 20;
  f.coll.busbw_gbps = gbps;
  return f;
}

TEST(WhatIfTest, ACollectiveAtTheBusBandwidthGivenSavesTheCriticalRanksTransferTime) {
  // Rank 2 arrives last: its 10 ms all-reduce is the transfer (20 GB/s). Ranks 0 and 1 wait
  // 30 ms in it, 20 of them for rank 2, so their bandwidth reads 6.7 GB/s; re-timed on them
  // (30 x (1 - 6.7 / 50)) it would say 26 ms. At 50 GB/s the transfer takes 4 ms: 6 saved.
  pattern::CompactJob job;
  for (int r = 0; r < 3; ++r) {
    const double ms = r == 2 ? 10 : 30;
    std::vector<pattern::FunctionPattern> fns = {
        testing::Fn("aten::mm", FunctionClass::kCompute, 40), AllReduce(ms, 20 * 10 / ms)};
    // A transfer to another pipeline stage is no wait of the group's: not re-timed.
    fns.push_back(AllReduce(5, 1, "ncclDevKernel_SendRecv"));
    fns.back().coll.op = "send";
    job.Add(testing::Rank(r, 3, std::move(fns), 80));
  }
  job.SortByRank();
  const Arrivals a = CollectiveArrivals(job, {0, 0, 0});
  auto saving = BusBandwidthSavingMs(job, a, 50);
  ASSERT_TRUE(saving.ok()) << saving.status().message();
  EXPECT_NEAR(*saving, 6.0, 1e-9);
  // Below what the transfer already reaches: nothing to gain.
  EXPECT_DOUBLE_EQ(*BusBandwidthSavingMs(job, a, 20), 0.0);
  // A small message is latency-bound: its time stays.
  pattern::CompactJob small;
  for (int r = 0; r < 2; ++r) {
    pattern::FunctionPattern f = AllReduce(10, 1);
    f.coll.msg_bytes = 64 << 10;
    small.Add(testing::Rank(r, 2, {f}, 80));
  }
  small.SortByRank();
  EXPECT_DOUBLE_EQ(*BusBandwidthSavingMs(small, CollectiveArrivals(small, {0, 0}), 50), 0.0);
  // Each stage of a pipeline has its own critical rank; the iteration gains the most of them.
  pattern::CompactJob staged;
  for (int r = 0; r < 4; ++r) {
    const double ms = r % 2 == 1 ? 10 : 30;
    const double gbps = r < 2 ? 20 * 10 / ms : 10 * 10 / ms;  // stage 1 moves at 10 GB/s
    staged.Add(testing::Rank(r, 4, {AllReduce(ms, gbps)}, 80));
  }
  staged.SortByRank();
  EXPECT_NEAR(*BusBandwidthSavingMs(staged, CollectiveArrivals(staged, {0, 0, 1, 1}), 50), 8.0,
              1e-9);
  EXPECT_FALSE(BusBandwidthSavingMs(job, a, 0).ok());
}

TEST(WhatIfTest, WithoutMessageSizesThereIsNothingToRetime) {
  pattern::CompactJob job;
  for (int r = 0; r < 2; ++r) {
    job.Add(testing::Rank(
        r, 2, {testing::Fn("gloo:all_reduce", FunctionClass::kCollective, 5.0 + r)}, 40));
  }
  job.SortByRank();
  auto saving = BusBandwidthSavingMs(job, CollectiveArrivals(job, {0, 0}), 50);
  ASSERT_FALSE(saving.ok());
  EXPECT_NE(saving.status().message().find("no collective of known message size"),
            std::string::npos);
}

TEST(WhatIfTest, ACpuCollectiveSeenOnTwoThreadsIsRetimedOnce) {
  // The training thread's Work.wait and gloo's worker are one 20 ms all-reduce at 2 GB/s: at
  // 4 GB/s it takes 10, not 20 saved.
  pattern::CompactJob job;
  for (int r = 0; r < 2; ++r) {
    pattern::FunctionPattern worker = AllReduce(20, 2, "gloo:all_reduce");
    worker.kind = trace::EventKind::kCpuOp;
    worker.main_thread = false;
    pattern::FunctionPattern wait = worker;
    wait.name = "record_param_comms";
    wait.main_thread = true;
    job.Add(testing::Rank(r, 2, {worker, wait}, 60));
  }
  job.SortByRank();
  EXPECT_NEAR(*BusBandwidthSavingMs(job, CollectiveArrivals(job, {0, 0}), 4), 10.0, 1e-9);
}

// A gloo all-reduce whose time in each iteration is ITERS (ms).
pattern::FunctionPattern AllReduceEach(const std::vector<float>& iters) {
  double sum = 0;
  for (float v : iters) sum += v;
  pattern::FunctionPattern f = testing::Fn("gloo:all_reduce", FunctionClass::kCollective,
                                           sum / static_cast<double>(iters.size()));
  for (float v : iters) f.iter_us.push_back(v * 1000);
  return f;
}

TEST(WhatIfTest, TheCriticalPathNamesEachIterationsLastArrival) {
  // Rank 2 is late in iterations 0 and 2 (it waits 1 ms while the others wait 9-10), rank 1
  // in iteration 1 (the others 6-8 ms after it): an intermittent straggler and noise the
  // window's means would blur into one late rank.
  pattern::CompactJob job;
  const std::vector<std::vector<float>> waits = {{9, 8, 10, 5}, {10, 1, 9, 4}, {1, 7, 1, 6}};
  for (int r = 0; r < 3; ++r) {
    job.Add(testing::Rank(r, 3,
                          {testing::Fn("aten::mm", FunctionClass::kCompute, 30),
                           AllReduceEach(waits[static_cast<size_t>(r)])},
                          50, "node0", 4));
  }
  job.SortByRank();
  const Arrivals a = CollectiveArrivals(job, {0, 0, 0});
  const std::vector<CriticalIteration> path = CriticalPath(a);
  ASSERT_EQ(path.size(), 4u);
  const int expect_rank[] = {2, 1, 2, 1};
  const double expect_lead[] = {8, 6, 8, 1};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(path[i].iteration, static_cast<int>(i));
    ASSERT_EQ(path[i].ranks.size(), 1u);
    EXPECT_EQ(path[i].ranks[0].rank, expect_rank[i]) << i;
    EXPECT_NEAR(path[i].ranks[0].lead_ms, expect_lead[i], 1e-4) << i;
  }
  EXPECT_EQ(CriticalRankCounts(path), (std::vector<std::pair<int, int>>{{1, 2}, {2, 2}}));
  // A finding on rank 2 says in how many iterations it held the others; one on every rank
  // says nothing of it.
  Diagnosis d;
  d.job.iteration_ms_median = 50;
  d.job.critical_path = path;
  d.findings = {Make(Category::kStraggler, FindingClass::kSubset, {2}, 5),
                Make(Category::kDataLoader, FindingClass::kAll, {0, 1, 2}, 5)};
  AddWhatIf(a, &d);
  EXPECT_EQ(d.findings[0].evidence.at("critical_iterations"), 2);
  EXPECT_EQ(d.findings[1].evidence.count("critical_iterations"), 0u);
  // A pipeline's stages each have their own: ranks 0-1 one stage, rank 2 alone in the other
  // (one rank is no group to wait for: left out).
  const std::vector<CriticalIteration> staged = CriticalPath(CollectiveArrivals(job, {0, 0, 1}));
  ASSERT_EQ(staged.size(), 4u);
  ASSERT_EQ(staged[0].ranks.size(), 1u);
  EXPECT_EQ(staged[0].ranks[0].rank, 0);
  EXPECT_EQ(staged[1].ranks[0].rank, 1);
  EXPECT_NEAR(staged[1].ranks[0].lead_ms, 7.0, 1e-4);
}

TEST(WhatIfTest, TheCriticalPathMatchesIterationsAcrossRanksOrIsNotKnown) {
  const std::vector<std::vector<float>> waits = {{9, 8, 10, 5}, {1, 9, 2}, {1, 7, 1, 6}};
  auto job_of = [&](bool rank1_left_out_its_first) {
    pattern::CompactJob job;
    for (int r = 0; r < 3; ++r) {
      pattern::RankSummary s =
          testing::Rank(r, 3, {AllReduceEach(waits[static_cast<size_t>(r)])}, 50, "node0", 4);
      s.iteration_source = "window";  // no step numbers: iterations by position
      if (r == 1) {
        s.iteration_ms.resize(3);
        if (rank1_left_out_its_first) s.excluded_iterations.push_back({});  // warm-up, index 0
      }
      job.Add(std::move(s));
    }
    job.SortByRank();
    return job;
  };
  // Rank 1 left its first iteration out (a warm-up): its three are the others' last three, and
  // only those are every rank's. Iteration 1: rank 1 waited 1 ms, the others 7-8 (its lead 6).
  const pattern::CompactJob aligned = job_of(true);
  const std::vector<CriticalIteration> path = CriticalPath(CollectiveArrivals(aligned, {0, 0, 0}));
  ASSERT_EQ(path.size(), 3u);
  EXPECT_EQ(path[0].iteration, 1);
  EXPECT_EQ(path[0].ranks[0].rank, 1);
  EXPECT_NEAR(path[0].ranks[0].lead_ms, 6.0, 1e-4);
  EXPECT_EQ(path[1].ranks[0].rank, 2);  // 9 and 10 against 1
  EXPECT_EQ(path[2].ranks[0].rank, 1);  // 2 against 5 and 6
  // A trace of three iterations, all steady: they are the first three.
  const pattern::CompactJob first_three = job_of(false);
  const std::vector<CriticalIteration> three =
      CriticalPath(CollectiveArrivals(first_three, {0, 0, 0}));
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].ranks[0].rank, 1);  // 1 against 9 and 1: a tie held by no one
  EXPECT_NEAR(three[0].ranks[0].lead_ms, 0.0, 1e-4);
  // Three values for four steady iterations: which three is not known, nor the path.
  pattern::CompactJob fewer;
  for (int r = 0; r < 3; ++r) {
    pattern::RankSummary s =
        testing::Rank(r, 3, {AllReduceEach(waits[static_cast<size_t>(r)])}, 50, "node0", 4);
    fewer.Add(std::move(s));
  }
  fewer.SortByRank();
  EXPECT_TRUE(CriticalPath(CollectiveArrivals(fewer, {0, 0, 0})).empty());
  // Nor in a job whose summaries keep no per-iteration values.
  pattern::CompactJob means;
  for (int r = 0; r < 2; ++r)
    means.Add(
        testing::Rank(r, 2, {testing::Fn("gloo:all_reduce", FunctionClass::kCollective, 5)}, 50));
  means.SortByRank();
  EXPECT_TRUE(CriticalPath(CollectiveArrivals(means, {0, 0})).empty());
}

}  // namespace
}  // namespace perftracker::diagnose
