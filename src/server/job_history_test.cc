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

TEST(JobHistory, TheLatestStepsAreOneByOneBeforeTheWindow) {
  JobHistory h;
  for (int step = 0; step < 10000; ++step) h.Add(step, step < 9970 ? 70 : 100);
  h.ExcludeWindow(9990, 3);  // 9990..9992 and the 5 after
  // Points averages a long run into buckets; the latest steps stay one by one.
  const std::vector<diagnose::IterationPoint> l = h.Latest(9990, 10);
  ASSERT_EQ(l.size(), 10u);
  EXPECT_EQ(l.front().step, 9980);
  EXPECT_EQ(l.back().step, 9989);
  for (const auto& x : l) EXPECT_DOUBLE_EQ(x.ms, 100);
  // Past the window: its iterations and the few after are left out.
  const std::vector<diagnose::IterationPoint> all = h.Latest(-1, 10);
  ASSERT_EQ(all.size(), 10u);
  EXPECT_EQ(all.front().step, 9982);
  EXPECT_EQ(all[7].step, 9989);
  EXPECT_EQ(all[8].step, 9998);
  EXPECT_EQ(all.back().step, 9999);
  EXPECT_TRUE(JobHistory().Latest(-1, 10).empty());
}

TEST(JobHistory, ANewAttemptStartsAnew) {
  JobHistory h;
  for (int step = 0; step < 40; ++step) h.Add(step, 70);
  h.Reset();
  EXPECT_TRUE(h.Points().empty());
}

}  // namespace
}  // namespace perftracker::server
