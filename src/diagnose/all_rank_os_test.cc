#include "diagnose/all_rank_os.h"

#include <gtest/gtest.h>

namespace perftracker::diagnose {
namespace {

// N ranks whose quota throttled them in THROTTLED of 40 periods over a 4 s window, 1.5 s in all.
pattern::RankMetrics Quota(int n, double throttled) {
  pattern::RankMetrics m;
  for (int r = 0; r < n; ++r)
    m[r] = {{"cgroup.nr_periods", 40},
            {"cgroup.nr_throttled", throttled},
            {"cgroup.throttled_s", 1.5},
            {"cgroup.quota_cpus", 0.25},
            {"window.seconds", 4}};
  return m;
}

TEST(AllRanksThrottledRule, EveryRankThrottledInMostPeriodsIsOneAllRankFinding) {
  // Measured: every rank held to a quarter CPU, throttled in 39 of 40 periods.
  std::optional<Finding> f = AllRanksThrottledRule().Find(Quota(4, 39), 300, {{0, "vm"}});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->finding_class, FindingClass::kAll);
  EXPECT_EQ(f->category, Category::kCpuThrottled);
  EXPECT_EQ(f->ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NEAR(f->evidence.at("throttled_share"), 0.975, 1e-9);
  // 1.5 s throttled of a 4 s window: 37.5% of each 300 ms iteration.
  EXPECT_NEAR(f->impact_ms, 112.5, 1e-9);
  EXPECT_NE(f->summary.find("0.25 CPUs"), std::string::npos) << f->summary;
}

TEST(AllRanksThrottledRule, AQuotaMetNowAndThenIsHealthy) {
  EXPECT_FALSE(AllRanksThrottledRule().Find(Quota(4, 8), 300, {}));
}

TEST(AllRanksThrottledRule, OneThrottledRankIsThePeerComparisons) {
  pattern::RankMetrics m = Quota(4, 2);
  m[2]["cgroup.nr_throttled"] = 39;
  EXPECT_FALSE(AllRanksThrottledRule().Find(m, 300, {}));
}

TEST(AllRanksThrottledRule, NoQuotaNoFinding) {
  pattern::RankMetrics m;
  for (int r = 0; r < 4; ++r) m[r] = {{"proc.run_s", 2}};
  EXPECT_FALSE(AllRanksThrottledRule().Find(m, 300, {}));
}

// N ranks that each wrote WRITTEN bytes in a 2 s window while the host's tasks waited for
// storage SOME_S of it.
pattern::RankMetrics Io(int n, double written, double some_s) {
  pattern::RankMetrics m;
  for (int r = 0; r < n; ++r)
    m[r] = {{"proc.write_bytes", written},
            {"proc.read_bytes", 0},
            {"host.io_some_s", some_s},
            {"window.seconds", 2}};
  return m;
}

TEST(AllRanksIoStallRule, EveryRankWritingWhileTheHostWaitsForStorageIsOneAllRankFinding) {
  // Every rank saves a 16 MiB checkpoint each 100 ms step (20 in the window) with fsync; the
  // host's tasks waited for storage 0.6 s of the 2 s.
  std::optional<Finding> f = AllRanksIoStallRule().Find(Io(4, 20 * 16.0 * (1 << 20), 0.6), 100, {});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->finding_class, FindingClass::kAll);
  EXPECT_EQ(f->category, Category::kIoStall);
  EXPECT_EQ(f->ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NEAR(f->evidence.at("storage_bytes_per_iteration"), 16.0 * (1 << 20), 1);
  EXPECT_NEAR(f->evidence.at("io_stall_share"), 0.3, 1e-9);
  EXPECT_NEAR(f->impact_ms, 30, 1e-9);  // 30% of the 100 ms iteration
  EXPECT_NE(f->summary.find("writes 16.0 MiB per iteration"), std::string::npos) << f->summary;
}

TEST(AllRanksIoStallRule, AHostThatBarelyWaitsOrRanksThatWriteLittleAreHealthy) {
  // Writes, but the disk keeps up (the host waited 1% of the window).
  EXPECT_FALSE(AllRanksIoStallRule().Find(Io(4, 20 * 16.0 * (1 << 20), 0.02), 100, {}));
  // The host waits (another process's I/O), but the ranks write a few KiB a step.
  EXPECT_FALSE(AllRanksIoStallRule().Find(Io(4, 20 * 4096.0, 0.9), 100, {}));
  // One rank writing is the peer comparison's (IoStallRule).
  pattern::RankMetrics one = Io(4, 20 * 4096.0, 0.6);
  one[2]["proc.write_bytes"] = 20 * 16.0 * (1 << 20);
  EXPECT_FALSE(AllRanksIoStallRule().Find(one, 100, {}));
  // No PSI on this kernel: no finding from the bytes alone.
  pattern::RankMetrics no_psi = Io(4, 20 * 16.0 * (1 << 20), 0.6);
  for (auto& [r, m] : no_psi) m.erase("host.io_some_s");
  EXPECT_FALSE(AllRanksIoStallRule().Find(no_psi, 100, {}));
}

TEST(FoldAllRanksThrottled, TheBaselineComparisonsFindingStandsForBoth) {
  Finding os = *AllRanksThrottledRule().Find(Quota(4, 39), 300, {});
  Finding since;
  since.finding_class = FindingClass::kAll;
  since.category = Category::kCpuThrottled;
  since.impact_ms = 80;
  since.summary = "every rank is 3.40x slower than in the baseline window";
  since.evidence["baseline_window"] = 1;
  since.functions = {{"aten::mm", "cpu_op", {}}};
  Finding other;
  other.category = Category::kStraggler;
  std::vector<Finding> fs = {os, other, since};
  FoldAllRanksThrottled(&fs);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].summary, since.summary);   // in the first one's place
  EXPECT_DOUBLE_EQ(fs[0].impact_ms, 112.5);  // the larger cost
  EXPECT_DOUBLE_EQ(fs[0].evidence.at("throttled_share"), 0.975);
  EXPECT_EQ(fs[1].category, Category::kStraggler);
  // One alone stays as it is.
  std::vector<Finding> one = {os};
  FoldAllRanksThrottled(&one);
  EXPECT_EQ(one.size(), 1u);
}

}  // namespace
}  // namespace perftracker::diagnose
