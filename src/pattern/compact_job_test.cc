#include "pattern/compact_job.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "pattern/job.h"
#include "pattern/summary_io.h"

namespace perftracker::pattern {
namespace {

FunctionPattern Fn(const std::string& name, FunctionClass c, double per_iter_us,
                   const std::string& stack = "") {
  FunctionPattern f;
  f.name = name;
  f.kind = trace::EventKind::kKernel;
  f.fclass = c;
  f.stack = stack;
  f.per_iter_us = per_iter_us;
  f.calls_per_iter = 2;
  f.mean_us = per_iter_us / 2;
  return f;
}

RankSummary Rank(int rank, int world) {
  RankSummary r;
  r.rank = rank;
  r.world_size = world;
  r.host = "node-" + std::to_string(rank / 2);
  r.source = "rank-" + std::to_string(rank) + ".summary";
  r.iteration_ms = {10, 11};
  r.functions.push_back(Fn("gemm", FunctionClass::kCompute, 5000));
  r.functions.push_back(Fn("gemm", FunctionClass::kCompute, 700, "train.py(3): step"));
  FunctionPattern ar = Fn("ncclDevKernel_AllReduce", FunctionClass::kCollective, 1200);
  ar.coll.group = "dp:" + std::to_string(rank % 2);
  ar.coll.msg_bytes = 4 << 20;
  ar.coll.busbw_gbps = 12.5;
  r.functions.push_back(ar);
  trace::ProcessGroup pp;
  pp.name = "pp";
  pp.desc = "pp:" + std::to_string(rank % 2);
  pp.ranks = {rank % 2, rank % 2 + 2};
  r.process_groups.push_back(pp);
  return r;
}

TEST(CompactJobTest, IdentitiesAndGroupsAreStoredOncePerJob) {
  CompactJob job;
  for (int r = 3; r >= 0; --r) job.Add(Rank(r, 4));
  job.SortByRank();
  ASSERT_EQ(job.ranks().size(), 4u);
  EXPECT_EQ(job.function_count(), 3u);  // the two gemm stacks are distinct identities
  const CompactRank& r0 = job.ranks()[0];
  const CompactRank& r3 = job.ranks()[3];
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(r3.rank, 3);
  EXPECT_TRUE(r0.functions.empty());
  EXPECT_TRUE(r0.process_groups.empty());
  ASSERT_EQ(r0.compact.size(), 3u);
  EXPECT_EQ(r0.compact[0].info, r3.compact[0].info);
  EXPECT_NE(r0.compact[0].id(), r0.compact[1].id());
  EXPECT_EQ(r0.compact[1].info->stack, "train.py(3): step");
  EXPECT_EQ(job.FindFunction(Fn("gemm", FunctionClass::kCompute, 1).Key()), r0.compact[0].info);
  EXPECT_EQ(job.FindFunction("no such key"), nullptr);
  EXPECT_FLOAT_EQ(r0.compact[0].per_iter_us, 5000);
  EXPECT_FLOAT_EQ(r0.compact[0].calls_per_iter, 2);
  // Collectives keep their numbers and their (interned) group.
  const CompactFunction& ar = r0.compact[2];
  EXPECT_EQ(ar.fclass(), FunctionClass::kCollective);
  EXPECT_FLOAT_EQ(r0.CollectiveOf(ar).busbw_gbps, 12.5);
  EXPECT_FLOAT_EQ(r0.CollectiveOf(ar).msg_bytes, 4 << 20);
  // Only for a function of its own that is a collective.
  EXPECT_EQ(r0.CollectiveOf(r0.compact[0]).msg_bytes, 0);
  EXPECT_EQ(r0.CollectiveOf(r3.compact[2]).msg_bytes, 0);
  EXPECT_FLOAT_EQ(r3.CollectiveOf(r3.compact[2]).msg_bytes, 4 << 20);
  EXPECT_EQ(job.Group(ar.group), "dp:0");
  EXPECT_EQ(job.ranks()[2].compact[2].group, ar.group);
  EXPECT_NE(job.ranks()[1].compact[2].group, ar.group);
  EXPECT_EQ(job.Group(CompactFunction::kNoGroup), "");
  // Process groups: one copy per distinct group, the rank's stage from its "pp" group.
  ASSERT_EQ(r0.groups.size(), 1u);
  EXPECT_EQ(r0.groups[0], job.ranks()[2].groups[0]);
  EXPECT_NE(r0.groups[0], job.ranks()[1].groups[0]);
  EXPECT_EQ(r0.role, 0);
  EXPECT_EQ(job.ranks()[2].role, 1);
  // Metadata survives.
  EXPECT_EQ(r3.host, "node-1");
  EXPECT_DOUBLE_EQ(r3.MeanIterationMs(), 10.5);
  EXPECT_FALSE(r0.has_self);
  EXPECT_FALSE(r0.any_main);
}

TEST(CompactJobTest, FlagsSelfTimesAndMainThread) {
  RankSummary r = Rank(0, 1);
  r.functions[1].self_per_iter_us = 300;
  r.functions[0].main_thread = true;
  CompactJob job;
  job.Add(r);
  EXPECT_TRUE(job.ranks()[0].has_self);
  EXPECT_TRUE(job.ranks()[0].any_main);
  EXPECT_TRUE(job.ranks()[0].compact[0].main_thread);
  EXPECT_FALSE(job.ranks()[0].compact[1].main_thread);
  EXPECT_EQ(r.functions.size(), 3u);  // Add(const&) leaves the summary alone
}

TEST(CompactJobTest, ConcurrentAddsInternConsistently) {
  CompactJob job;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&job, t] {
      for (int r = t; r < 400; r += 4) job.Add(Rank(r, 400));
    });
  for (auto& t : threads) t.join();
  job.SortByRank();
  ASSERT_EQ(job.ranks().size(), 400u);
  EXPECT_EQ(job.function_count(), 3u);
  for (int r = 0; r < 400; ++r) {
    EXPECT_EQ(job.ranks()[r].rank, r);
    EXPECT_EQ(job.ranks()[r].compact[0].info, job.ranks()[0].compact[0].info);
  }
}

TEST(CompactJobTest, LoadCompactJobStreamsSummariesAndChecksTheSet) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("pt_compact_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (int r = 0; r < 6; ++r)
    ASSERT_TRUE(
        WriteSummaryFile(Rank(r, 6), (dir / ("rank-" + std::to_string(r) + ".summary")).string())
            .ok());
  LoadStats stats;
  auto job = LoadCompactJob({dir.string()}, {.threads = 2}, &stats);
  ASSERT_TRUE(job.ok()) << job.status().message();
  ASSERT_EQ(job->ranks().size(), 6u);
  for (int r = 0; r < 6; ++r) EXPECT_EQ(job->ranks()[r].rank, r);
  EXPECT_EQ(stats.files, 6u);
  EXPECT_EQ(job->function_count(), 3u);

  // Two files claiming one rank: the same one-line error as LoadJob, files in a stable order.
  ASSERT_TRUE(WriteSummaryFile(Rank(2, 6), (dir / "zz-copy.summary").string()).ok());
  auto dup = LoadCompactJob({dir.string()});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("both claim rank 2"), std::string::npos)
      << dup.status().message();
  EXPECT_EQ(dup.status().message(), LoadJob({dir.string()}).status().message());
  fs::remove_all(dir);
}

void ExpectSameFunction(const CompactFunction& a, const CompactFunction& b) {
  EXPECT_EQ(a.info, b.info);
  EXPECT_EQ(a.per_iter_us, b.per_iter_us);
  EXPECT_EQ(a.self_per_iter_us, b.self_per_iter_us);
  EXPECT_EQ(a.calls_per_iter, b.calls_per_iter);
  EXPECT_EQ(a.mean_us, b.mean_us);
  EXPECT_EQ(a.cv, b.cv);
  EXPECT_EQ(a.iter_sd_us, b.iter_sd_us);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.main_thread, b.main_thread);
  EXPECT_EQ(a.top_level, b.top_level);
}

// A rank added as views (what the summary decoder hands over) is the rank added as patterns.
TEST(CompactJobTest, ViewsAddTheSameRankAsPatterns) {
  RankSummary r = Rank(1, 4);
  r.functions[0].iter_us = {1, 2, 4};
  r.functions[1].self_per_iter_us = 5;
  r.functions[2].main_thread = true;
  CompactJob job;
  job.Add(r);
  std::vector<FunctionView> views;
  for (const FunctionPattern& f : r.functions) views.push_back(FunctionView::Of(f));
  RankSummary rest = r;
  rest.source += ".views";  // sorts after the first
  rest.functions.clear();
  job.Add(std::move(rest), views);
  job.SortByRank();
  ASSERT_EQ(job.ranks().size(), 2u);
  EXPECT_EQ(job.function_count(), 3u);
  const CompactRank& a = job.ranks()[0];
  const CompactRank& b = job.ranks()[1];
  ASSERT_EQ(b.compact.size(), a.compact.size());
  for (size_t k = 0; k < a.compact.size(); ++k) {
    ExpectSameFunction(a.compact[k], b.compact[k]);
    EXPECT_EQ(a.CollectiveOf(a.compact[k]).msg_bytes, b.CollectiveOf(b.compact[k]).msg_bytes);
    EXPECT_EQ(a.CollectiveOf(a.compact[k]).busbw_gbps, b.CollectiveOf(b.compact[k]).busbw_gbps);
  }
  EXPECT_EQ(a.has_self, b.has_self);
  EXPECT_EQ(a.any_main, b.any_main);
  EXPECT_TRUE(b.has_self);
  EXPECT_TRUE(b.any_main);
  EXPECT_EQ(a.groups, b.groups);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(b.host, r.host);
  EXPECT_GT(a.compact[0].iter_sd_us, 0);
}

// Identities are what FunctionPattern::Key() says, a name or stack holding its separator
// included: two triples that make one key are one function, and FindFunction finds both kinds.
TEST(CompactJobTest, IdentitiesFollowTheKeyWithSeparatorsInNames) {
  RankSummary r = Rank(0, 1);
  r.functions.clear();
  r.functions.push_back(Fn("a\x1f" "b", FunctionClass::kCompute, 3, "c"));
  r.functions.push_back(Fn("a", FunctionClass::kCompute, 2, "b\x1f" "c"));
  r.functions.push_back(Fn("a", FunctionClass::kCompute, 1, "b"));
  FunctionPattern other_kind = Fn("a", FunctionClass::kCompute, 1, "b");
  other_kind.kind = trace::EventKind::kCpuOp;
  r.functions.push_back(other_kind);
  ASSERT_EQ(r.functions[0].Key(), r.functions[1].Key());
  CompactJob job;
  job.Add(r);
  const CompactRank& c = job.ranks()[0];
  EXPECT_EQ(job.function_count(), 3u);
  EXPECT_EQ(c.compact[0].info, c.compact[1].info);
  EXPECT_NE(c.compact[0].info, c.compact[2].info);
  EXPECT_NE(c.compact[2].info, c.compact[3].info);
  for (const FunctionPattern& f : r.functions) {
    const FunctionInfo* info = job.FindFunction(f.Key());
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->key, f.Key());
  }
  EXPECT_EQ(job.FindFunction(r.functions[3].Key()), c.compact[3].info);
}

// With the summary's string table, each name and stack is matched once however many functions
// share it; a reference that does not point at the view's own bytes is not trusted.
TEST(CompactJobTest, StringTableReferencesGiveTheSameIdentities) {
  const std::vector<std::string> bytes = {"gemm",
                                          "train.py(3): step",
                                          "a\x1f"
                                          "b",
                                          "",
                                          "c",
                                          "a",
                                          "b\x1f"
                                          "c"};
  const std::vector<std::string_view> table(bytes.begin(), bytes.end());
  const std::string elsewhere = "gemm";  // equal bytes, not the table's
  struct Use {
    std::string_view name;
    uint32_t name_ref;
    std::string_view stack;
    uint32_t stack_ref;
  };
  const std::vector<Use> uses = {
      {table[0], 0, table[3], 3},   // gemm, no stack
      {table[0], 0, table[1], 1},   // gemm at train.py
      {table[2], 2, table[4], 4},   // "a\x1fb" at "c" ...
      {table[5], 5, table[6], 6},   // ... and "a" at "b\x1fc": one key
      {elsewhere, 0, table[3], 3},  // gemm again, from other bytes
      {table[1], 4, table[3], 3},   // a wrong reference: its own name counts
  };
  RankSummary patterns = Rank(0, 1);
  patterns.functions.clear();
  std::vector<FunctionView> views;
  for (const Use& u : uses) {
    FunctionPattern f = Fn(std::string(u.name), FunctionClass::kCompute, 1, std::string(u.stack));
    patterns.functions.push_back(f);
    FunctionView v = FunctionView::Of(patterns.functions.back());
    v.name = u.name;
    v.stack = u.stack;
    v.name_ref = u.name_ref;
    v.stack_ref = u.stack_ref;
    views.push_back(v);
  }
  CompactJob by_table;
  RankSummary rest = patterns;
  rest.functions.clear();
  by_table.Add(std::move(rest), views, table);
  CompactJob by_pattern;
  by_pattern.Add(patterns);
  ASSERT_EQ(by_table.function_count(), by_pattern.function_count());
  EXPECT_EQ(by_table.function_count(), 4u);
  const CompactRank& t = by_table.ranks()[0];
  const CompactRank& p = by_pattern.ranks()[0];
  for (size_t k = 0; k < uses.size(); ++k) {
    EXPECT_EQ(t.compact[k].info->key, patterns.functions[k].Key()) << k;
    EXPECT_EQ(t.compact[k].id(), p.compact[k].id()) << k;
  }
  EXPECT_EQ(t.compact[0].info, t.compact[4].info);
  EXPECT_EQ(t.compact[2].info, t.compact[3].info);
  EXPECT_EQ(t.compact[5].info->name, "train.py(3): step");
}

// Iteration spreads, computed several functions at a time, are bit for bit the one-at-a-time
// formula, whatever mix of iteration counts the functions have.
TEST(CompactJobTest, IterationSpreadIsTheOneAtATimeFormula) {
  RankSummary r = Rank(0, 1);
  r.functions.clear();
  const std::vector<size_t> counts = {20, 20, 20, 20, 3, 20, 20, 20, 1, 0, 5, 5, 5, 5, 20, 7, 2};
  for (size_t i = 0; i < counts.size(); ++i) {
    FunctionPattern f = Fn("f" + std::to_string(i), FunctionClass::kCompute, 1);
    for (size_t k = 0; k < counts[i]; ++k)
      f.iter_us.push_back(1000.0f / static_cast<float>(3 + i + 7 * k) + 1e-3f * k);
    r.functions.push_back(f);
  }
  CompactJob job;
  job.Add(r);
  const CompactRank& c = job.ranks()[0];
  for (size_t i = 0; i < counts.size(); ++i) {
    const std::vector<float>& v = r.functions[i].iter_us;
    float want = 0;
    if (v.size() >= 2) {
      double sum = 0, sq = 0;
      for (float x : v) sum += x;
      const double mean = sum / static_cast<double>(v.size());
      for (float x : v) sq += (x - mean) * (x - mean);
      want = static_cast<float>(std::sqrt(sq / static_cast<double>(v.size() - 1)));
    }
    EXPECT_EQ(c.compact[i].iter_sd_us, want) << i;
  }
}

// A function measured in fewer of the rank's iterations (a window's torch trace: its first 4 of
// 10) has its spread scaled so that over the rank's 10 it gives its own 4 values' standard error.
TEST(CompactJobTest, ASpreadOfFewerIterationsThanTheRanksIsScaledToItsOwnStandardError) {
  RankSummary r = Rank(0, 1);
  r.functions.clear();
  r.iteration_ms.assign(10, 10);
  FunctionPattern all = Fn("python", FunctionClass::kPython, 1);
  all.iter_us = {1, 2, 3, 4, 5, 1, 2, 3, 4, 5};
  FunctionPattern part = Fn("aten::mm", FunctionClass::kCompute, 1);
  part.iter_us = {1, 3, 1, 3};  // standard deviation 2/sqrt(3)
  r.functions = {all, part};
  CompactJob job;
  job.Add(r);
  const CompactRank& c = job.ranks()[0];
  ASSERT_EQ(c.compact.size(), 2u);
  const float unscaled = static_cast<float>(2 / std::sqrt(3.0));
  for (const CompactFunction& f : c.compact) {
    if (f.name() == "aten::mm") {
      EXPECT_FLOAT_EQ(f.iter_sd_us, unscaled * static_cast<float>(std::sqrt(10.0 / 4)));
      EXPECT_FLOAT_EQ(f.iter_sd_us / std::sqrt(10.0f), unscaled / 2);  // its 4 values' error
    } else {
      EXPECT_FLOAT_EQ(f.iter_sd_us, static_cast<float>(std::sqrt(20.0 / 9)));  // as it was
    }
  }
}

// A job of summary files with a bad one: the same error as LoadJob (the first bad file).
TEST(CompactJobTest, LoadCompactJobReportsABadFileAsLoadJobDoes) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("pt_compact_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (int r = 0; r < 5; ++r) {
    ASSERT_TRUE(
        WriteSummaryFile(Rank(r, 5), (dir / ("rank-" + std::to_string(r) + ".summary")).string())
            .ok());
  }
  const std::string bytes = SerializeSummary(Rank(2, 5));
  {
    std::ofstream out(dir / "rank-2.summary", std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 7));
  }
  auto job = LoadCompactJob({dir.string()}, {.threads = 2});
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("rank-2.summary: truncated summary at byte"),
            std::string::npos)
      << job.status().message();
  EXPECT_EQ(job.status().message(), LoadJob({dir.string()}).status().message());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perftracker::pattern
