#include "server/job_history.h"

#include <gtest/gtest.h>

#include "diagnose/policy.h"

namespace perftracker::server {
namespace {

namespace policy = diagnose::policy;

TEST(JobHistory, EachStepIsTheMeanOverItsRanksWithoutWarmUpOrWindows) {
  JobHistory h;
  for (int step = 0; step < 60; ++step) {
    h.Add(step, 70);
    h.Add(step, 80);
  }
  h.ExcludeWindow(30, 10);  // 30..39 and the 5 after
  const std::vector<diagnose::IterationPoint> p = h.Points();
  const int64_t warm = static_cast<int64_t>(policy::kHealthyWarmupIterations);
  const int64_t after = static_cast<int64_t>(policy::kHealthyAfterWindow);
  ASSERT_EQ(p.size(), static_cast<size_t>(60 - warm - 10 - after));
  EXPECT_EQ(p.front().step, warm);
  EXPECT_DOUBLE_EQ(p.front().ms, 75);
  for (const auto& x : p) EXPECT_FALSE(x.step >= 30 && x.step < 40 + after) << x.step;
  // Before a window's start only.
  EXPECT_EQ(h.Points(30).back().step, 29);
}

TEST(JobHistory, ALongRunStaysBoundedAndKeepsItsShape) {
  JobHistory h;
  for (int step = 0; step < 50000; ++step) h.Add(step, step < 30000 ? 70 : 100);
  EXPECT_LE(h.steps(), JobHistory::kMaxSteps);
  const std::vector<diagnose::IterationPoint> p = h.Points();
  EXPECT_LE(p.size(), JobHistory::kMaxPoints);
  const auto rate = diagnose::FindHealthyRate(p);
  ASSERT_TRUE(rate && rate->slowdown_step);
  EXPECT_NEAR(static_cast<double>(*rate->slowdown_step), 30000, 200);
  EXPECT_DOUBLE_EQ(rate->healthy.ms, 70);
  EXPECT_DOUBLE_EQ(rate->recent.ms, 100);
}

TEST(JobHistory, ANewAttemptStartsAnew) {
  JobHistory h;
  for (int step = 0; step < 40; ++step) h.Add(step, 70);
  h.Reset();
  EXPECT_TRUE(h.Points().empty());
}

}  // namespace
}  // namespace perftracker::server
