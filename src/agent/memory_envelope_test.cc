#include "agent/memory_envelope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace perftracker::agent {
namespace {

using Clock = MemoryEnvelope::Clock;
using std::chrono::milliseconds;

TEST(MemoryEnvelope, EachReportGetsTheHighAndLowOfTheLastTwoSeconds) {
  MemoryEnvelope e;
  e.Watch({10, 11});
  std::map<int, double> rss = {{10, 500}, {11, 100}};
  const auto read = [&](int pid) { return rss.count(pid) ? rss[pid] : 0.0; };
  const Clock::time_point t0{};
  e.SampleOnce(t0, read);
  rss[10] = 820;
  e.SampleOnce(t0 + milliseconds(50), read);
  auto r = e.Take(10, t0 + milliseconds(100), 505);  // the report's own reading: in it too
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->low, 500);
  EXPECT_EQ(r->high, 820);
  // Readings older than the horizon are gone.
  r = e.Take(10, t0 + milliseconds(2060), 505);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->low, 505);
  EXPECT_EQ(r->high, 505);
  EXPECT_FALSE(e.Take(12, t0, 0).has_value());  // never sampled, no reading
}

TEST(MemoryEnvelope, TheLowIsOfTheReadingsSinceThePreviousReport) {
  // A sawtooth's trough, then a refill: the next report's low is of its own interval (700), not
  // the trough the report before saw; its high is still the horizon's (820).
  MemoryEnvelope e;
  e.Watch({10});
  double rss = 820;
  const auto read = [&](int) { return rss; };
  const Clock::time_point t0{};
  e.SampleOnce(t0, read);
  rss = 300;
  e.SampleOnce(t0 + milliseconds(50), read);
  auto r = e.Take(10, t0 + milliseconds(100), 310);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->low, 300);
  EXPECT_EQ(r->high, 820);
  rss = 700;
  e.SampleOnce(t0 + milliseconds(150), read);
  r = e.Take(10, t0 + milliseconds(200), 710);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->low, 700);
  EXPECT_EQ(r->high, 820);
  // No reading since, and none of the report's own: the low is the high (no range known).
  r = e.Take(10, t0 + milliseconds(250), 0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->low, 820);
  // A worker no longer watched starts afresh when it is watched again.
  e.Watch({});
  e.Watch({10});
  e.SampleOnce(t0 + milliseconds(300), read);
  r = e.Take(10, t0 + milliseconds(310), 0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->low, 700);
}

TEST(MemoryEnvelope, ASawtoothsHighStaysAtItsPeakWhereTheReportsReadingsClimb) {
  // A cache of 16 MiB a step for 20 steps of 30 ms, then emptied; in the first cycles the
  // allocator gives the emptied memory back, later it keeps more and more of it (the troughs
  // climb to the peak, as glibc's mmap threshold adapts). The reports' own readings (every
  // 0.41 s) climb by hundreds of MiB; the highs of the last 2 s (sampled every 50 ms) stay
  // within two steps of the peak from the first report on.
  MemoryEnvelope e;
  e.Watch({7});
  static constexpr double kPeak = 500 + 16 * 19;
  const auto level = [](double t_ms) {
    const double step = std::floor(t_ms / 30.0);
    const double cycle = std::floor(step / 20.0);
    const double trough = std::min(kPeak, 400 + 60 * cycle);
    return trough + (kPeak - trough) * std::fmod(step, 20.0) / 19.0;
  };
  std::vector<double> own, high;
  double next_report = 2000;
  for (double t = 0; t < 12000; t += 50) {
    e.SampleOnce(Clock::time_point{} + milliseconds(static_cast<int64_t>(t)),
                 [&](int) { return level(t); });
    if (t + 50 > next_report) {
      own.push_back(level(next_report));
      high.push_back(e.Take(7,
                            Clock::time_point{} + milliseconds(static_cast<int64_t>(next_report)),
                            level(next_report))
                         ->high);
      next_report += 410;
    }
  }
  EXPECT_GE(*std::max_element(own.begin(), own.end()) - *std::min_element(own.begin(), own.end()),
            150);  // what the series saw before
  for (double h : high) EXPECT_GE(h, kPeak - 2 * 16) << "every high is the peak or near it";
}

TEST(MemoryEnvelope, OnlyWatchedWorkersAreSampled) {
  MemoryEnvelope e;
  e.Watch({1});
  int reads = 0;
  e.SampleOnce(Clock::time_point{}, [&](int pid) {
    ++reads;
    return pid == 1 ? 10.0 : 0.0;
  });
  EXPECT_EQ(reads, 1);
  e.Watch({2});  // 1 is gone: its readings too
  EXPECT_FALSE(e.Take(1, Clock::time_point{}, 0).has_value());
}

}  // namespace
}  // namespace perftracker::agent
