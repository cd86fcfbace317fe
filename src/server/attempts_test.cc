#include "server/attempts.h"

#include <gtest/gtest.h>

#include <string>

namespace perftracker::server {
namespace {

using P = AttemptLog::Placement;

// Ranks 0-3 on host "vm" in processes 100 + rank, restart count RESTART, N iterations up to STEP.
void RunRanks(AttemptLog* log, int pid_base, int restart, int64_t step) {
  for (int r = 0; r < 4; ++r) {
    AttemptLog::Placed p = log->Place(r, pid_base + r, restart, "vm");
    log->Progress(p.attempt, r, step, step + 1);
  }
}

TEST(Attempts, OneAttemptWhileEveryRankKeepsItsProcess) {
  AttemptLog log;
  RunRanks(&log, 100, 0, 10);
  RunRanks(&log, 100, 0, 20);
  EXPECT_EQ(log.current(), 0);
  EXPECT_EQ(log.attempts().size(), 1u);
  const Attempt& a = log.Current();
  EXPECT_EQ(a.LastStep(), 20);
  EXPECT_EQ(a.ranks.at(2).pid, 102);
  EXPECT_EQ(a.ranks.at(2).iterations, 32);
}

TEST(Attempts, ARankInANewProcessBeginsTheNextAttempt) {
  AttemptLog log;
  RunRanks(&log, 100, 0, 59);
  // Rank 1 was killed; the others' Python raised and exited; torchrun started all four again.
  log.Ended(1, 101, 0, /*clean=*/false, 59, 1000.0, "vm");
  for (int r : {0, 2, 3}) log.Ended(r, 100 + r, 0, true, 58, 1000.5 + r, "vm");
  AttemptLog::Placed p = log.Place(2, 202, 1, "vm");
  EXPECT_EQ(p.placement, P::kNew);
  EXPECT_EQ(p.attempt, 1);
  // The others join it; none begins a third.
  for (int r : {0, 1, 3}) EXPECT_EQ(log.Place(r, 200 + r, 1, "vm").placement, P::kCurrent);
  ASSERT_EQ(log.attempts().size(), 2u);
  EXPECT_EQ(log.Current().restart_count, 1);
  // Its iterations follow the first attempt's on the run's chart.
  EXPECT_EQ(log.Current().run_offset, 60);

  diagnose::AttemptInfo first = AttemptLog::Info(log.attempts().front());
  EXPECT_EQ(first.ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(first.pids.at(1), 101);
  EXPECT_EQ(first.last_iteration, 59);
  ASSERT_EQ(first.ends.size(), 4u);
  EXPECT_EQ(first.ends[0].rank, 1);  // the first to end
  EXPECT_FALSE(first.ends[0].clean);
  EXPECT_NE(first.summary.find("attempt 0 (restart count 0): ranks 0-3, pids 100,101,102,103 "
                               "on vm; up to iteration 59; ended: rank 1 (pid 101 on vm) first, "
                               "killed or crashed (no exit hook), after iteration 59, then ranks "
                               "0,2,3 (3 exited, 0 killed or crashed)"),
            std::string::npos)
      << first.summary;
  std::vector<diagnose::AttemptInfo> report = log.Report();
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[1].attempt, 1);
  EXPECT_EQ(report[1].restart_count, 1);
  EXPECT_EQ(report[1].pids.at(0), 200);
}

TEST(Attempts, LateNewsFromAnEarlierAttemptStaysThere) {
  AttemptLog log;
  RunRanks(&log, 100, 0, 30);
  EXPECT_EQ(log.Place(0, 200, 1, "vm").placement, P::kNew);
  // Rank 3's last batch of attempt 0 arrives after attempt 1 began: it is attempt 0's, and it
  // does not make rank 3's own restart look like a third attempt.
  AttemptLog::Placed late = log.Place(3, 103, 0, "vm");
  EXPECT_EQ(late.placement, P::kEarlier);
  EXPECT_EQ(late.attempt, 0);
  log.Progress(late.attempt, 3, 31, 1);
  EXPECT_EQ(log.Place(3, 203, 1, "vm").placement, P::kCurrent);
  EXPECT_EQ(log.attempts().front().ranks.at(3).last_step, 31);
  log.Ended(3, 103, 0, false, 31, 5.0, "vm");
  EXPECT_TRUE(log.attempts().front().ranks.at(3).ended);
  EXPECT_FALSE(log.Current().ranks.at(3).ended);
  EXPECT_EQ(log.current(), 1);
}

TEST(Attempts, ANodeWhoseLauncherDidNotCountTheRestartStillBeginsOne) {
  // torchrun counts restarts per node: the node whose rank failed says 1, the other node's
  // workers are started again with 0. Either may report first; there is one new attempt.
  AttemptLog log;
  RunRanks(&log, 100, 0, 40);
  EXPECT_EQ(log.Place(2, 302, 0, "nodeB").placement, P::kNew);  // the healthy node first
  EXPECT_EQ(log.Place(3, 303, 0, "nodeB").placement, P::kCurrent);
  EXPECT_EQ(log.Place(0, 200, 1, "nodeA").placement, P::kCurrent);
  EXPECT_EQ(log.Place(1, 201, 1, "nodeA").placement, P::kCurrent);
  EXPECT_EQ(log.attempts().size(), 2u);
  EXPECT_EQ(log.Current().restart_count, 1);
  diagnose::AttemptInfo info = AttemptLog::Info(log.Current());
  EXPECT_EQ(info.hosts, (std::vector<std::string>{"nodeA", "nodeB"}));
}

TEST(Attempts, APidReusedWithAHigherRestartCountIsANewProcess) {
  AttemptLog log;
  RunRanks(&log, 100, 0, 5);
  EXPECT_EQ(log.Place(0, 100, 1, "vm").placement, P::kNew);
}

TEST(Attempts, UnknownProcessesStayInTheCurrentAttempt) {
  AttemptLog log;
  EXPECT_EQ(log.Place(0, 0, 0, "").placement, P::kCurrent);
  EXPECT_EQ(log.Place(0, 0, 3, "").placement, P::kCurrent);
  EXPECT_EQ(log.Place(0, 55, 0, "vm").placement, P::kCurrent);  // its pid learned now
  EXPECT_EQ(log.attempts().size(), 1u);
}

TEST(Attempts, ARankThatDiedBeforeItsFirstIterationIsRecorded) {
  AttemptLog log;
  RunRanks(&log, 100, 0, 3);
  log.Ended(7, 107, 0, false, -1, 1.0, "vm");  // rank 7 never reported an iteration
  EXPECT_EQ(log.Current().ranks.at(7).pid, 107);
  // Its replacement begins the next attempt.
  EXPECT_EQ(log.Place(7, 207, 1, "vm").placement, P::kNew);
  // An end of a process no attempt knows, from a lower restart count, is dropped.
  log.Ended(5, 105, 0, false, -1, 2.0, "vm");
  EXPECT_EQ(log.Current().ranks.count(5), 0u);
  EXPECT_EQ(AttemptLog::Info(log.attempts().front()).summary.find("no iteration"),
            std::string::npos);
}

TEST(Attempts, ARestartLoopKeepsTheNewestAttempts) {
  AttemptLog log;
  for (size_t i = 0; i < AttemptLog::kMaxAttempts + 10; ++i)
    log.Place(0, 1000 + static_cast<int>(i), static_cast<int>(i), "vm");
  EXPECT_EQ(log.attempts().size(), AttemptLog::kMaxAttempts);
  EXPECT_EQ(log.dropped(), 10u);
  EXPECT_EQ(log.current(), static_cast<int>(AttemptLog::kMaxAttempts) + 9);
  EXPECT_EQ(log.Report().size(), AttemptLog::kMaxAttempts);
}

}  // namespace
}  // namespace perftracker::server
