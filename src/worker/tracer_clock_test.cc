#include "worker/tracer_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

namespace perftracker::worker {
namespace {

constexpr int64_t kMs = 1000000;

// The clocks a test sets by hand.
struct FakeClocks {
  int64_t steady_ns = 0;
  uint64_t ticks = 0;
  bool invariant = true;
};

struct FakeTimeSource {
  FakeClocks* c;
  int64_t SteadyNs() const { return c->steady_ns; }
  uint64_t Ticks() const { return c->ticks; }
  bool InvariantTsc() const { return c->invariant; }
};

using FakeClock = BasicTracerClock<FakeTimeSource>;

// 3 ticks a nanosecond (a 3 GHz TSC), started at tick 1,000 and anchored 100 ms later.
struct Calibrated {
  FakeClocks c;
  FakeClock clock{FakeTimeSource{&c}};
  Calibrated() {
    c.steady_ns = 5 * kMs;
    c.ticks = 1000;
    clock.Start();
    c.steady_ns += 100 * kMs;
    c.ticks += 3 * 100 * kMs;
    clock.Anchor(c.steady_ns);
  }
};

TEST(TracerClockTest, ScalesTicksToNanosecondsFromTheAnchor) {
  Calibrated t;
  ASSERT_TRUE(t.clock.uses_tsc());
  EXPECT_DOUBLE_EQ(t.clock.ns_per_tick(), 1.0 / 3);
  EXPECT_EQ(t.clock.Now(), 105 * kMs);  // the anchor itself
  t.c.ticks += 3000;
  EXPECT_EQ(t.clock.Now(), 105 * kMs + 1000);
  // The steady clock is not read on the TSC path: moving it changes nothing.
  t.c.steady_ns += 7 * kMs;
  EXPECT_EQ(t.clock.Now(), 105 * kMs + 1000);
  t.c.ticks += 3 * 2 * kMs;
  EXPECT_EQ(t.clock.Now(), 107 * kMs + 1000);
}

TEST(TracerClockTest, IsMonotonicWhileTheTicksAdvance) {
  Calibrated t;
  int64_t last = t.clock.Now();
  for (int i = 0; i < 10000; ++i) {
    t.c.ticks += 1 + i % 7;  // a few ticks: less than a nanosecond to a few
    const int64_t now = t.clock.Now();
    ASSERT_GE(now, last) << i;
    last = now;
  }
  EXPECT_GT(last, 105 * kMs);
}

TEST(TracerClockTest, ATooShortCalibrationUsesTheSteadyClock) {
  FakeClocks c;
  FakeClock clock{FakeTimeSource{&c}};
  c.ticks = 1000;
  clock.Start();
  c.steady_ns = FakeClock::kMinCalibrationNs - 1;
  c.ticks += 3 * c.steady_ns;
  clock.Anchor(c.steady_ns);
  EXPECT_FALSE(clock.uses_tsc());
  c.steady_ns += 1234;
  EXPECT_EQ(clock.Now(), c.steady_ns);
  // At exactly the minimum span the TSC is used.
  c.steady_ns = FakeClock::kMinCalibrationNs;
  clock.Anchor(c.steady_ns);
  EXPECT_TRUE(clock.uses_tsc());
}

TEST(TracerClockTest, NoInvariantTscOrNoTicksUsesTheSteadyClock) {
  Calibrated t;
  t.c.invariant = false;
  t.clock.Anchor(t.c.steady_ns);
  EXPECT_FALSE(t.clock.uses_tsc());
  EXPECT_EQ(t.clock.Now(), t.c.steady_ns);

  FakeClocks c;  // a CPU whose counter does not move (Ticks() is 0 off x86-64)
  FakeClock clock{FakeTimeSource{&c}};
  clock.Start();
  c.steady_ns = 200 * kMs;
  clock.Anchor(c.steady_ns);
  EXPECT_FALSE(clock.uses_tsc());
  EXPECT_EQ(clock.Now(), 200 * kMs);
}

TEST(TracerClockTest, EachAnchorMeasuresTheRateFromStart) {
  Calibrated t;
  // A second window, 1 s later: the rate is measured over the whole 1.1 s since Start (3 ticks
  // a ns still), and the clock is anchored at the new arming.
  t.c.steady_ns += 1000 * kMs;
  t.c.ticks += 3 * 1000 * kMs;
  t.clock.Anchor(t.c.steady_ns);
  EXPECT_DOUBLE_EQ(t.clock.ns_per_tick(), 1.0 / 3);
  EXPECT_EQ(t.clock.Now(), 1105 * kMs);
}

TEST(TracerClockTest, TheHardwareClockFollowsTheSteadyClock) {
  TracerClock clock;
  clock.Start();
  std::this_thread::sleep_for(std::chrono::nanoseconds(TracerClock::kMinCalibrationNs));
  const int64_t anchor = SteadyNowNs();
  clock.Anchor(anchor);
  const int64_t a = clock.Now();
  const int64_t steady = SteadyNowNs();
  const int64_t b = clock.Now();
  EXPECT_GE(a, anchor);
  EXPECT_LE(a, b);
  // TSC or not, the tracer's time stays within a millisecond of the steady clock's.
  EXPECT_LT(std::abs(b - steady), kMs);
}

}  // namespace
}  // namespace perftracker::worker
