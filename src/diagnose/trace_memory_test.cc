#include "diagnose/trace_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "diagnose/diagnose.h"

namespace perftracker::diagnose {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// A rank's summary with 8 steady iterations of 100 ms and one device's levels (MiB) at their ends.
pattern::RankSummary Rank(int rank, const std::string& device, std::vector<double> levels_mib,
                          double peak_mib = 0) {
  pattern::RankSummary r;
  r.rank = rank;
  r.world_size = 4;
  r.host = "node-" + std::to_string(rank / 2);
  r.iteration_source = "ProfilerStep";
  r.iteration_ms.assign(levels_mib.size(), 100);
  pattern::DeviceMemory m;
  m.device = device;
  for (double v : levels_mib) {
    m.iteration_end_bytes.push_back(v * kMiB);
    m.iteration_peak_bytes.push_back(v * kMiB + 50 * kMiB);
    m.peak_allocated_bytes = std::max(m.peak_allocated_bytes, v * kMiB + 50 * kMiB);
  }
  if (peak_mib > 0) m.peak_allocated_bytes = peak_mib * kMiB;
  m.start_allocated_bytes = m.iteration_end_bytes.front();
  m.end_allocated_bytes = m.iteration_end_bytes.back();
  r.memory.push_back(m);
  return r;
}

std::vector<double> Ramp(double from, double step, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(from + step * i);
  return v;
}

TEST(TraceMemoryTest, SlopeAndGrowth) {
  EXPECT_DOUBLE_EQ(MemorySlope({}), 0);
  EXPECT_DOUBLE_EQ(MemorySlope({5}), 0);
  EXPECT_DOUBLE_EQ(MemorySlope({1, 3, 5, 7}), 2);
  auto mib = [](std::vector<double> v) {
    for (double& x : v) x *= kMiB;
    return v;
  };
  EXPECT_TRUE(TraceMemoryGrows(mib(Ramp(100, 8, 8))));   // 8 MiB an iteration: 56 MiB
  EXPECT_FALSE(TraceMemoryGrows(mib(Ramp(100, 8, 3))));  // too few iterations for a rate
  EXPECT_FALSE(TraceMemoryGrows(mib(Ramp(100, 2, 8))));  // 14 MiB in all: below the minimum
  EXPECT_FALSE(TraceMemoryGrows(mib({100, 100, 100, 400, 400, 400, 400, 400})));  // one step up
  EXPECT_FALSE(TraceMemoryGrows(mib({100, 300, 100, 300, 100, 300, 100, 300})));  // a sawtooth
  EXPECT_FALSE(TraceMemoryGrows(mib(Ramp(500, -8, 8))));  // memory given back
}

TEST(TraceMemoryTest, OneLeakingRankIsNamedWithItsRate) {
  std::vector<pattern::RankSummary> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(Rank(r, "cuda:0", r == 1 ? Ramp(1000, 16, 8) : std::vector<double>(8, 1000)));
  }
  Diagnosis d = Diagnose(ranks);
  ASSERT_EQ(d.job.memory.size(), 4u);
  EXPECT_EQ(d.job.memory[1].rank, 1);
  EXPECT_DOUBLE_EQ(d.job.memory[1].bytes_per_iteration, 16 * kMiB);
  EXPECT_EQ(d.job.memory[1].iterations, 8);
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.category, Category::kMemoryGrowth);
  EXPECT_EQ(f.finding_class, FindingClass::kSubset);
  EXPECT_EQ(f.ranks, std::vector<int>{1});
  EXPECT_EQ(f.hosts, std::vector<std::string>{"node-0"});
  EXPECT_DOUBLE_EQ(f.evidence.at("bytes_per_iteration"), 16 * kMiB);
  EXPECT_EQ(f.evidence_text.at("device"), "cuda:0");
  EXPECT_THAT(f.summary, testing::HasSubstr("rank 1's allocated memory on cuda:0 grows 16.0 MiB "
                                            "per iteration"));
  EXPECT_THAT(f.suggestion, testing::HasSubstr("_record_memory_history"));
  for (size_t i = 1; i < d.findings.size(); ++i)
    EXPECT_NE(d.findings[i].category, Category::kMemoryGrowth);
}

TEST(TraceMemoryTest, EveryRankLeakingIsOneAllRankFinding) {
  std::vector<pattern::RankSummary> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(Rank(r, "cpu", Ramp(200, 8 + r, 8)));
  const std::vector<Finding> fs =
      TraceMemoryFindings(TraceMemoryOf({&ranks[0], &ranks[1], &ranks[2], &ranks[3]}), 4, {});
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].finding_class, FindingClass::kAll);
  EXPECT_EQ(fs[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_THAT(fs[0].summary, testing::HasSubstr("ranks 0-3's allocated memory on the host"));
  EXPECT_THAT(fs[0].suggestion, testing::HasSubstr("tracemalloc"));
}

TEST(TraceMemoryTest, AFailedAllocationIsAMemoryPeakFinding) {
  pattern::RankSummary r = Rank(2, "cuda:0", std::vector<double>(8, 70000), 78000);
  r.memory[0].failed_allocations = 1;
  r.memory[0].largest_failed_bytes = 2048 * kMiB;
  r.memory[0].peak_reserved_bytes = 79000 * kMiB;
  const std::vector<Finding> fs = TraceMemoryFindings(TraceMemoryOf({&r}), 4, {{2, "node-1"}});
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].category, Category::kMemoryPeak);
  EXPECT_EQ(fs[0].ranks, std::vector<int>{2});
  EXPECT_EQ(fs[0].hosts, std::vector<std::string>{"node-1"});
  EXPECT_EQ(fs[0].summary,
            "rank 2's trace saw 1 allocation on cuda:0 fail (out of memory; the largest asked for "
            "2.0 GiB); rank 2 had 76.2 GiB allocated at its peak and 77.1 GiB reserved");
  EXPECT_DOUBLE_EQ(fs[0].evidence.at("failed_bytes"), 2048 * kMiB);
}

TEST(TraceMemoryTest, DiffNamesPeaksThatRose) {
  std::vector<pattern::RankSummary> base, test;
  for (int r = 0; r < 2; ++r) {
    base.push_back(Rank(r, "cuda:0", std::vector<double>(8, 1000), 10000));
    // Rank 0's peak rises by 4 GiB (+40%); rank 1's by 32 MiB: under the minimum.
    test.push_back(Rank(r, "cuda:0", std::vector<double>(8, 1000), r == 0 ? 14096 : 10032));
  }
  Diagnosis d = Diff(base, test);
  std::vector<const Finding*> peaks;
  for (const Finding& f : d.findings)
    if (f.category == Category::kMemoryPeak) peaks.push_back(&f);
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(peaks[0]->ranks, std::vector<int>{0});
  EXPECT_EQ(peaks[0]->finding_class, FindingClass::kSubset);
  EXPECT_EQ(peaks[0]->summary,
            "rank 0's peak allocated memory on cuda:0 is higher in TEST: 9.8 GiB in BASE, 13.8 GiB "
            "in TEST (+41%)");
  EXPECT_DOUBLE_EQ(peaks[0]->evidence.at("base_peak_allocated_bytes"), 10000 * kMiB);
  // The same peaks on both sides: nothing to say.
  Diagnosis same = Diff(base, base);
  for (const Finding& f : same.findings) EXPECT_NE(f.category, Category::kMemoryPeak);
}

// Where memory is kept: the place that kept memory in most profiled iterations names the
// growth, on the trace's own finding and on an online run's (the GPU one from a cuda device);
// a place that kept memory once (optimizer state) names nothing; naming twice does nothing.
TEST(TraceMemoryTest, KeptPlacesNameTheGrowth) {
  pattern::RankSummary leaking = Rank(1, "cpu", Ramp(200, 16, 8));
  pattern::MemorySite leak{"cpu",
                           "train.py(20): remember",
                           "train.py(1): <module>;train.py(9): main",
                           "aten::ones",
                           16 * 6 * kMiB,
                           6,
                           6,
                           6};
  pattern::MemorySite once{
      "cpu", "torch/optim/adam.py(90): step", "", "aten::zeros_like", 400 * kMiB, 1, 6, 40};
  leaking.memory_sites = {once, leak};
  pattern::RankSummary gpu = Rank(2, "cuda:0", std::vector<double>(8, 1000));
  gpu.memory_sites = {{"cuda:0", "model.py(7): forward", "", "aten::empty", 8 * 6 * kMiB, 6, 6, 6}};
  const std::vector<RankMemoryUse> memory = TraceMemoryOf({&leaking, &gpu});
  ASSERT_EQ(memory[0].kept.size(), 2u);
  EXPECT_EQ(memory[0].kept[1].stack,
            (std::vector<std::string>{"train.py(1): <module>", "train.py(9): main"}));
  EXPECT_DOUBLE_EQ(memory[0].kept[1].bytes_per_iteration, 16 * kMiB);

  std::vector<Finding> fs = TraceMemoryFindings(memory, 4, {});
  ASSERT_EQ(fs.size(), 1u);
  Finding online;  // an online run's GPU growth of rank 2 (diagnose/memory_growth.h)
  online.category = Category::kMemoryGrowth;
  online.ranks = {2};
  online.evidence_text["memory"] = "gpu";
  online.summary = "rank 2's GPU memory grows every iteration";
  fs.push_back(online);
  Finding other;  // not a growth: left alone
  other.category = Category::kMemoryPeak;
  other.ranks = {1};
  fs.push_back(other);
  NameMemorySites(memory, &fs);
  NameMemorySites(memory, &fs);  // once named, left as it is
  EXPECT_EQ(fs[0].evidence_text.at("kept_at"), "train.py(20): remember");
  EXPECT_EQ(fs[0].evidence_text.at("kept_by_op"), "aten::ones");
  EXPECT_DOUBLE_EQ(fs[0].evidence.at("kept_bytes_per_iteration"), 16 * kMiB);
  ASSERT_EQ(fs[0].functions.size(), 1u);
  EXPECT_EQ(fs[0].functions[0].name, "train.py(20): remember");
  EXPECT_EQ(fs[0].functions[0].kind, "python_function");
  EXPECT_THAT(fs[0].summary,
              testing::EndsWith("; kept at train.py(20): remember (aten::ones, called from "
                                "train.py(9): main): 16.0 MiB per iteration in 6 of rank 1's 6 "
                                "profiled iterations"));
  EXPECT_EQ(fs[1].evidence_text.at("kept_at"), "model.py(7): forward");
  EXPECT_THAT(fs[1].summary, testing::HasSubstr("8.0 MiB per iteration"));
  EXPECT_TRUE(fs[2].functions.empty());
  EXPECT_FALSE(fs[2].evidence_text.count("kept_at"));

  // Kept once only: no place named.
  leaking.memory_sites = {once};
  std::vector<Finding> quiet = TraceMemoryFindings(TraceMemoryOf({&leaking}), 4, {});
  ASSERT_EQ(quiet.size(), 1u);
  NameMemorySites(TraceMemoryOf({&leaking}), &quiet);
  EXPECT_FALSE(quiet[0].evidence_text.count("kept_at"));
}

TEST(TraceMemoryTest, TheSampledPythonHeapNamesAGrowthWithoutMemoryRecords) {
  // A torch without Kineto: the window's trace has no memory records, the Python tracer's
  // sampled heap (pattern/python_window.h) says where Python objects were kept.
  pattern::RankSummary r;
  r.rank = 3;
  r.memory_sites = {{"cpu", "train.py(30): log_metrics", "train.py(9): main", "Python objects",
                     8 * kMiB, 8, 8, 130}};
  const std::vector<RankMemoryUse> memory = TraceMemoryOf({&r});
  ASSERT_EQ(memory.size(), 1u);
  EXPECT_EQ(memory[0].rank, 3);
  EXPECT_TRUE(memory[0].host());
  EXPECT_TRUE(memory[0].iteration_end_bytes.empty());  // no level, so no growth of its own
  EXPECT_TRUE(TraceMemoryFindings(memory, 4, {}).empty());
  Finding online;  // the run's host memory growth of rank 3
  online.category = Category::kMemoryGrowth;
  online.ranks = {3};
  online.evidence_text["memory"] = "host";
  std::vector<Finding> fs = {online};
  NameMemorySites(memory, &fs);
  EXPECT_EQ(fs[0].evidence_text.at("kept_at"), "train.py(30): log_metrics");
  EXPECT_EQ(fs[0].evidence_text.at("kept_by_op"), "Python objects");
  EXPECT_DOUBLE_EQ(fs[0].evidence.at("kept_bytes_per_iteration"), kMiB);
}

}  // namespace
}  // namespace perftracker::diagnose
