#include "pattern/string_id_map.h"

#include <gtest/gtest.h>

#include <deque>
#include <set>
#include <string>

namespace perftracker::pattern {
namespace {

TEST(StringIdMapTest, FindsWhatWasInsertedAcrossGrowth) {
  StringIdMap map;
  std::deque<std::string> keys;  // the map holds views: keep the bytes alive
  EXPECT_EQ(map.Find("aten::add"), nullptr);
  for (uint32_t i = 0; i < 5000; ++i) {
    // Shared prefixes and suffixes, lengths across the 8-byte word boundaries.
    keys.push_back("aten::" + std::string(i % 17, 'x') + std::to_string(i) + "_");
    EXPECT_EQ(map.Insert(keys.back(), i), i);
  }
  EXPECT_EQ(map.size(), 5000u);
  for (uint32_t i = 0; i < 5000; ++i) {
    const std::string probe = keys[i];  // equal bytes elsewhere in memory
    const StringIdMap::Entry* e = map.Find(probe);
    ASSERT_NE(e, nullptr) << probe;
    EXPECT_EQ(e->id, i);
    EXPECT_EQ(e->key().data(), keys[i].data());  // a view of the inserted key
  }
  EXPECT_EQ(map.Find("aten::"), nullptr);
  EXPECT_EQ(map.Find("aten::0"), nullptr);
}

TEST(StringIdMapTest, InsertKeepsTheFirstIdAndTheEmptyKeyIsAKey) {
  StringIdMap map;
  const std::string a = "ncclKernel_AllReduce", b = "ncclKernel_AllReduce";
  EXPECT_EQ(map.Insert(a, 7), 7u);
  EXPECT_EQ(map.Insert(b, 9), 7u);
  EXPECT_EQ(map.size(), 1u);
  EXPECT_EQ(map.Find(""), nullptr);
  EXPECT_EQ(map.Insert("", 3), 3u);
  ASSERT_NE(map.Find(""), nullptr);
  EXPECT_EQ(map.Find("")->id, 3u);
  EXPECT_EQ(map.Find(std::string_view("ncclKernel_AllReduce\0", 21)), nullptr);
}

// The wide hash depends on every byte and the length, short keys and long ones alike: a stack
// that differs in one frame deep inside, or in its length alone, hashes differently.
TEST(StringIdMapTest, WideHashSeesEveryByte) {
  std::string base;
  for (int i = 0; i < 12; ++i) base += "train.py(" + std::to_string(i) + "): step;";
  std::set<uint64_t> seen;
  for (size_t len : {size_t{0}, size_t{7}, size_t{63}, size_t{64}, size_t{65}, size_t{96},
                     base.size()}) {
    const std::string s = base.substr(0, len);
    EXPECT_EQ(HashBytesWide(s), HashBytesWide(std::string(s)));  // bytes, not addresses
    EXPECT_TRUE(seen.insert(HashBytesWide(s)).second) << len;
    for (size_t pos = 0; pos < len; pos += 5) {
      std::string t = s;
      t[pos] ^= 1;
      EXPECT_TRUE(seen.insert(HashBytesWide(t)).second) << len << " " << pos;
    }
  }
}

}  // namespace
}  // namespace perftracker::pattern
