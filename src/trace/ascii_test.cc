#include "trace/ascii.h"

#include <gtest/gtest.h>

namespace perftracker::trace::internal {
namespace {

TEST(AsciiTest, Lower) {
  EXPECT_EQ(Lower('A'), 'a');
  EXPECT_EQ(Lower('Z'), 'z');
  EXPECT_EQ(Lower('a'), 'a');
  EXPECT_EQ(Lower('@'), '@');  // the bytes either side of A-Z stay
  EXPECT_EQ(Lower('['), '[');
  EXPECT_EQ(Lower('\xc3'), '\xc3');
}

TEST(AsciiTest, EqualsIgnoreCase) {
  EXPECT_TRUE(EqualsIgnoreCase("Kernel", "kernel"));
  EXPECT_TRUE(EqualsIgnoreCase("", ""));
  EXPECT_FALSE(EqualsIgnoreCase("kernel", "kernels"));
  EXPECT_FALSE(EqualsIgnoreCase("[", "{"));  // not folded like letters
}

TEST(AsciiTest, StartsWith) {
  EXPECT_TRUE(StartsWith("ProfilerStep#3", "ProfilerStep#"));
  EXPECT_TRUE(StartsWith("x", ""));
  EXPECT_FALSE(StartsWith("Profiler", "ProfilerStep#"));
  EXPECT_FALSE(StartsWith("profilerStep#3", "ProfilerStep#"));  // case matters
}

}  // namespace
}  // namespace perftracker::trace::internal
