#include "pattern/iteration_breakdown.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace perftracker::pattern {
namespace {

std::vector<IterLanes> Iterations(size_t n) { return std::vector<IterLanes>(n); }

TEST(IterationBreakdownTest, LanesSplitOpsByClass) {
  IterLanes d;
  d.Add({0, 1}, FunctionClass::kCompute);
  d.Add({1, 2}, FunctionClass::kCollective);
  d.Add({2, 3}, FunctionClass::kMemcpy);
  d.Add({3, 4}, FunctionClass::kOther);
  EXPECT_EQ(d.busy.size(), 4u);
  EXPECT_EQ(d.comm.size(), 1u);
  EXPECT_EQ(d.copy.size(), 1u);
  ASSERT_EQ(d.compute.size(), 2u);  // everything that is neither communication nor a copy
  EXPECT_EQ(d.compute[1].begin, 3);
}

TEST(IterationBreakdownTest, ACutLastIterationIsExcluded) {
  RankSummary s;
  const std::vector<size_t> steady =
      SplitSteadyIterations({100, 100, 100, 100, 10}, {4, 5, 6, 7, 8}, false, true, &s);
  EXPECT_THAT(steady, testing::ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(s.iteration_ms, testing::ElementsAre(100, 100, 100, 100));
  EXPECT_THAT(s.iteration_steps, testing::ElementsAre(4, 5, 6, 7));
  ASSERT_EQ(s.excluded_iterations.size(), 1u);
  const ExcludedIteration& e = s.excluded_iterations[0];
  EXPECT_EQ(e.reason, ExcludedIteration::kPartial);
  EXPECT_EQ(e.step, 8);
  EXPECT_EQ(e.index, 4);
  EXPECT_EQ(e.ms, 10);
}

TEST(IterationBreakdownTest, AWholeWindowIsAlwaysSteadyAndStepsMayBeMissing) {
  RankSummary s;
  EXPECT_THAT(SplitSteadyIterations({100, 100, 100, 10}, {}, true, true, &s),
              testing::ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(s.iteration_steps.empty());
  EXPECT_TRUE(s.excluded_iterations.empty());
  RankSummary cut;
  SplitSteadyIterations({100, 100, 100, 10}, {}, false, true, &cut);
  ASSERT_EQ(cut.excluded_iterations.size(), 1u);
  EXPECT_EQ(cut.excluded_iterations[0].step, -1);
}

TEST(IterationBreakdownTest, WithoutWarmupOnlyPartialIterationsAreLeftOut) {
  // A first iteration 2.3x the others is warm-up; a window's torch trace keeps it (its Python
  // trace decides the window's iterations: pattern/merge.h), and still leaves out a cut one.
  const std::vector<double> ms = {230, 100, 101, 99, 100, 100, 10};
  RankSummary judged, kept;
  EXPECT_THAT(SplitSteadyIterations(ms, {}, false, true, &judged),
              testing::ElementsAre(1, 2, 3, 4, 5));
  ASSERT_EQ(judged.excluded_iterations.size(), 2u);
  EXPECT_EQ(judged.excluded_iterations[0].reason, ExcludedIteration::kWarmup);
  EXPECT_THAT(SplitSteadyIterations(ms, {}, false, false, &kept),
              testing::ElementsAre(0, 1, 2, 3, 4, 5));
  ASSERT_EQ(kept.excluded_iterations.size(), 1u);
  EXPECT_EQ(kept.excluded_iterations[0].reason, ExcludedIteration::kPartial);
}

TEST(IterationBreakdownTest, DeviceTotalsOverSteadyIterations) {
  std::vector<IterLanes> its = Iterations(3);
  its[0].Add({5, 15}, FunctionClass::kCollective);  // unsorted on purpose: merged in place
  its[0].Add({0, 10}, FunctionClass::kCompute);
  its[1].Add({20, 24}, FunctionClass::kMemcpy);
  its[2].Add({40, 41}, FunctionClass::kCompute);
  const LaneTotals t = SumDeviceLanes(&its, {0, 1});
  EXPECT_DOUBLE_EQ(t.busy, 15 + 4);
  // Step 0 spans [0, 20) (up to step 1's first op), step 1 [20, 40): 40 covered, 19 busy.
  EXPECT_DOUBLE_EQ(t.idle, 40 - 19);
  EXPECT_DOUBLE_EQ(t.compute, 10);
  EXPECT_DOUBLE_EQ(t.comm, 10);
  EXPECT_DOUBLE_EQ(t.copy, 4);
  EXPECT_DOUBLE_EQ(t.overlap, 5);
  ASSERT_EQ(t.busy_intervals.size(), 2u);
  EXPECT_EQ(t.busy_intervals[0].begin, 0);
  EXPECT_EQ(t.busy_intervals[0].end, 15);
  EXPECT_EQ(its[0].busy.front().begin, 0);  // each iteration merged and sorted
}

TEST(IterationBreakdownTest, CommunicationUnderTheNextStepsComputeIsHidden) {
  std::vector<IterLanes> its = Iterations(2);
  its[0].Add({0, 10}, FunctionClass::kCompute);
  its[0].Add({10, 30}, FunctionClass::kCollective);
  its[1].Add({20, 40}, FunctionClass::kCompute);
  const LaneTotals t = SumDeviceLanes(&its, {0, 1});
  EXPECT_DOUBLE_EQ(t.busy, 40);  // not 50: steps merged
  EXPECT_DOUBLE_EQ(t.idle, 0);
  EXPECT_DOUBLE_EQ(t.overlap, 10);
  // The last step with GPU work ends at its own last op.
  EXPECT_DOUBLE_EQ(SumDeviceLanes(&its, {1}).idle, 0);
}

TEST(IterationBreakdownTest, GpuMeansAreOverStepsAndDevices) {
  DeviceLanes lanes;
  lanes[0] = Iterations(2);
  lanes[0][0].Add({0, 10}, FunctionClass::kCompute);
  lanes[0][1].Add({10, 30}, FunctionClass::kCollective);
  lanes[1] = Iterations(2);
  lanes[1][0].Add({5, 25}, FunctionClass::kMemcpy);
  const GpuBreakdown g = BreakDownGpu(&lanes, {0, 1});
  EXPECT_DOUBLE_EQ(g.busy_us, (30 + 20) / 4.0);
  EXPECT_DOUBLE_EQ(g.compute_us, 10 / 4.0);
  EXPECT_DOUBLE_EQ(g.comm_us, 20 / 4.0);
  EXPECT_DOUBLE_EQ(g.memcpy_us, 20 / 4.0);
  EXPECT_DOUBLE_EQ(g.overlap_us, 0);
  ASSERT_EQ(g.all_busy.size(), 1u);  // both devices' busy time, merged
  EXPECT_EQ(g.all_busy[0].begin, 0);
  EXPECT_EQ(g.all_busy[0].end, 30);
}

TEST(IterationBreakdownTest, CpuCriticalIsMainThreadWorkWithTheGpuIdle) {
  const std::vector<Interval> cpu = {{0, 10}, {20, 30}};
  const std::vector<Interval> gpu = {{4, 6}, {20, 30}};
  const std::vector<double> start = {0, 15}, end = {15, 40};
  EXPECT_DOUBLE_EQ(CpuCriticalUs(cpu, gpu, {0}, start, end), 8);
  EXPECT_DOUBLE_EQ(CpuCriticalUs(cpu, gpu, {1}, start, end), 0);
  EXPECT_DOUBLE_EQ(CpuCriticalUs(cpu, gpu, {0, 1}, start, end), 4);
  // Only work inside the steady iterations counts.
  EXPECT_DOUBLE_EQ(CpuCriticalUs(cpu, {}, {0}, {2}, {5}), 3);
}

}  // namespace
}  // namespace perftracker::pattern
