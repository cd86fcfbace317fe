#include "pattern/compact_job.h"

#include <gtest/gtest.h>

#include <filesystem>
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
  EXPECT_FLOAT_EQ(ar.busbw_gbps, 12.5);
  EXPECT_FLOAT_EQ(ar.msg_bytes, 4 << 20);
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

}  // namespace
}  // namespace perftracker::pattern
