#include "base/bucket_counts.h"

#include <gtest/gtest.h>

namespace perftracker {
namespace {

TEST(BucketCountsTest, GrowsBothWaysAndFindsRanks) {
  BucketCounts c;
  EXPECT_TRUE(c.empty());
  c.Add(40);
  c.Add(38);
  c.Add(40);
  EXPECT_EQ(c.offset(), 38);
  EXPECT_EQ(c.counts(), (std::vector<uint32_t>{1, 0, 2}));
  EXPECT_EQ(c.count(), 3u);
  EXPECT_EQ(c.BucketAtRank(1), 38);
  EXPECT_EQ(c.BucketAtRank(2), 40);
  EXPECT_EQ(c.BucketAtRank(99), 40);  // past the end: the last bucket
  c.Add(45, 5);
  EXPECT_EQ(c.counts().size(), 8u);
  EXPECT_EQ(c.count(), 8u);
  EXPECT_EQ(c.BucketAtRank(4), 45);
}

}  // namespace
}  // namespace perftracker
