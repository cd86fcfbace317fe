#include "base/phase_times.h"

#include <gtest/gtest.h>

namespace perftracker {
namespace {

TEST(PhaseTimes, PhasesAddUpInTheOrderTheyFirstRan) {
  PhaseTimes t;
  t.Add("peer groups", 0.25);
  t.Add("read (thread-seconds)", 3.5);
  t.Add("peer groups", 0.16);
  EXPECT_EQ(t.Format(), "peer groups 0.41 s, read (thread-seconds) 3.50 s");
  EXPECT_DOUBLE_EQ(t.Seconds("read (thread-seconds)"), 3.5);
  EXPECT_EQ(t.Seconds("never"), 0);
}

TEST(PhaseTimes, AScopeIsTimedAndANullOneCostsNothing) {
  PhaseTimes t;
  { ScopedPhase p(&t, "scope"); }
  ASSERT_EQ(t.phases().size(), 1u);
  EXPECT_GE(t.phases()[0].second, 0);
  { ScopedPhase p(nullptr, "nothing"); }
  EXPECT_EQ(t.phases().size(), 1u);
}

}  // namespace
}  // namespace perftracker
