// Unit tests of the simulator: layout math, groups, determinism, faults, summary round trip.
#include <gtest/gtest.h>

#include "pattern/summary_io.h"
#include "sim/simulator.h"

namespace perftracker::sim {
namespace {

TEST(Layout, Parses) {
  auto l = ParseLayout("tp=2,pp=2", 16);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->dp, 4);
}

}  // namespace
}  // namespace perftracker::sim
