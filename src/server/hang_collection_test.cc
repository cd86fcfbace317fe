#include "server/hang_collection.h"

#include <gtest/gtest.h>

#include <chrono>

#include "base/window_defaults.h"

namespace perftracker::server {
namespace {

diagnose::RankStacks Stacks(int rank) {
  diagnose::RankStacks s;
  s.rank = rank;
  return s;
}

TEST(HangCollectionTest, TheStallAtTheTriggerIsTheDetectorsThreshold) {
  // 5 x 1 s means: 5 s. 5 x 10 ms is under the floor: the floor.
  EXPECT_DOUBLE_EQ(HangCollection::StalledAtTrigger(1000), window_defaults::kHangFactor * 1.0);
  EXPECT_DOUBLE_EQ(HangCollection::StalledAtTrigger(10), window_defaults::kHangMinSeconds);
  EXPECT_DOUBLE_EQ(HangCollection::StalledAtTrigger(0), 0);  // no mean: unknown
}

TEST(HangCollectionTest, CompleteOnceEveryExpectedRankReplied) {
  HangCollection h;
  h.expected = {0, 1, 2};
  EXPECT_FALSE(h.AddReply(Stacks(2)));
  EXPECT_FALSE(h.AddReply(Stacks(0)));
  EXPECT_FALSE(h.AddReply(Stacks(0)));  // again: still one missing
  EXPECT_TRUE(h.AddReply(Stacks(1)));
  ASSERT_EQ(h.Replies().size(), 3u);
  EXPECT_EQ(h.Replies()[0].rank, 0);  // in rank order
  EXPECT_EQ(h.Replies()[2].rank, 2);
}

TEST(HangCollectionTest, ARankNotExpectedIsExpectedOnceItReplied) {
  HangCollection h;
  h.expected = {0};
  EXPECT_FALSE(h.AddReply(Stacks(5)));  // rank 0 still missing
  EXPECT_EQ(h.expected.count(5), 1u);
  EXPECT_TRUE(h.AddReply(Stacks(0)));
}

TEST(HangCollectionTest, StalledSecondsGrowFromTheTrigger) {
  HangCollection h;
  h.since = HangCollection::Clock::now();
  h.stalled_seconds = 5;
  EXPECT_DOUBLE_EQ(h.StalledSeconds(h.since + std::chrono::milliseconds(2500)), 7.5);
  ReportedHang r;
  r.since = h.since;
  r.stalled_before = 3;
  EXPECT_DOUBLE_EQ(r.StalledSeconds(h.since + std::chrono::seconds(4)), 7);
}

}  // namespace
}  // namespace perftracker::server
