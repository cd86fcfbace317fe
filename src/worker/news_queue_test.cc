#include "worker/news_queue.h"

#include <gtest/gtest.h>

#include <deque>

namespace perftracker::worker {
namespace {

News Iter(int64_t index) { return {News::kIter, 0, 0, index, true, {}}; }

TEST(NewsQueueTest, TakeAllReturnsOldestFirstAndEmpties) {
  NewsQueue q;
  EXPECT_EQ(q.capacity(), NewsQueue::kDefaultCapacity);
  q.Push(Iter(1));
  q.Push({News::kLearned, 0, 0, 0, true, "DO"});
  const std::deque<News> got = q.TakeAll();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].kind, News::kIter);
  EXPECT_EQ(got[0].index, 1);
  EXPECT_EQ(got[1].text, "DO");
  EXPECT_EQ(q.size(), 0u);
  EXPECT_TRUE(q.TakeAll().empty());
  EXPECT_EQ(q.dropped(), 0u);
}

TEST(NewsQueueTest, PastItsBoundTheOldestIsDroppedAndCounted) {
  NewsQueue q(3);
  for (int64_t i = 0; i < 5; ++i) q.Push(Iter(i));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.dropped(), 2u);
  const std::deque<News> got = q.TakeAll();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got.front().index, 2);
  EXPECT_EQ(got.back().index, 4);
  // Draining makes room again; the count of drops is kept.
  q.Push(Iter(5));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.dropped(), 2u);
}

TEST(NewsQueueTest, TheDefaultBoundHolds) {
  NewsQueue q;
  for (size_t i = 0; i < NewsQueue::kDefaultCapacity + 10; ++i) q.Push(Iter(i));
  EXPECT_EQ(q.size(), NewsQueue::kDefaultCapacity);
  EXPECT_EQ(q.dropped(), 10u);
}

TEST(NewsQueueTest, ClearForgetsItemsButNotDrops) {
  NewsQueue q(1);
  q.Push(Iter(1));
  q.Push(Iter(2));
  q.Clear();
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.dropped(), 1u);
}

}  // namespace
}  // namespace perftracker::worker
