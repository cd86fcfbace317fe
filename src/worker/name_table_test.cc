#include "worker/name_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace perftracker::worker {
namespace {

// Keys only stand for functions: any distinct addresses do.
alignas(64) char g_objects[NameTable::kCacheSlots * 64];
const void* Key(size_t i) { return &g_objects[i * 16]; }

TEST(NameTableTest, AKeyIsNamedOnceAndFoundAfter) {
  NameTable t;
  EXPECT_EQ(t.Intern(""), 0u);
  EXPECT_EQ(t.Intern("<gc>"), 1u);
  uint32_t id = 99;
  EXPECT_FALSE(t.Find(Key(1), &id));
  EXPECT_EQ(id, 99u);
  EXPECT_EQ(t.Add(Key(1), "a.py(1): f"), 2u);
  EXPECT_EQ(t.Add(Key(2), "<built-in method len>"), 3u);
  ASSERT_TRUE(t.Find(Key(1), &id));
  EXPECT_EQ(id, 2u);
  ASSERT_TRUE(t.Find(Key(2), &id));
  EXPECT_EQ(id, 3u);
  EXPECT_EQ(t.names(),
            (std::vector<std::string>{"", "<gc>", "a.py(1): f", "<built-in method len>"}));
}

TEST(NameTableTest, KeysSharingACacheSlotKeepTheirOwnIds) {
  // Key(i) and Key(i + kCacheSlots) are kCacheSlots * 16 bytes apart: the same slot.
  NameTable t;
  const void* a = Key(5);
  const void* b = Key(5 + NameTable::kCacheSlots);
  const uint32_t ia = t.Add(a, "a");
  const uint32_t ib = t.Add(b, "b");  // evicts a from the slot
  uint32_t id = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(t.Find(a, &id));
    EXPECT_EQ(id, ia);
    ASSERT_TRUE(t.Find(b, &id));
    EXPECT_EQ(id, ib);
  }
  // A key in a slot another key holds is still unknown.
  EXPECT_FALSE(t.Find(Key(5 + 2 * NameTable::kCacheSlots), &id));
}

TEST(NameTableTest, ManyKeysAllResolve) {
  NameTable t;
  const size_t n = NameTable::kCacheSlots * 3;  // more keys than slots
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(t.Add(Key(i), ""));
  for (size_t i = 0; i < n; ++i) {
    uint32_t id = 0;
    ASSERT_TRUE(t.Find(Key(i), &id)) << i;
    EXPECT_EQ(id, ids[i]) << i;
  }
}

TEST(NameTableTest, ResetAndTakeNamesForgetEveryKey) {
  NameTable t;
  t.Intern("");
  t.Add(Key(1), "f");
  t.Add(Key(2), "g");
  const std::vector<std::string> names = t.TakeNames();
  EXPECT_EQ(names, (std::vector<std::string>{"", "f", "g"}));
  uint32_t id = 0;
  EXPECT_FALSE(t.Find(Key(1), &id));  // the cache too: a freed code object's address may return
  EXPECT_TRUE(t.names().empty());
  EXPECT_EQ(t.Intern(""), 0u);
  EXPECT_EQ(t.Add(Key(2), "h"), 1u);
  t.Reset();
  EXPECT_FALSE(t.Find(Key(2), &id));
  EXPECT_TRUE(t.names().empty());
}

}  // namespace
}  // namespace perftracker::worker
