#include "server/rank_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace perftracker::server {
namespace {

TEST(RankStateTest, StatisticsOfTheTimesAdded) {
  RankState r;
  EXPECT_EQ(r.Stats().count, 0);
  for (double ms : {30.0, 10.0, 20.0, 40.0}) r.Add(ms);
  const diagnose::IterationStats s = r.Stats();
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean_ms, 25);
  EXPECT_DOUBLE_EQ(s.min_ms, 10);
  EXPECT_DOUBLE_EQ(s.max_ms, 40);
  EXPECT_DOUBLE_EQ(s.p50_ms, 30);  // the sorted sample's element at 0.5 x 4
  EXPECT_DOUBLE_EQ(s.p99_ms, 40);
  EXPECT_DOUBLE_EQ(r.last_ms, 40);
  EXPECT_TRUE(r.series_steps.empty());  // Add alone keeps no series
}

TEST(RankStateTest, SeriesHoldsBucketMeansWithTheOpenBucket) {
  RankState r;
  r.AddStep(0, 10);
  r.AddStep(1, 20);
  r.AddStep(2, 30);
  EXPECT_THAT(r.series_steps, testing::ElementsAre(0, 1));
  const report::RunSeries s = r.Series(7);
  EXPECT_EQ(s.rank, 7);
  EXPECT_THAT(s.steps, testing::ElementsAre(0, 1, 2));
  EXPECT_THAT(s.ms, testing::ElementsAre(10, 20, 30));
  EXPECT_EQ(r.Stats().count, 3);
}

TEST(RankStateTest, AFullSeriesMergesNeighboursAndDoublesTheStride) {
  RankState r;
  for (int64_t step = 0; step <= static_cast<int64_t>(RankState::kMaxSeriesPoints); ++step) {
    r.AddStep(step, static_cast<double>(step % 2 == 0 ? 10 : 30));
  }
  EXPECT_EQ(r.stride, 2);
  ASSERT_EQ(r.series_steps.size(), RankState::kMaxSeriesPoints / 2);
  EXPECT_EQ(r.series_steps[1], 2);
  EXPECT_FLOAT_EQ(r.series_ms[1], 20);
  // Steps now go into buckets of two.
  r.AddStep(RankState::kMaxSeriesPoints + 1, 50);
  const report::RunSeries s = r.Series(0);
  EXPECT_EQ(s.steps.back(), static_cast<int64_t>(RankState::kMaxSeriesPoints));
  EXPECT_FLOAT_EQ(s.ms.back(), (10 + 50) / 2.0f);
}

TEST(RankStateTest, ReservoirKeepsMemoryFlat) {
  RankState r;
  for (size_t i = 0; i < RankState::kMaxSamples + 1000; ++i) r.Add(1.0);
  EXPECT_EQ(r.samples.size(), RankState::kMaxSamples);
  EXPECT_EQ(r.Stats().count, static_cast<int64_t>(RankState::kMaxSamples + 1000));
}

}  // namespace
}  // namespace perftracker::server
