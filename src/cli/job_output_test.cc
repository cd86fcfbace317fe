#include "cli/job_output.h"

#include <gtest/gtest.h>

#include <chrono>

namespace perftracker::cli {
namespace {

using std::chrono::seconds;

TEST(JobOutputTest, ProfilerChatterIsNoErrorOutput) {
  // Recorded: what a rank OOM-killed after a window had last written to stderr.
  EXPECT_TRUE(IsProfilerChatter(
      "USDT:2026-12-04 21:40:57 29210:29210 SyncActivityProfilerHandler.cpp:59] profiler_stop"));
  EXPECT_TRUE(
      IsProfilerChatter("STAGE:2024-05-01 10:00:00 1:1 ActivityProfilerController.cpp:314] "
                        "Completed Stage: Warm Up"));
  // Recorded (torch 2.13, a rank OOM-killed while its memory window recorded allocations).
  EXPECT_TRUE(IsProfilerChatter(
      "[rank1]:[W1206 04:42:37.122272307 CPUAllocator.cpp:245] Memory block of unknown size was "
      "allocated before the profiling started, profiler results will not include the "
      "deallocation event"));
  EXPECT_TRUE(IsProfilerChatter(
      "/x/torch/profiler/profiler.py:217: UserWarning: Profiler clears events at the end of each "
      "cycle.Only events from the current cycle will be reported."));
  EXPECT_FALSE(IsProfilerChatter("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"));
  EXPECT_FALSE(IsProfilerChatter("  File \"train.py\", line 12, in <module>"));
}

TEST(JobOutputTest, ElapsedAsMinutesThenHours) {
  EXPECT_EQ(Elapsed(seconds(0)), "0:00");
  EXPECT_EQ(Elapsed(seconds(84)), "1:24");
  EXPECT_EQ(Elapsed(seconds(3599)), "59:59");
  EXPECT_EQ(Elapsed(seconds(3723)), "1:02:03");
}

TEST(JobOutputTest, StatusLineBeforeTheFirstIteration) {
  EXPECT_EQ(StatusLine({}, seconds(5), 4),
            "perftracker 0:05 | starting: the detector learns the iteration");
}

TEST(JobOutputTest, StatusLineWithAWindow) {
  agent::AgentProgress p;
  p.ranks = 2;
  p.iteration = 137;
  p.iteration_ms = 84.34;
  p.window = 1;
  p.window_uploads = 2;
  EXPECT_EQ(StatusLine(p, seconds(24), 4),
            "perftracker 0:24 | iteration 137, 84.3 ms | detector: watching | window 1: "
            "profiling (2/4 uploaded)");
  p.trigger = "slowdown on rank 2";
  p.window_uploads = 4;
  EXPECT_EQ(StatusLine(p, seconds(24), 4),
            "perftracker 0:24 | iteration 137, 84.3 ms | detector: slowdown on rank 2 | "
            "window 1: uploaded");
  // --nproc 0: the ranks the agent saw count.
  p.ranks = 8;
  p.window_uploads = 4;
  EXPECT_EQ(StatusLine(p, seconds(24), 0),
            "perftracker 0:24 | iteration 137, 84.3 ms | detector: slowdown on rank 2 | "
            "window 1: profiling (4/8 uploaded)");
}

}  // namespace
}  // namespace perftracker::cli
