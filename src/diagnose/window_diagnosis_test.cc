#include "diagnose/window_diagnosis.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "diagnose/finding_text.h"
#include "diagnose/testing.h"

namespace perftracker::diagnose {
namespace {

// A 16-rank job (tp 2, pp 2, dp 4) whose rank 5 computes 40% slower: a straggler its peers name.
pattern::CompactJob SlowGpuJob(int slow_gpu = 5) {
  testing::JobSpec spec;
  spec.slow_gpu = slow_gpu;
  pattern::CompactJob job;
  for (pattern::RankSummary& r : testing::MakeJob(spec)) job.Add(std::move(r));
  job.SortByRank();
  return job;
}

Finding Growth(int rank, double ms) {
  Finding f;
  f.category = Category::kMemoryGrowth;
  f.finding_class = FindingClass::kSubset;
  f.cause = Cause::kSoftware;
  f.confidence = 0.9;
  f.ranks = {rank};
  f.impact_ms = ms;
  f.summary = "rank " + std::to_string(rank) + "'s memory grows";
  return f;
}

WindowInput Input(const pattern::CompactJob& job, int64_t id, bool baseline) {
  WindowInput in;
  in.id = id;
  in.start_iteration = id * 100;
  in.iterations = 10;
  in.baseline = baseline;
  in.job = &job;
  return in;
}

std::vector<std::string> Order(const Diagnosis& d) {
  std::vector<std::string> out;
  for (const Finding& f : d.findings) out.push_back(f.summary);
  return out;
}

TEST(DiagnoseWindow, FindingsAreSortedWhicheverCategoriesArePresent) {
  const pattern::CompactJob job = SlowGpuJob();
  BaselineState state;
  const Diagnosis plain = DiagnoseWindow(Input(job, 2, false), &state);
  ASSERT_FALSE(plain.findings.empty());
  EXPECT_EQ(plain.findings[0].ranks, std::vector<int>{5});
  // The run's memory findings in any order: every finding sorted, the others' order kept.
  WindowInput in = Input(job, 2, false);
  in.memory = {Growth(3, 0.5), Growth(9, 50)};
  const Diagnosis with_memory = DiagnoseWindow(std::move(in), &state);
  Diagnosis sorted = with_memory;
  internal::SortFindings(&sorted.findings);
  EXPECT_EQ(Order(with_memory), Order(sorted));
  std::vector<std::string> others = Order(with_memory);
  std::erase_if(others, [](const std::string& s) { return s.find("memory grows") != s.npos; });
  EXPECT_EQ(others, Order(plain));
  EXPECT_EQ(Order(with_memory).size(), Order(plain).size() + 2);
}

TEST(DiagnoseWindow, TheBaselineWindowIsKeptAndLaterWindowsAreComparedWithIt) {
  const pattern::CompactJob clean = SlowGpuJob(-1);
  BaselineState state;
  const Diagnosis base = DiagnoseWindow(Input(clean, 1, true), &state);
  ASSERT_TRUE(state.baseline.has_value());
  EXPECT_EQ(state.baseline->first_iteration, 100);
  EXPECT_EQ(state.baseline->last_iteration, 109);
  EXPECT_EQ(base.job.notes.back(),
            "compared with: each rank's peers of the same role; expected patterns (this is the "
            "baseline window, later ones compare with it)");
  const pattern::CompactJob slow = SlowGpuJob();
  const Diagnosis later = DiagnoseWindow(Input(slow, 2, false), &state);
  EXPECT_EQ(later.job.notes.back(),
            "compared with: each rank's peers of the same role; the baseline window (iterations "
            "100..109)");
  // Another attempt's baseline is of processes that are gone: not compared with.
  WindowInput again = Input(slow, 3, false);
  again.attempt = 1;
  const Diagnosis other = DiagnoseWindow(std::move(again), &state);
  EXPECT_EQ(other.job.notes.back(), "compared with: each rank's peers of the same role");
  EXPECT_NE(other.job.notes.front().find("attempt 1 of the job"), std::string::npos)
      << other.job.notes.front();
}

// A window that records rank 5's allocations slows rank 5: its straggler there is the
// recorder's cost, left out with a note; its memory growth stays, and so would another rank's
// straggler.
TEST(DiagnoseWindow, ARankRecordingItsAllocationsIsNotNamedSlowForIt) {
  const pattern::CompactJob job = SlowGpuJob(5);
  BaselineState state;
  const Diagnosis plain = DiagnoseWindow(Input(job, 1, false), &state);
  ASSERT_FALSE(plain.findings.empty());
  ASSERT_EQ(plain.findings[0].category, Category::kStraggler);
  ASSERT_EQ(plain.findings[0].ranks, std::vector<int>{5});

  WindowInput in = Input(job, 1, false);
  in.memory_ranks = {5};
  in.memory = {Growth(5, 0)};
  const Diagnosis d = DiagnoseWindow(std::move(in), &state);
  for (const Finding& f : d.findings) EXPECT_NE(f.category, Category::kStraggler) << f.summary;
  EXPECT_TRUE(std::any_of(d.findings.begin(), d.findings.end(),
                          [](const Finding& f) { return f.category == Category::kMemoryGrowth; }));
  EXPECT_TRUE(std::any_of(d.job.notes.begin(), d.job.notes.end(), [](const std::string& n) {
    return n.find("ranks 5 recorded their allocations") != std::string::npos &&
           n.find("straggler") != std::string::npos;
  }));

  // Another rank recording: rank 5 is still named.
  WindowInput other = Input(job, 1, false);
  other.memory_ranks = {6};
  const Diagnosis o = DiagnoseWindow(std::move(other), &state);
  ASSERT_FALSE(o.findings.empty());
  EXPECT_EQ(o.findings[0].category, Category::kStraggler);
}

}  // namespace
}  // namespace perftracker::diagnose
