#include "base/units.h"

#include <gtest/gtest.h>

#include <cstdint>

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
  static_assert(NsToS(5e8) == 0.5);
  static_assert(UsToS(2.5e6) == 2.5);
  static_assert(KiBToBytes(4) == 4096);
  static_assert(KiBToMiB(2048) == 2);
  static_assert(BytesToMiB(3 * 1048576) == 3);
  // Bit for bit what x / 1000.0 and x * 1000.0 give, for values whose quotient is inexact.
  for (double x : {1.0 / 3, 123456.789, 1e-7, 9.87654321e12}) {
    EXPECT_EQ(UsToMs(x), x / 1000.0);
    EXPECT_EQ(MsToUs(x), x * 1000.0);
    EXPECT_EQ(SToMs(x), x * 1000.0);
    EXPECT_EQ(MsToS(x), x / 1000.0);
    EXPECT_EQ(BytesToMB(x), x / 1e6);
    EXPECT_EQ(NsToUs(x), x / 1e3);
    EXPECT_EQ(NsToMs(x), x / 1e6);
    EXPECT_EQ(NsToS(x), x * 1e-9);
    EXPECT_EQ(UsToS(x), x * 1e-6);
    EXPECT_EQ(KiBToBytes(x), x * 1024);
    EXPECT_EQ(KiBToMiB(x), x / 1024.0);
    EXPECT_EQ(BytesToMiB(x), x / (1024 * 1024));
  }
  // From the integer counters the OS reports, as the callers pass them (converted to double).
  for (uint64_t n : {uint64_t{1}, uint64_t{123456789}, uint64_t{9876543210123}}) {
    EXPECT_EQ(NsToS(n), static_cast<double>(n) * 1e-9);
    EXPECT_EQ(UsToS(n), static_cast<double>(n) * 1e-6);
    EXPECT_EQ(KiBToBytes(n), static_cast<double>(n) * 1024);
  }
  // NsToS multiplies by 1e-9 as the code it replaced did: dividing by 1e9 differs in the last bit
  // for some values (3 ns here), so the two forms are not interchangeable.
  EXPECT_NE(NsToS(3), 3 / 1e9);
}

}  // namespace
}  // namespace perftracker
