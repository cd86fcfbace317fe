#include "diagnose/healthy_rate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "diagnose/testing.h"

namespace perftracker::diagnose {
namespace {

// N points from FIRST of MS each, with a deterministic +-JITTER ms wobble.
std::vector<IterationPoint> Flat(int64_t first, int n, double ms, double jitter = 2) {
  std::vector<IterationPoint> v;
  for (int i = 0; i < n; ++i) v.push_back({first + i, ms + jitter * std::sin(i * 1.7)});
  return v;
}

std::vector<IterationPoint> Concat(std::vector<IterationPoint> a,
                                   const std::vector<IterationPoint>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(HealthyRate, TooFewPointsSayNothing) {
  EXPECT_FALSE(FindHealthyRate(Flat(10, 9, 70)).has_value());
}

TEST(HealthyRate, AFlatHistoryIsHealthyThroughout) {
  const auto rate = FindHealthyRate(Flat(10, 200, 70));
  ASSERT_TRUE(rate);
  EXPECT_FALSE(rate->slowdown_step);
  EXPECT_NEAR(rate->healthy.ms, 70, 1);
  EXPECT_NEAR(rate->Ratio(), 1, 1e-9);
}

TEST(HealthyRate, AStepUpIsASlowdownFromItsFirstIteration) {
  // 70 ms until iteration 109, 90 ms from 110 on (a quota, more work).
  const auto rate = FindHealthyRate(Concat(Flat(10, 100, 70), Flat(110, 40, 90)));
  ASSERT_TRUE(rate);
  ASSERT_TRUE(rate->slowdown_step);
  EXPECT_EQ(*rate->slowdown_step, 110);
  EXPECT_NEAR(rate->healthy.ms, 70, 1);
  EXPECT_NEAR(rate->recent.ms, 90, 1);
  EXPECT_EQ(rate->healthy.last_step, 109);
  EXPECT_NEAR(rate->RiseMs(), 20, 2);
  EXPECT_NE(rate->Describe().find("until iteration 110"), std::string::npos) << rate->Describe();
}

TEST(HealthyRate, AFasterStartShorterThanTwoSecondsIsNoHealthyRate) {
  // Recorded (test_online_run's clean job in CI): 12.0 ms from iteration 20 to 58 (0.5 s), then
  // 15.1 ms to the end. The host settled; the job did not slow down.
  const auto rate = FindHealthyRate(Concat(Flat(20, 39, 12.0, 0.3), Flat(59, 400, 15.1, 0.5)));
  ASSERT_TRUE(rate);
  EXPECT_FALSE(rate->slowdown_step);
  // The same step after 2.4 s of 12 ms iterations is a slowdown.
  const auto later = FindHealthyRate(Concat(Flat(20, 200, 12.0, 0.3), Flat(220, 400, 15.1, 0.5)));
  ASSERT_TRUE(later && later->slowdown_step);
  EXPECT_EQ(*later->slowdown_step, 220);
}

TEST(HealthyRate, AShiftWithinTheNoiseIsNoSlowdown) {
  // 3% up, under kBaselineSlowdown; and a 6% shift buried in +-10 ms of noise.
  EXPECT_FALSE(
      FindHealthyRate(Concat(Flat(0, 60, 70, 0.5), Flat(60, 60, 72.1, 0.5)))->slowdown_step);
  std::mt19937 gen(7);
  std::normal_distribution<double> noise(0, 12);
  std::vector<IterationPoint> v;
  for (int i = 0; i < 14; ++i) v.push_back({i, 70 + noise(gen) + (i >= 7 ? 4 : 0)});
  EXPECT_FALSE(FindHealthyRate(v)->slowdown_step);
}

TEST(HealthyRate, AHiccupIsNoNewLevel) {
  // Four slow iterations (a checkpoint) in a flat run: shorter than kChangeMinSegment.
  std::vector<IterationPoint> v = Flat(0, 100, 70);
  for (int i = 50; i < 54; ++i) v[i].ms = 300;
  EXPECT_FALSE(FindHealthyRate(v)->slowdown_step);
}

TEST(HealthyRate, FasterLaterIsTheHealthyLevel) {
  // A long warm-up tail at 90 ms, then 70 ms: healthy is the faster level, no slowdown.
  const auto rate = FindHealthyRate(Concat(Flat(10, 30, 90), Flat(40, 100, 70)));
  ASSERT_TRUE(rate);
  EXPECT_FALSE(rate->slowdown_step);
  EXPECT_NEAR(rate->healthy.ms, 70, 1);
}

// Four sampled ranks whose ten profiled iterations take BEFORE ms, then AFTER from index AT.
std::vector<pattern::RankSummary> Profiled(double before, double after, int at) {
  std::vector<pattern::RankSummary> out;
  for (int r = 0; r < 4; ++r) {
    pattern::RankSummary s = testing::Rank(r, 4, {}, before, "node0", 10);
    for (int i = at; i < 10; ++i) s.iteration_ms[i] = after + r * 0.1;
    out.push_back(s);
  }
  return out;
}

TEST(HealthyRate, SaysHowMuchProfilingInflatedTheWindow) {
  HealthyRate r;
  r.healthy.ms = 40;
  r.recent.ms = 42.7;  // the level now, a slowdown's too
  EXPECT_EQ(r.ProfilingInflation(47.74),
            "profiled iterations ran 1.12x the unprofiled ones (47.7 ms against 42.7 ms); figures "
            "are of profiled iterations");
  EXPECT_EQ(r.ProfilingInflation(0), "");
  r.recent.ms = 0;
  EXPECT_EQ(r.ProfilingInflation(47.74), "");
}

TEST(HealthyRate, TheInflationIsAgainstTheLatestIterationsWhereKnown) {
  HealthyRate r;
  r.healthy.ms = r.recent.ms = 15.2;
  r.latest = MedianLevel(Flat(525, 10, 15.5, 0));
  EXPECT_EQ(r.ProfilingInflation(21.7),
            "profiled iterations ran 1.40x the unprofiled ones (21.7 ms against 15.5 ms); figures "
            "are of profiled iterations");
}

TEST(HealthyRate, TheUnprofiledRiseIsTheFitsOrTheLatestIterations) {
  // The fit's slowdown: its rise.
  const auto slowed = FindHealthyRate(Concat(Flat(10, 50, 70, 0), Flat(60, 30, 100, 0)));
  ASSERT_TRUE(slowed && slowed->slowdown_step);
  EXPECT_DOUBLE_EQ(*slowed->UnprofiledRiseMs(), 30);
  // A flat history: unknown until the latest iterations are, then their rise, never below 0.
  auto flat = FindHealthyRate(Flat(10, 190, 15.2, 0));
  ASSERT_TRUE(flat && !flat->slowdown_step);
  EXPECT_FALSE(flat->UnprofiledRiseMs().has_value());
  flat->latest = MedianLevel(Flat(190, 4, 30, 0));  // too few to be a level
  EXPECT_FALSE(flat->UnprofiledRiseMs().has_value());
  flat->latest = MedianLevel(Flat(190, 10, 16.0, 0));
  EXPECT_NEAR(*flat->UnprofiledRiseMs(), 0.8, 1e-9);
  flat->latest = MedianLevel(Flat(190, 10, 14.0, 0));
  EXPECT_DOUBLE_EQ(*flat->UnprofiledRiseMs(), 0);
  EXPECT_EQ(MedianLevel({}).points, 0);
}

TEST(CheckBaseline, AJobSlowedBeforeTheBaselineSpoilsIt) {
  // Slower from iteration 40 (after 2.1 s of 70 ms); the baseline profiled 50..59.
  const auto rate = FindHealthyRate(Concat(Flat(10, 30, 70), Flat(40, 60, 100)));
  ASSERT_TRUE(rate && rate->slowdown_step);
  const BaselineCheck c = CheckBaseline(&*rate, 50, 59, Profiled(110, 110, 0));
  EXPECT_TRUE(c.spoiled);
  EXPECT_NE(c.why.find("slowed down before it"), std::string::npos) << c.why;
}

TEST(CheckBaseline, AChangeWithinTheBaselineSpoilsIt) {
  // The history resumes after the window and its export (iterations 45 on) 1.4x slower; the
  // window's own iterations stepped up at its fifth.
  const auto rate = FindHealthyRate(Concat(Flat(0, 30, 70), Flat(45, 40, 98)));
  ASSERT_TRUE(rate && rate->slowdown_step);
  EXPECT_EQ(*rate->slowdown_step, 45);
  const BaselineCheck c = CheckBaseline(&*rate, 30, 39, Profiled(75, 105, 4));
  EXPECT_TRUE(c.spoiled);
  EXPECT_NE(c.why.find("slowed down within it"), std::string::npos) << c.why;
  // The same history, a baseline whose iterations stayed level: the fault began after it.
  EXPECT_FALSE(CheckBaseline(&*rate, 30, 39, Profiled(75, 75, 0)).spoiled);
}

TEST(CheckBaseline, ALaterSlowdownLeavesTheBaselineClean) {
  const auto rate = FindHealthyRate(Concat(Flat(10, 100, 70), Flat(110, 40, 90)));
  EXPECT_FALSE(CheckBaseline(&*rate, 30, 39, Profiled(75, 110, 4)).spoiled);
  EXPECT_FALSE(CheckBaseline(nullptr, 30, 39, Profiled(75, 110, 4)).spoiled);
}

}  // namespace
}  // namespace perftracker::diagnose
