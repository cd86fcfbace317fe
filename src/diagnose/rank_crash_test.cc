#include "diagnose/rank_crash.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <string>

namespace perftracker::diagnose {
namespace {

pattern::CollectiveLog Rank1InAllReduce() {
  pattern::CollectiveLog log;
  log.rank = 1;
  pattern::CollectiveCall done;
  done.group = "0";
  done.group_desc = "default_pg";
  done.seq = 8;
  done.op = "barrier";
  done.state = "completed";
  pattern::CollectiveCall extra = done;
  extra.seq = 9;
  extra.op = "all_reduce";
  extra.sizes = {{7}};
  extra.dtypes = {"Float"};
  extra.state = "scheduled";
  extra.frames = {{"/job/train.py", 145, "train_step"}};
  log.calls = {done, extra};
  return log;
}

TEST(RankCrashTest, NamesTheSignalTheCollectiveAndTheError) {
  RankExit exit{1,
                128 + SIGABRT,
                SIGABRT,
                {"terminate called after throwing an instance of 'gloo::EnforceNotMet'",
                 "  what():  op.preamble.length <= op.nbytes. 132160 vs 4"}};
  Finding f = RankCrashFinding(exit, {Rank1InAllReduce()});
  EXPECT_EQ(f.category, Category::kRankCrash);
  EXPECT_EQ(f.ranks, std::vector<int>{1});
  EXPECT_EQ(f.evidence.at("signal"), SIGABRT);
  EXPECT_EQ(f.evidence.at("collective_seq"), 9);
  EXPECT_EQ(f.summary,
            "rank 1 failed first: killed by SIGABRT (exit code 134) in collective #9 on group 0 "
            "(default_pg), all_reduce of 7 Float at /job/train.py:145; its last error output: "
            "what():  op.preamble.length <= op.nbytes. 132160 vs 4");
  ASSERT_EQ(f.functions.size(), 1u);
  EXPECT_EQ(f.functions[0].name, "/job/train.py:145 in train_step");
}

TEST(CrashOutOfStepFinding, NamesTheCrashedRanksCollectiveWhereGlooSawItsPeersSizesDiffer) {
  // Recorded on torch 1.13 (test_collectives' extra collective): rank 1's ring holds its
  // all_reduce of 7 floats; its peers' rings hold nothing (DDP's all-reduce is C++).
  RankExit exit{1,
                128 + SIGABRT,
                SIGABRT,
                {"terminate called after throwing an instance of 'gloo::EnforceNotMet'",
                 "  what():  [enforce fail at ./gloo/transport/tcp/pair.cc:510] "
                 "op.preamble.length <= op.nbytes. 99976 vs 4"}};
  std::optional<Finding> f = CrashOutOfStepFinding(exit, {Rank1InAllReduce()}, {0, 1, 2, 3});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->category, Category::kCollectiveMismatch);
  EXPECT_EQ(f->ranks, std::vector<int>{1});
  EXPECT_EQ(f->evidence.at("collective_seq"), 9);
  EXPECT_EQ(f->summary,
            "collectives out of step: rank 1's collective #9 on group 0 (default_pg) is "
            "all_reduce of 7 Float at /job/train.py:145; ranks 0,2,3 sent it data of another "
            "size (op.preamble.length <= op.nbytes. 99976 vs 4): they were in another "
            "collective, one their record does not hold (the worker's ring records the "
            "collectives made through torch.distributed's Python API, not DDP's gradient "
            "all-reduces)");
  // A crash whose error says nothing of its peers' sizes, or a rank in no collective: none.
  RankExit other = exit;
  other.error_tail = {"RuntimeError: injected"};
  EXPECT_FALSE(CrashOutOfStepFinding(other, {Rank1InAllReduce()}, {0, 1, 2, 3}).has_value());
  pattern::CollectiveLog done = Rank1InAllReduce();
  done.progress["0"].last_completed = 9;
  EXPECT_FALSE(CrashOutOfStepFinding(exit, {done}, {0, 1, 2, 3}).has_value());
  EXPECT_FALSE(CrashOutOfStepFinding(exit, {}, {0, 1, 2, 3}).has_value());
}

TEST(RankCrashTest, ARankPastItsLastCollectiveIsInNone) {
  // Measured (a rank that raised between steps, torch 2.13 gloo): its Flight Recorder leaves
  // DDP's all-reduce #35 "scheduled", but the group's progress says #35 completed.
  pattern::CollectiveLog log = Rank1InAllReduce();
  log.progress["0"].last_completed = 9;
  Finding f = RankCrashFinding({1, 1, 0, {"RuntimeError: injected"}}, {log});
  EXPECT_EQ(f.summary,
            "rank 1 failed first: exited with code 1; its last error output: "
            "RuntimeError: injected");
}

TEST(RankCrashTest, AnExitWithoutRingOrOutputIsStillNamed) {
  Finding f = RankCrashFinding({3, 1, 0, {}}, {Rank1InAllReduce()});
  EXPECT_EQ(f.summary, "rank 3 failed first: exited with code 1");
  EXPECT_EQ(f.evidence.count("signal"), 0u);
  EXPECT_TRUE(f.functions.empty());
}

TEST(RankCrashTest, AnOomKillSaysOutOfMemoryAndWhichLimit) {
  // Recorded (issue 37): a rank leaking in a 512 MiB cgroup, ended by its OOM killer; its last
  // stderr line was the profiler's (the launcher leaves those out of the tail now).
  RankExit e{1, 137, SIGKILL, {}};
  e.oom_killed = true;
  e.memory_limit_bytes = 512.0 * 1024 * 1024;
  e.rss_bytes = 498.0 * 1024 * 1024;
  e.cgroup_usage_bytes = 511.0 * 1024 * 1024;
  e.last_iteration = 212;
  Finding f = RankCrashFinding(e, {});
  EXPECT_EQ(f.summary,
            "rank 1 failed first: out of memory: killed by the kernel's OOM killer (SIGKILL, exit "
            "code 137) at its memory cgroup's limit of 512 MiB (resident 498 MiB, its cgroup "
            "using 511 MiB at iteration 212)");
  EXPECT_EQ(f.evidence.at("oom_kill"), 1);
  EXPECT_EQ(f.cause, Cause::kConfiguration);
  EXPECT_NE(f.suggestion.find("out of the memory"), std::string::npos);
  // The same SIGKILL without a counted kill (a user's kill -9) says no more than the signal.
  e.oom_killed = false;
  EXPECT_EQ(RankCrashFinding(e, {}).summary,
            "rank 1 failed first: killed by SIGKILL (exit code 137)");
}

TEST(RankCrashTest, AnOomKillNamesTheGrowthThatLedThere) {
  RankExit e{1, 137, SIGKILL, {}};
  e.oom_killed = true;
  e.memory_limit_bytes = 512.0 * 1024 * 1024;
  auto growth = [](std::vector<int> ranks, const char* memory) {
    Finding g;
    g.category = Category::kMemoryGrowth;
    g.ranks = std::move(ranks);
    g.evidence["bytes_per_iteration"] = 4.0 * 1024 * 1024;
    g.evidence["first_iteration"] = 60;
    if (memory != nullptr) g.evidence_text["memory"] = memory;
    return g;
  };
  Finding f = RankCrashFinding(e, {});
  NameGrowthBeforeOom({growth({0}, nullptr), growth({1}, "gpu"), growth({1, 2}, nullptr)}, &f);
  EXPECT_EQ(f.summary,
            "rank 1 failed first: out of memory: killed by the kernel's OOM killer (SIGKILL, exit "
            "code 137) at its memory cgroup's limit of 512 MiB; its memory had grown +4.0 MiB per "
            "iteration since iteration 60 (memory_growth)");
  EXPECT_EQ(f.evidence.at("memory_growth_first_iteration"), 60);
  // Said before the error output, which ends the summary.
  RankExit with_error = e;
  with_error.error_tail = {"MemoryError"};
  Finding said = RankCrashFinding(with_error, {});
  NameGrowthBeforeOom({growth({1}, nullptr)}, &said);
  EXPECT_TRUE(said.summary.ends_with(
      "since iteration 60 (memory_growth); its last error output: MemoryError"))
      << said.summary;
  EXPECT_EQ(f.evidence.at("memory_growth_bytes_per_iteration"), 4.0 * 1024 * 1024);
  // Another rank's growth, the other memory's, or a crash that was not out of memory: nothing.
  Finding alone = RankCrashFinding(e, {});
  NameGrowthBeforeOom({growth({0}, nullptr), growth({1}, "gpu")}, &alone);
  EXPECT_EQ(alone.evidence.count("memory_growth_first_iteration"), 0u);
  e.oom_killed = false;
  Finding killed = RankCrashFinding(e, {});
  NameGrowthBeforeOom({growth({1}, nullptr)}, &killed);
  EXPECT_EQ(killed.summary, "rank 1 failed first: killed by SIGKILL (exit code 137)");
}

TEST(RankCrashTest, ACudaOutOfMemoryErrorSaysOutOfGpuMemoryAndWhetherFragmented) {
  RankExit e{3, 1, 0, {}};
  e.error_tail = {
      "Traceback (most recent call last):",
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
      "capacity of 79.15 GiB of which 1.19 GiB is free. Including non-PyTorch memory, this "
      "process has 77.95 GiB memory in use. Of the allocated memory 75.30 GiB is allocated by "
      "PyTorch, and 1.52 GiB is reserved by PyTorch but unallocated."};
  Finding f = RankCrashFinding(e, {});
  EXPECT_EQ(f.summary.substr(0, f.summary.find(';')),
            "rank 3 failed first: out of GPU memory: CUDA's allocator could not allocate 2.00 GiB "
            "on GPU 3 (79.15 GiB total, 1.19 GiB free, 75.30 GiB in PyTorch's tensors, 1.52 GiB "
            "cached by PyTorch but unallocated)");
  EXPECT_EQ(f.evidence.at("gpu_oom"), 1);
  EXPECT_EQ(f.evidence.at("gpu"), 3);
  EXPECT_EQ(f.cause, Cause::kConfiguration);
  EXPECT_EQ(f.suggestion.find("fragmentation"), std::string::npos);  // 1.52 GiB < 2 GiB asked
  // Cached but unallocated memory of at least the request: fragmentation.
  e.error_tail = {
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 "
      "has a total capacity of 79.15 GiB of which 100.00 MiB is free. Of the "
      "allocated memory 70.00 GiB is allocated by PyTorch, and 8.00 GiB is reserved "
      "by PyTorch but unallocated."};
  f = RankCrashFinding(e, {});
  EXPECT_NE(f.suggestion.find("expandable_segments"), std::string::npos) << f.suggestion;
  EXPECT_EQ(f.evidence_text.count("memory_snapshot"), 0u);
  // The allocator's snapshot its collector saved: named, for memory_viz.
  e.memory_snapshot = "/r/memory/rank_0.cuda_oom.pickle";
  f = RankCrashFinding(e, {});
  EXPECT_EQ(f.evidence_text.at("memory_snapshot"), "/r/memory/rank_0.cuda_oom.pickle");
  EXPECT_THAT(f.summary, testing::HasSubstr("; the allocator's state then: "
                                            "/r/memory/rank_0.cuda_oom.pickle (PyTorch's "
                                            "memory_viz reads it)"));
  // Any other error: as before, a snapshot or not.
  e.error_tail = {"RuntimeError: shapes cannot be multiplied"};
  EXPECT_EQ(RankCrashFinding(e, {}).evidence.count("gpu_oom"), 0u);
  EXPECT_EQ(RankCrashFinding(e, {}).evidence_text.count("memory_snapshot"), 0u);
}

TEST(RankCrashTest, APeerThatLostItsConnectionIsNotTheRankThatFailed) {
  // Recorded on CI (gloo, torch 1.13): rank 1 raised, rank 0 blocked in an all-reduce with it
  // failed on its closed connection and was reaped first.
  const RankExit echo{0,
                      1,
                      0,
                      {"    work.wait()",
                       "RuntimeError: [/build/pytorch/third_party/gloo/gloo/transport/tcp/"
                       "pair.cc:598] Connection closed by peer [127.0.0.1]:43591"}};
  const RankExit own{
      1,
      1,
      0,
      {"    raise RuntimeError(\"injected failure\")", "RuntimeError: injected failure on rank 1"}};
  EXPECT_TRUE(LostAPeer(echo.error_tail));
  EXPECT_FALSE(LostAPeer(own.error_tail));
  EXPECT_EQ(FirstToBlame({echo, own}), 1u);
  EXPECT_EQ(FirstToBlame({own, echo}), 0u);
  // A rank killed without a word (the OOM killer) is its own failure too.
  const RankExit killed{2, 137, SIGKILL, {}};
  EXPECT_EQ(FirstToBlame({echo, killed}), 1u);
  // Where every one lost a peer (a link that failed), the first that ended.
  const RankExit nccl{3,
                      1,
                      0,
                      {"torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:"
                       "1970, remote process exited or there was a network error"}};
  EXPECT_EQ(FirstToBlame({echo, nccl}), 0u);
  EXPECT_EQ(FirstToBlame({nccl}), 0u);
}

}  // namespace
}  // namespace perftracker::diagnose
