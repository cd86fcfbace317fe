#include "pattern/rank_runs.h"

#include <gtest/gtest.h>

#include <vector>

namespace perftracker::pattern {
namespace {

std::vector<RankRun> Runs(const std::vector<int>& ranks) {
  std::vector<RankRun> out;
  ForEachRankRun(ranks, [&](const RankRun& r) { out.push_back(r); });
  return out;
}

TEST(RankRunsTest, AProgressionIsOneRunAndAnythingElseStillSplits) {
  std::vector<int> dp;
  for (int r = 3; r < 100000; r += 20) dp.push_back(r);
  auto runs = Runs(dp);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].start, 3);
  EXPECT_EQ(runs[0].stride, 20);
  EXPECT_EQ(runs[0].length, dp.size());

  runs = Runs({0, 20, 40, 60, 7});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].length, 4u);
  EXPECT_EQ(runs[1].start, 7);
  EXPECT_EQ(runs[1].stride, 0);
  EXPECT_EQ(runs[1].length, 1u);

  // Unordered and repeated ranks, and the extremes of int: steps are taken in 64 bits.
  runs = Runs({5, 5, 5, 2, INT32_MIN, INT32_MAX});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].stride, 0);
  EXPECT_EQ(runs[0].length, 3u);
  EXPECT_EQ(runs[1].start, 2);
  EXPECT_EQ(runs[1].length, 2u);
  EXPECT_EQ(runs[2].start, INT32_MAX);
  EXPECT_EQ(runs[2].length, 1u);
  EXPECT_EQ(runs[1].stride, int64_t{INT32_MIN} - 2);
  EXPECT_TRUE(Runs({}).empty());
}

}  // namespace
}  // namespace perftracker::pattern
