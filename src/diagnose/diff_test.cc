// The run diff's steps alone (diff.h). Diff as a whole is tested in diagnose_test.cc (DiffTest).
#include "diagnose/diff.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "diagnose/testing.h"

namespace perftracker::diagnose::internal::diff {
namespace {

const DiagnoseOptions kOptions;

// N ranks of a 27 ms step running FNS(rank).
template <typename F>
std::vector<RankSummary> MakeRun(int n, F fns, double iteration_ms = 27) {
  std::vector<RankSummary> out;
  for (int r = 0; r < n; ++r) out.push_back(Rank(r, n, fns(r), iteration_ms));
  return out;
}

std::string Key(const std::string& name) { return Fn(name, FunctionClass::kCompute, 1).Key(); }

TEST(CollectKeysTest, EveryFunctionOfBothRunsByKeyAndRank) {
  const auto base = MakeRun(2, [](int) {
    return std::vector<FunctionPattern>{Fn("aten::mm", FunctionClass::kCompute, 20, 7)};
  });
  const auto test = MakeRun(2, [](int r) {
    std::vector<FunctionPattern> fns = {Fn("aten::mm", FunctionClass::kCompute, r ? 30 : 20, 7)};
    if (r == 1) fns.push_back(Fn("aten::nonzero", FunctionClass::kCompute, 3, 2));
    return fns;
  });
  const KeyDiffs keys = CollectKeys(base, test);
  ASSERT_EQ(keys.size(), 2u);
  const KeyDiff& mm = keys.at(Key("aten::mm"));
  EXPECT_EQ(mm.proto, &base[0].functions[0]);
  EXPECT_EQ(mm.base.self_by_rank, (std::map<int, double>{{0, 20000}, {1, 20000}}));
  EXPECT_EQ(mm.test.self_by_rank, (std::map<int, double>{{0, 20000}, {1, 30000}}));
  const KeyDiff& nonzero = keys.at(Key("aten::nonzero"));
  EXPECT_EQ(nonzero.proto, &test[1].functions[1]);
  EXPECT_TRUE(nonzero.base.by_rank.empty());
  EXPECT_EQ(nonzero.test.by_rank.size(), 1u);
}

TEST(DiffInputTest, RanksInBothRunsAndTheIterationChange) {
  auto fns = [](int) {
    return std::vector<FunctionPattern>{Fn("aten::mm", FunctionClass::kCompute, 20, 7)};
  };
  const auto base = MakeRun(4, fns), test = MakeRun(2, fns);
  const DiffInput in(base, test, kOptions, 27000, 30000);
  EXPECT_EQ(in.base_ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(in.test_ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(in.common, (std::vector<int>{0, 1}));
  EXPECT_EQ(in.iter_delta, 3000);
  EXPECT_EQ(in.keys.size(), 1u);
}

TEST(MedianOverTest, ARankWithoutTheValueCountsAsZero) {
  EXPECT_EQ(MedianOver({{0, 5}, {1, 7}, {2, 9}}, {0, 1, 2}), 7);
  EXPECT_EQ(MedianOver({{0, 5}, {1, 7}}, {0, 1, 2}), 5);
}

TEST(IterationSpreadTest, OverEveryRanksIterations) {
  FunctionPattern a = Fn("f", FunctionClass::kCompute, 1), b = a;
  a.iter_us = {1, 3};
  b.iter_us = {5};
  auto [sd, n] = IterationSpread({{0, &a}, {1, &b}});
  EXPECT_EQ(n, 3);
  EXPECT_DOUBLE_EQ(sd, 2);  // mean 3: (4 + 0 + 4) / 2
  auto [sd1, n1] = IterationSpread({{1, &b}});
  EXPECT_EQ(sd1, 0);  // one sample has no spread
  EXPECT_EQ(n1, 1);
}

std::vector<trace::DeviceInfo> Gpus(const std::string& name, int n) {
  std::vector<trace::DeviceInfo> v(static_cast<size_t>(n));
  for (auto& d : v) d.name = name;
  return v;
}

TEST(CompareSetupsTest, GpuWorldSizeAndVersionsOnlyWhereBothRunsSay) {
  auto side = [](const std::string& gpu, int world, const std::string& backend) {
    std::vector<RankSummary> s = {Rank(0, world, {}, 10)};
    s[0].devices = Gpus(gpu, 2);
    s[0].backend = backend;
    return s;
  };
  EXPECT_FALSE(CompareSetups(side("A100", 4, "nccl"), side("A100", 4, "nccl")).any());
  // A backend only one run names is no change.
  EXPECT_FALSE(CompareSetups(side("A100", 4, "nccl"), side("A100", 4, "")).any());
  const SetupChange gpu = CompareSetups(side("A100", 4, "nccl"), side("V100", 4, "gloo"));
  EXPECT_TRUE(gpu.gpu);
  EXPECT_TRUE(gpu.backend);
  EXPECT_FALSE(gpu.world);
  EXPECT_FALSE(gpu.nccl);
  EXPECT_TRUE(CompareSetups(side("A100", 4, ""), side("A100", 8, "")).world);
}

TEST(SettingsOfTest, TheMostCommonGpuAndTheLargestWorld) {
  std::vector<RankSummary> s = {Rank(0, 2, {}, 10), Rank(5, 2, {}, 10), Rank(1, 2, {}, 10)};
  s[0].devices = Gpus("A100", 1);
  s[1].devices = Gpus("H100", 2);
  s[2].devices = Gpus("H100", 1);
  const Settings st = SettingsOf(s);
  EXPECT_EQ(st.gpu, "H100");
  EXPECT_EQ(st.gpus, 2);
  EXPECT_EQ(st.world_size, 6);  // rank 5 exists
}

TEST(SetupChangeFindingTest, NamesEveryChangeAndLeads) {
  std::vector<RankSummary> base = {Rank(0, 8, {}, 20)}, test = {Rank(0, 2, {}, 30)};
  base[0].devices = Gpus("A100", 8);
  test[0].devices = Gpus("V100", 2);
  const DiffInput in(base, test, kOptions, 20000, 30000);
  const Finding f = SetupChangeFinding(in, CompareSetups(base, test));
  EXPECT_EQ(f.category, Category::kHardwareChange);
  EXPECT_EQ(f.cause, Cause::kHardware);
  EXPECT_EQ(f.evidence_text.at("change"), "GPU 8 x A100 -> 2 x V100; world size 8 -> 2 ranks");
  EXPECT_NEAR(f.impact_ms, 10, 1e-9);
}

// Rank 2 runs 3 more matmuls per step in TEST; with PEERS_WAIT_MS the others wait longer.
std::pair<std::vector<RankSummary>, std::vector<RankSummary>> StragglerRuns(double peers_wait_ms) {
  auto base = MakeRun(4, [](int) {
    return std::vector<FunctionPattern>{Fn("aten::mm", FunctionClass::kCompute, 20, 7),
                                        Fn("gloo:all_reduce", FunctionClass::kCollective, 5, 3)};
  });
  auto test = MakeRun(
      4,
      [peers_wait_ms](int r) {
        const bool slow = r == 2;
        return std::vector<FunctionPattern>{
            Fn("aten::mm", FunctionClass::kCompute, slow ? 30 : 20, slow ? 10 : 7),
            Fn("gloo:all_reduce", FunctionClass::kCollective, slow ? 5 : 5 + peers_wait_ms, 3)};
      },
      37);
  return {base, test};
}

TEST(RankChangesTest, EachRanksLargestComputeRiseAndItsWait) {
  auto [base, test] = StragglerRuns(10);
  const DiffInput in(base, test, kOptions, 27000, 37000);
  const std::map<int, RankChange> changes = RankChanges(in);
  ASSERT_EQ(changes.size(), 4u);
  EXPECT_EQ(changes.at(2).compute, 10000);
  EXPECT_EQ(changes.at(2).key, Key("aten::mm"));
  EXPECT_EQ(changes.at(2).wait, 0);
  EXPECT_EQ(changes.at(0).fn, nullptr);  // nothing rose
  EXPECT_EQ(changes.at(0).wait, 10000);
}

TEST(CrossRunStragglerTest, TheRankThatComputesMoreWhileItsPeersWait) {
  auto [base, test] = StragglerRuns(10);
  const DiffInput in(base, test, kOptions, 27000, 37000);
  std::set<std::string> echo;
  std::optional<Finding> f = CrossRunStraggler(in, &echo);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->category, Category::kStraggler);
  EXPECT_EQ(f->ranks, std::vector<int>{2});
  EXPECT_NEAR(f->impact_ms, 10, 1e-9);
  EXPECT_EQ(f->evidence.at("test_calls_per_iter"), 10);
  EXPECT_EQ(echo,
            (std::set<std::string>{Key("aten::mm"),
                                   Fn("gloo:all_reduce", FunctionClass::kCollective, 1).Key()}));
}

TEST(CrossRunStragglerTest, PeersWaitingInsideTheirBackwardAreNotTheStraggler) {
  // DDP on gloo: the peers wait for rank 2's gradients inside the Python backward, so their
  // run_backward rises (11 ms) more than rank 2's aten::mm (10 ms), their all-reduce beside it.
  auto base = MakeRun(4, [](int) {
    return std::vector<FunctionPattern>{Fn("aten::mm", FunctionClass::kCompute, 20, 7),
                                        Fn("run_backward", FunctionClass::kPython, 8, 1),
                                        Fn("gloo:all_reduce", FunctionClass::kCollective, 5, 3)};
  });
  auto test = MakeRun(
      4,
      [](int r) {
        const bool slow = r == 2;
        return std::vector<FunctionPattern>{
            Fn("aten::mm", FunctionClass::kCompute, slow ? 30 : 20, slow ? 10 : 7),
            Fn("run_backward", FunctionClass::kPython, slow ? 8 : 19, 1),
            Fn("gloo:all_reduce", FunctionClass::kCollective, slow ? 5 : 14, 3)};
      },
      37);
  const DiffInput in(base, test, kOptions, 27000, 37000);
  std::set<std::string> echo;
  std::optional<Finding> f = CrossRunStraggler(in, &echo);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks, std::vector<int>{2});
  ASSERT_FALSE(f->functions.empty());
  EXPECT_EQ(f->functions[0].name, "aten::mm");
  // Where the waiters wait is the straggler's echo, not a regression of its own.
  EXPECT_TRUE(echo.count(Fn("run_backward", FunctionClass::kPython, 1).Key()));
}

TEST(CrossRunStragglerTest, AStageOnlyFunctionIsComparedWithItsOwnStage) {
  // Recorded (a clean 2x2 pipeline in a slow spell of the VM): the stage-0 ranks' (0, 2)
  // <built-in method cat> rose 9.5 and 9 ms, the stage-1 ranks have none; all waited longer.
  // Rank 0 computes no more than its own stage's peer: no straggler (with the stage-1 ranks'
  // absent function counted as "no rise", rank 0 was named, 15% of the iteration).
  auto fns = [](int r, double cat_ms, double wait_ms) {
    std::vector<FunctionPattern> v = {
        Fn("gloo:all_reduce", FunctionClass::kCollective, wait_ms, 3)};
    if (r % 2 == 0) v.push_back(Fn("<built-in method cat>", FunctionClass::kCompute, cat_ms, 1));
    return v;
  };
  auto base = MakeRun(4, [&](int r) { return fns(r, 5, 5); });
  auto test = MakeRun(4, [&](int r) { return fns(r, r == 0 ? 14.5 : 14, r == 0 ? 5 : 28); }, 37);
  const DiffInput in(base, test, kOptions, 27000, 37000);
  std::set<std::string> echo;
  EXPECT_FALSE(CrossRunStraggler(in, &echo).has_value());
}

TEST(CrossRunStragglerTest, NobodyWaitingIsNoStraggler) {
  auto [base, test] = StragglerRuns(0);
  const DiffInput in(base, test, kOptions, 27000, 37000);
  std::set<std::string> echo;
  EXPECT_FALSE(CrossRunStraggler(in, &echo).has_value());
  EXPECT_TRUE(echo.empty());
  // One rank in common: no peers to wait.
  const std::vector<RankSummary> base1(base.begin(), base.begin() + 1),
      test1(test.begin(), test.begin() + 1);
  const DiffInput one(base1, test1, kOptions, 27000, 37000);
  EXPECT_FALSE(CrossRunStraggler(one, &echo).has_value());
}

TEST(ChangeThresholdTest, TheLargestFloorAndALowOneForNewFunctions) {
  auto fns = [](int) {
    return std::vector<FunctionPattern>{Fn("aten::mm", FunctionClass::kCompute, 20, 7)};
  };
  const auto base = MakeRun(2, fns);
  auto test = MakeRun(2, fns);
  test[0].functions.push_back(Fn("aten::nonzero", FunctionClass::kCompute, 0.05, 1));
  const DiffInput in(base, test, kOptions, 27000, 27000);
  // --min-impact: 5% of 27 ms, over 5% of 20 ms and 0.1 ms.
  EXPECT_DOUBLE_EQ(ChangeThreshold(in, in.keys.at(Key("aten::mm")), 20000), 1350);
  // New: 0.1% of the iteration, at least 10 us.
  EXPECT_DOUBLE_EQ(ChangeThreshold(in, in.keys.at(Key("aten::nonzero")), 0), 27);
}

TEST(FunctionChangeFindingTest, TimeOrCallsMustChangeEnough) {
  auto run = [](double mm_ms, double mm_calls, int slow_ranks) {
    return MakeRun(4, [=](int r) {
      return std::vector<FunctionPattern>{Fn("aten::mm", FunctionClass::kCompute,
                                             r < slow_ranks ? mm_ms : 20,
                                             r < slow_ranks ? mm_calls : 7)};
    });
  };
  const auto base = run(20, 7, 4);
  const SetupChange same;
  auto change = [&](const std::vector<RankSummary>& test) {
    const DiffInput in(base, test, kOptions, 27000, 27000);
    const KeyDiff& k = in.keys.at(Key("aten::mm"));
    return FunctionChangeFinding(in, same, k, MedianOver(k.base.self_by_rank, in.base_ranks),
                                 MedianOver(k.test.self_by_rank, in.test_ranks));
  };
  // 1 ms on every rank is under --min-impact.
  EXPECT_FALSE(change(run(21, 7, 4)).has_value());
  // Twice the calls count whatever the time.
  std::optional<Finding> calls = change(run(21, 14, 4));
  ASSERT_TRUE(calls.has_value());
  EXPECT_EQ(calls->category, Category::kRegression);
  EXPECT_EQ(calls->finding_class, FindingClass::kAll);
  EXPECT_EQ(calls->evidence_text.at("change"), "called 14.0 instead of 7.0 times per iteration");
  // Slower on three ranks of four: a subset, named by rank.
  std::optional<Finding> some = change(run(30, 7, 3));
  ASSERT_TRUE(some.has_value());
  EXPECT_EQ(some->finding_class, FindingClass::kSubset);
  EXPECT_EQ(some->ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(some->cause, Cause::kUnknown);
  std::optional<Finding> faster = change(run(10, 7, 4));
  ASSERT_TRUE(faster.has_value());
  EXPECT_EQ(faster->category, Category::kImprovement);
}

// Seen on CI, two clean 4-rank runs on 2 busy cores: DistributedDataParallel.forward 1.0 vs
// 2.4 ms/iter on ranks 0,2 was named as a subset; 3-4 of those ranks' 20 iterations held a
// descheduled process's timeslice (5-15 ms), their other iterations ran as fast as in BASE.
TEST(FunctionChangeFindingTest, AChangeInAFewIterationsIsNotTheFunctions) {
  // Per-iteration times (ms): 20 iterations at 0.75, the first SPIKES of them at SPIKE_MS.
  auto fn = [](double typical_ms, int spikes, double spike_ms) {
    std::vector<float> iters(20, static_cast<float>(typical_ms * 1000));
    for (int i = 0; i < spikes; ++i) iters[i] = static_cast<float>(spike_ms * 1000);
    double sum = 0;
    for (float v : iters) sum += v;
    FunctionPattern f = Fn("DistributedDataParallel.forward", FunctionClass::kOther, sum / 20000, 1,
                           trace::EventKind::kUserAnnotation);
    f.iter_us = std::move(iters);
    return f;
  };
  auto change = [&](const std::vector<RankSummary>& base, const std::vector<RankSummary>& test) {
    const DiffInput in(base, test, kOptions, 16000, 16000);
    const KeyDiff& k = in.keys.begin()->second;
    return FunctionChangeFinding(in, SetupChange{}, k,
                                 MedianOver(k.base.self_by_rank, in.base_ranks),
                                 MedianOver(k.test.self_by_rank, in.test_ranks));
  };
  const auto base = MakeRun(4, [&](int) { return std::vector<FunctionPattern>{fn(0.75, 0, 0)}; });
  // Ranks 0, 2 and 3 with 4 iterations of 10 ms: +1.85 ms/iter by their means, none by their
  // typical iteration.
  const auto spiky =
      MakeRun(4, [&](int r) { return std::vector<FunctionPattern>{fn(0.75, r == 1 ? 0 : 4, 10)}; });
  EXPECT_FALSE(change(base, spiky).has_value());
  // Without per-iteration times the means are all there is: ranks 0, 2 and 3 changed.
  auto no_iters = [](std::vector<RankSummary> run) {
    for (auto& r : run)
      for (auto& f : r.functions) f.iter_us.clear();
    return run;
  };
  std::optional<Finding> means = change(no_iters(base), no_iters(spiky));
  ASSERT_TRUE(means.has_value());
  EXPECT_EQ(means->ranks, (std::vector<int>{0, 2, 3}));
  // Every iteration of ranks 0 and 2 slower by 1.85 ms: their change, a subset.
  const auto steady = MakeRun(4, [&](int r) {
    return std::vector<FunctionPattern>{fn(r == 0 || r == 2 ? 2.6 : 0.75, 0, 0)};
  });
  std::optional<Finding> f = change(base, steady);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->finding_class, FindingClass::kSubset);
  EXPECT_EQ(f->ranks, (std::vector<int>{0, 2}));
  // Ranks 0 and 2 slower in every iteration, rank 3 in four: ranks 0 and 2.
  const auto mixed = MakeRun(4, [&](int r) {
    return std::vector<FunctionPattern>{r == 3 ? fn(0.75, 4, 10) : fn(r == 1 ? 0.75 : 2.6, 0, 0)};
  });
  f = change(base, mixed);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks, (std::vector<int>{0, 2}));
}

TEST(TypicalChangeOnTest, TheMedianIterationsChange) {
  auto run = [](std::vector<float> iters) {
    return MakeRun(1, [&](int) {
      FunctionPattern f = Fn("aten::mm", FunctionClass::kCompute, 1);
      f.iter_us = iters;
      return std::vector<FunctionPattern>{f};
    });
  };
  const auto base = run({700, 700, 700, 800}), test = run({700, 700, 800, 11600});
  const DiffInput in(base, test, kOptions, 16000, 16000);
  EXPECT_NEAR(*TypicalChangeOn(in.keys.begin()->second, 0), 50, 1e-3);
  EXPECT_FALSE(TypicalChangeOn(in.keys.begin()->second, 1).has_value());  // no such rank
  // Absent from most iterations of a run (a step every few iterations): no typical iteration.
  const auto sparse = run({0, 0, 0, 3000});
  const DiffInput in2(base, sparse, kOptions, 16000, 16000);
  EXPECT_FALSE(TypicalChangeOn(in2.keys.begin()->second, 0).has_value());
}

// Seen on CI, two clean runs: gloo:all_reduce 10.3 -> 12.7 ms on ranks 0,2,3 was named as a
// subset; those ranks waited longer in it for rank 1, which is no fault of theirs.
TEST(FunctionChangeFindingTest, ACollectiveSlowerOnSomeRanksIsTheirWaitNotTheirFault) {
  auto run = [](double ms, int slow_ranks) {
    return MakeRun(4, [=](int r) {
      return std::vector<FunctionPattern>{
          Fn("gloo:all_reduce", FunctionClass::kCollective, r < slow_ranks ? ms : 10.3, 1)};
    });
  };
  const auto base = run(10.3, 4), test = run(12.7, 3);
  const DiffInput in(base, test, kOptions, 17900, 18700);
  const KeyDiff& k = in.keys.begin()->second;
  std::optional<Finding> f =
      FunctionChangeFinding(in, SetupChange{}, k, MedianOver(k.base.self_by_rank, in.base_ranks),
                            MedianOver(k.test.self_by_rank, in.test_ranks));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->finding_class, FindingClass::kAll);
  EXPECT_EQ(f->ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(f->summary.find("on ranks 0-2, which wait longer in it for a later peer"),
            std::string::npos)
      << f->summary;
}

TEST(CapNewOrGoneTest, KeepsTheBiggestAndCountsTheRest) {
  Diagnosis d;
  for (int k = 1; k <= 25; ++k) {
    Finding f;
    f.impact_ms = k;
    f.evidence_text["change"] = k % 2 ? "new in TEST" : "gone in TEST";
    d.findings.push_back(f);
  }
  Finding other;
  other.impact_ms = 0.5;
  other.evidence_text["change"] = "same number of calls, each call takes a different time";
  d.findings.push_back(other);
  CapNewOrGone(&d);
  ASSERT_EQ(d.findings.size(), 21u);
  EXPECT_EQ(d.findings.front().impact_ms, 6);  // 1-5 dropped, the order kept
  EXPECT_EQ(d.findings.back().impact_ms, 0.5);
  ASSERT_EQ(d.job.notes.size(), 1u);
  EXPECT_EQ(d.job.notes[0], "5 more functions appear in only one of the runs");
  Diagnosis few;
  few.findings.assign(20, d.findings.front());
  CapNewOrGone(&few);
  EXPECT_EQ(few.findings.size(), 20u);
  EXPECT_TRUE(few.job.notes.empty());
}

TEST(SpreadSlowdownFindingTest, TheIterationWhenNoFunctionExplainsIt) {
  const auto side = MakeRun(2, [](int) { return std::vector<FunctionPattern>{}; });
  const DiffInput in(side, side, kOptions, 20000, 30000);
  const FunctionPattern a = Fn("a", FunctionClass::kCompute, 1),
                        b = Fn("b", FunctionClass::kCompute, 1);
  std::vector<std::pair<double, const FunctionPattern*>> contributors = {{1000, &a}, {3000, &b}};
  std::optional<Finding> f = SpreadSlowdownFinding(in, SetupChange{}, contributors, 2000);
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->impact_ms, 8, 1e-9);  // 10 ms slower, 2 explained
  ASSERT_EQ(f->functions.size(), 2u);
  EXPECT_EQ(f->functions[0].name, "b");
  // Half of it explained: the regressions say it.
  EXPECT_FALSE(SpreadSlowdownFinding(in, SetupChange{}, contributors, 5000).has_value());
  // A different setup explains it.
  SetupChange world;
  world.world = true;
  EXPECT_FALSE(SpreadSlowdownFinding(in, world, contributors, 0).has_value());
}

}  // namespace
}  // namespace perftracker::diagnose::internal::diff
