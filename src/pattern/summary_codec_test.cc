#include "pattern/summary_codec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perftracker::pattern::summary_codec {
namespace {

TEST(SummaryCodecTest, WritesTheHeadersExample) {
  Writer w;
  w.U(300);
  w.S(-2);
  w.Str("a");
  EXPECT_EQ(w.Payload(), std::string("\x01\x01" "a\xac\x02\x03\x00", 7));
}

TEST(SummaryCodecTest, ReadsBackWhatItWrites) {
  Writer w;
  w.U(0);
  w.U(UINT64_MAX);
  w.S(INT64_MIN);
  w.B(true);
  w.D(2.5);
  w.F(-1.25f);
  w.Str("name");
  w.Str("other");
  w.Str("name");  // one table entry for both
  const std::string payload = w.Payload();
  Reader r(payload, 0);
  std::vector<std::string_view> table(r.Count<std::string_view>());
  for (auto& s : table) s = r.RawString();
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(r.U(), 0u);
  EXPECT_EQ(r.U(), UINT64_MAX);
  EXPECT_EQ(r.S(), INT64_MIN);
  EXPECT_TRUE(r.B());
  EXPECT_EQ(r.D(), 2.5);
  EXPECT_EQ(r.F(), -1.25f);
  EXPECT_EQ(r.Str(table), "name");
  EXPECT_EQ(r.Str(table), "other");
  EXPECT_EQ(r.Str(table), "name");
  EXPECT_FALSE(r.failed());
  EXPECT_EQ(r.remaining(), 0u);
  // Past the end: failed, not corrupt, and every later read gives zero.
  EXPECT_EQ(r.U(), 0u);
  EXPECT_TRUE(r.failed());
  EXPECT_FALSE(r.corrupt());
}

TEST(SummaryCodecTest, CountsAndStringsAreBoundedByWhatIsLeftAndTheBudget) {
  Writer w;
  w.U(1000);  // a count of 1000 elements of at least 4 bytes, in 3 bytes
  w.U(7);
  std::string bytes = w.Take();
  Reader r(bytes, 0);
  EXPECT_EQ(r.Count<int>(4), 0u);
  EXPECT_TRUE(r.failed());

  Writer big;
  big.U(limits::kMaxSummaryMemory / sizeof(double) + 1);  // one element past the budget
  bytes = big.Take() + std::string(limits::kMaxSummaryMemory + 16, '\0');
  Reader b(bytes, 0);
  EXPECT_EQ(b.Count<double>(1), 0u);
  EXPECT_TRUE(b.corrupt());
  EXPECT_TRUE(b.over_budget());

  Writer s;
  s.U(10);  // a string of 10 bytes with 2 left
  bytes = s.Take() + "ab";
  Reader t(bytes, 0);
  EXPECT_EQ(t.RawString(), "");
  EXPECT_TRUE(t.failed());
}

TEST(SummaryCodecTest, AStringIndexOutsideTheTableIsCorrupt) {
  Writer w;
  w.U(3);
  const std::string bytes = w.Take();
  Reader r(bytes, 0);
  const std::vector<std::string_view> table = {"x"};
  uint32_t index = 0;
  EXPECT_EQ(r.Str(table, &index), "");
  EXPECT_TRUE(r.corrupt());
  EXPECT_EQ(index, FunctionView::kNoRef);
}

}  // namespace
}  // namespace perftracker::pattern::summary_codec
