#include "diagnose/cost_bound.h"

#include <gtest/gtest.h>

#include <random>

#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

Finding MoreWork(int rank, double impact_ms, double own_ms, double peers_ms) {
  Finding f;
  f.category = Category::kMoreWork;
  f.ranks = {rank};
  f.impact_ms = impact_ms;
  f.summary = "more work";
  f.evidence["own_work_ms"] = own_ms;
  f.evidence["peers_own_work_ms"] = peers_ms;
  return f;
}

TEST(CostBound, NoFindingClaimsMoreThanTheIteration) {
  // Recorded (a 2-stage x 2 pipeline on a busy host): rank 1's gloo:all_reduce inputs twice
  // its "peers'" (ranks of the other stage), "431 ms/iter more" on a 260 ms iteration.
  Diagnosis d;
  Finding f;
  f.category = Category::kMoreWork;
  f.ranks = {1};
  f.impact_ms = 431;
  f.summary = "rank 1 does more work";
  d.findings = {f};
  BoundCosts({260, std::nullopt, {}, std::nullopt}, &d);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, 260);
  EXPECT_DOUBLE_EQ(d.findings[0].evidence.at("claimed_ms"), 431);
  EXPECT_NE(d.findings[0].evidence_text.at("cost_bound").find("whole iteration"),
            std::string::npos);
}

TEST(CostBound, ARankThatComputesMoreCostsItsOwnExcessAtMost) {
  Diagnosis d;
  d.findings = {MoreWork(2, 30.4, 80, 60)};  // 20 ms of own work more than its peers
  BoundCosts({100, std::nullopt, {}, std::nullopt}, &d);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, policy::kCostSlack * 20);
}

TEST(CostBound, ARankTheSchedulerHoldsBackCostsItsOwnExcessAtMost) {
  Finding f = MoreWork(0, 11.7, 61, 60);  // in step with its peers: 1 ms more own work
  f.category = Category::kCpuContention;
  const std::optional<CostLimit> limit = LimitOf(f, {60, std::nullopt, {}, std::nullopt});
  ASSERT_TRUE(limit.has_value());
  EXPECT_DOUBLE_EQ(limit->ms, policy::kCostSlack * 1);
  EXPECT_EQ(OwnWorkExcessMs(f), 1);
  f.evidence.clear();
  EXPECT_FALSE(OwnWorkExcessMs(f).has_value());
}

TEST(CostBound, ANewProblemCostsTheRiseOverTheHealthyRateAtMost) {
  // The iteration rose 19.3 ms over the healthy rate; the straggler's rule said 30.4.
  Diagnosis d;
  d.findings = {MoreWork(2, 30.4, 100, 60)};
  d.findings[0].category = Category::kStraggler;
  BoundCosts({105, 19.3, {}, std::nullopt}, &d);
  EXPECT_NEAR(d.findings[0].impact_ms, policy::kCostSlack * 19.3, 1e-9);
  // The same rank named by the clean baseline window already: present while healthy.
  Diagnosis before;
  before.findings = {MoreWork(2, 30.4, 100, 60)};
  before.findings[0].category = Category::kStraggler;
  BoundCosts({105, 19.3, {{Category::kStraggler, 2}}, std::nullopt}, &before);
  EXPECT_DOUBLE_EQ(before.findings[0].impact_ms, 30.4);
}

TEST(CostBound, AChangeSinceTheBaselineCostsTheJobsUnprofiledRiseAtMost) {
  // Recorded (CI, torch 2.13, a clean 4-rank job): run_backward 12.9 -> 18.2 ms/iter on every
  // rank in the profiled windows while the job's unprofiled iterations stayed at its healthy
  // rate.
  Finding f;
  f.finding_class = FindingClass::kAll;
  f.category = Category::kRegression;
  f.ranks = {0, 1, 2, 3};
  f.impact_ms = 5.3;
  f.summary = "run_backward is slower";
  f.evidence["baseline_window"] = 1;
  Diagnosis d;
  d.findings = {f};
  BoundCosts({21.9, std::nullopt, {}, 0.3}, &d);
  EXPECT_TRUE(d.findings.empty());
  ASSERT_EQ(d.job.notes.size(), 1u);
  EXPECT_NE(d.job.notes[0].find("unprofiled iterations before this window ran 0.3 ms"),
            std::string::npos)
      << d.job.notes[0];
  // A rise the latest iterations show bounds it; without one it keeps its rule's figure.
  d.findings = {f};
  BoundCosts({21.9, std::nullopt, {}, 3.0}, &d);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, policy::kCostSlack * 3.0);
  d.findings = {f};
  BoundCosts({21.9, std::nullopt, {}, std::nullopt}, &d);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, 5.3);
  // A finding of the peer comparison is not bounded by it.
  f.evidence.clear();
  d.findings = {f};
  BoundCosts({21.9, std::nullopt, {}, 0.3}, &d);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, 5.3);
}

TEST(CostBound, AFindingWhoseBoundIsTooSmallIsDroppedWithANote) {
  Diagnosis d;
  d.findings = {MoreWork(2, 30, 60.1, 60)};
  BoundCosts({100, std::nullopt, {}, std::nullopt}, &d);
  EXPECT_TRUE(d.findings.empty());
  ASSERT_EQ(d.job.notes.size(), 1u);
  EXPECT_NE(d.job.notes[0].find("dropped: \"more work\" claimed 30.0 ms"), std::string::npos)
      << d.job.notes[0];
}

TEST(CostBound, TheLargestOwnWorkTotalBoundsTheCost) {
  // Recorded (4-rank DDP online, rank 2's batch 8x its peers'): the peers' backward frames held
  // their wait for rank 2's buckets, so the Python self totals differ by 0.2 ms while rank 2's
  // CPU ops took 11.8 ms more. The op total bounds the cost; the frames' alone would drop it.
  Diagnosis d;
  d.findings = {MoreWork(2, 11.8, 60.2, 60)};
  d.findings[0].evidence["own_op_work_ms"] = 40.5;
  d.findings[0].evidence["peers_own_op_work_ms"] = 28.0;
  BoundCosts({80, std::nullopt, {}, std::nullopt}, &d);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, 11.8);
  // Without the op total the same finding is dropped: the test fails if the op total is ignored.
  Diagnosis frames_only;
  frames_only.findings = {MoreWork(2, 11.8, 60.2, 60)};
  BoundCosts({80, std::nullopt, {}, std::nullopt}, &frames_only);
  EXPECT_TRUE(frames_only.findings.empty());
}

TEST(CostBound, TheProcessCpuTimeBoundsTheCostWhereOpsHoldPreemption) {
  // Recorded (CI, 4 DDP ranks on 2 cores, torchrun's restarted attempt): rank 2 runs 8 extra
  // matrix multiplies a step (4.9 ms/iter, none on its peers); its ops' wall time matched its
  // peers' (6.37 vs 6.36 ms: the peers' ops held preemption) and the finding was dropped, while
  // its process ran 12.0 ms of CPU an iteration against its peers' 7.3.
  Finding f = MoreWork(2, 4.9, 63.87, 63.76);
  f.category = Category::kStraggler;
  f.evidence["own_op_work_ms"] = 6.37;
  f.evidence["peers_own_op_work_ms"] = 6.36;
  Diagnosis ops_only;
  ops_only.findings = {f};
  BoundCosts({61.8, std::nullopt, {}, std::nullopt}, &ops_only);
  EXPECT_TRUE(ops_only.findings.empty());
  f.evidence["own_cpu_time_ms"] = 12.0;
  f.evidence["peers_own_cpu_time_ms"] = 7.3;
  EXPECT_NEAR(*OwnWorkExcessMs(f), 4.7, 1e-9);
  Diagnosis d;
  d.findings = {f};
  BoundCosts({61.8, std::nullopt, {}, std::nullopt}, &d);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, 4.9);
}

TEST(CostBound, ASlowerLoaderCostsItsOwnExcessAtMost) {
  // Recorded (test_torchrun, two nodes on one busy 2-core host): rank 1's DataLoader took 5.3
  // ms/iter more than its peers' while its ops and CPU time exceeded theirs by 1.6 and 0.3 ms and
  // its peers waited no longer for it; it was ranked above the real straggler (5.35 ms).
  Finding noise = MoreWork(1, 5.34, 66.72, 67.34);
  noise.category = Category::kDataLoader;
  noise.finding_class = FindingClass::kSubset;
  noise.evidence["own_op_work_ms"] = 8.87;
  noise.evidence["peers_own_op_work_ms"] = 7.28;
  noise.evidence["own_cpu_time_ms"] = 8.28;
  noise.evidence["peers_own_cpu_time_ms"] = 8.03;
  // A loader 12 ms slower (test_online_run): its wait is in the ops' total (the DataLoader's
  // annotation), 12.1 ms over its peers'.
  Finding slow = MoreWork(1, 12.38, 58.29, 58.14);
  slow.category = Category::kDataLoader;
  slow.finding_class = FindingClass::kSubset;
  slow.evidence["own_op_work_ms"] = 16.69;
  slow.evidence["peers_own_op_work_ms"] = 4.63;
  Diagnosis d;
  d.findings = {noise, slow};
  BoundCosts({65.5, std::nullopt, {}, std::nullopt}, &d);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, 12.38);
  ASSERT_EQ(d.job.notes.size(), 1u);
  EXPECT_NE(d.job.notes[0].find("exceeds its peers' by 1.6 ms"), std::string::npos)
      << d.job.notes[0];
}

TEST(CostBound, ARankNobodyWaitsForCostsNothing) {
  // Recorded (CI, a clean 4-rank job on 2 cores, its second window): "rank 0 is a straggler:
  // aten::mm takes 9.2 ms/iter vs 1.6 ms on its peers; the job loses 7.6 ms/iter", while its
  // iteration and CPU time matched its peers', they waited no longer for it, and it arrived at the
  // collectives first (it waited the longest there).
  Finding f = MoreWork(0, 7.6, 25.2078, 25.2146);
  f.category = Category::kStraggler;
  f.finding_class = FindingClass::kSubset;
  f.evidence["own_op_work_ms"] = 13.43;
  f.evidence["peers_own_op_work_ms"] = 9.31;
  f.evidence["own_cpu_time_ms"] = 7.70;
  f.evidence["peers_own_cpu_time_ms"] = 7.82;
  f.evidence["peers_extra_collective_wait_ms"] = 0;
  Diagnosis d;
  d.job.iteration_ms_median = 21.35;
  d.arrivals.replayable = true;
  for (int r = 0; r < 4; ++r) d.arrivals.ranks.push_back({r, 0, r == 0 ? 9.0 : 5.0, true});
  const Diagnosis before = d;
  d.findings = {f};
  BoundCosts({21.35, 3.3, {}, std::nullopt}, &d);
  EXPECT_TRUE(d.findings.empty());
  ASSERT_EQ(d.job.notes.size(), 1u);
  EXPECT_NE(d.job.notes[0].find("its peers wait no longer for it"), std::string::npos)
      << d.job.notes[0];
  // A rank that runs more CPU than its peers, or that its peers wait for, is kept.
  Finding computes = f;
  computes.evidence["own_cpu_time_ms"] = 12.0;
  Finding waited_for = f;
  waited_for.evidence["peers_extra_collective_wait_ms"] = 3.1;
  for (const Finding& g : {computes, waited_for}) {
    Diagnosis kept = before;
    kept.findings = {g};
    BoundCosts({21.35, 3.3, {}, std::nullopt}, &kept);
    EXPECT_EQ(kept.findings.size(), 1u);
  }
}

TEST(CostBound, FindingsAreRankedByTheirBoundedCost) {
  Diagnosis d;
  Finding loader;
  loader.category = Category::kDataLoader;
  loader.ranks = {2};
  loader.impact_ms = 40;
  d.findings = {MoreWork(1, 431, 305, 290), loader};  // 431 claimed, 18.75 counted
  BoundCosts({260, std::nullopt, {}, std::nullopt}, &d);
  ASSERT_EQ(d.findings.size(), 2u);
  EXPECT_EQ(d.findings[0].category, Category::kDataLoader);
  EXPECT_NEAR(d.findings[1].impact_ms, 18.75, 1e-9);
}

TEST(CostBound, SilentRanksHangsAndLeaksAreNotBounded) {
  Diagnosis d;
  Finding hang;
  hang.category = Category::kHang;
  hang.impact_ms = 1e6;
  d.findings = {hang};
  BoundCosts({100, 5, {}, std::nullopt}, &d);
  EXPECT_DOUBLE_EQ(d.findings[0].impact_ms, 1e6);
}

// Property: over generated windows, every finding kept claims no more than its limit, none is
// kept under the size a finding must have once bounded, and the order is by bounded cost.
TEST(CostBound, GeneratedWindowsAddUp) {
  std::mt19937 gen(36);
  std::uniform_real_distribution<double> u(0, 1);
  const Category cats[] = {Category::kStraggler,  Category::kMoreWork,     Category::kDataLoader,
                           Category::kRegression, Category::kCpuThrottled, Category::kSync};
  for (int round = 0; round < 500; ++round) {
    CostBudget b;
    b.iteration_ms = 20 + 300 * u(gen);
    if (u(gen) < 0.5) b.rise_ms = b.iteration_ms * u(gen) * 0.5;
    Diagnosis d;
    const int n = 1 + static_cast<int>(u(gen) * 6);
    for (int i = 0; i < n; ++i) {
      Finding f = MoreWork(i, b.iteration_ms * 2 * u(gen), 100 * u(gen), 100 * u(gen));
      f.category = cats[static_cast<size_t>(u(gen) * 6) % 6];
      f.finding_class = u(gen) < 0.3 ? FindingClass::kAll : FindingClass::kSubset;
      if (u(gen) < 0.5) b.before_rise.insert({f.category, i});
      d.findings.push_back(f);
    }
    BoundCosts(b, &d);
    const double floor_ms = std::max(policy::kMinAbsMs, policy::kMinFraction * b.iteration_ms);
    for (size_t k = 0; k < d.findings.size(); ++k) {
      const Finding& f = d.findings[k];
      const std::optional<CostLimit> limit = LimitOf(f, b);
      ASSERT_TRUE(limit);
      EXPECT_LE(f.impact_ms, limit->ms + 1e-9) << "round " << round;
      EXPECT_LE(f.impact_ms, b.iteration_ms + 1e-9);
      if (f.evidence.count("claimed_ms")) {
        EXPECT_GE(f.impact_ms, floor_ms - 1e-9);
      }
      if (k > 0 && f.confidence == d.findings[k - 1].confidence) {
        EXPECT_LE(f.impact_ms, d.findings[k - 1].impact_ms + 1e-9);
      }
    }
  }
}

}  // namespace
}  // namespace perftracker::diagnose
