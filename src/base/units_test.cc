#include "base/units.h"

#include <gtest/gtest.h>

namespace perftracker {
namespace {

TEST(UnitsTest, ConvertAsTheExpressionsTheyReplaced) {
  static_assert(UsToMs(2500) == 2.5);
  static_assert(MsToUs(2.5) == 2500);
  static_assert(SToMs(0.25) == 250);
  static_assert(MsToS(250) == 0.25);
  static_assert(BytesToMB(4e6) == 4);
  static_assert(NsToUs(2500) == 2.5);
  static_assert(NsToMs(2.5e6) == 2.5);
  static_assert(SToNs(2) == 2e9);
  static_assert(SToNs(0.5) == 5e8);
  // Bit for bit what x / 1000.0 and x * 1000.0 give, for values whose quotient is inexact.
  for (double x : {1.0 / 3, 123456.789, 1e-7, 9.87654321e12}) {
    EXPECT_EQ(UsToMs(x), x / 1000.0);
    EXPECT_EQ(MsToUs(x), x * 1000.0);
    EXPECT_EQ(SToMs(x), x * 1000.0);
    EXPECT_EQ(MsToS(x), x / 1000.0);
    EXPECT_EQ(BytesToMB(x), x / 1e6);
    EXPECT_EQ(NsToUs(x), x / 1e3);
    EXPECT_EQ(NsToMs(x), x / 1e6);
  }
}

}  // namespace
}  // namespace perftracker
