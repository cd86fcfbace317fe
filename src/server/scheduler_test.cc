// The online policy on a fake clock: no server, no sockets, no sleeps.
#include "server/scheduler.h"

#include <gtest/gtest.h>

namespace perftracker::server {
namespace {

using Action = WindowScheduler::SlowdownAction;

class SchedulerTest : public ::testing::Test {
 protected:
  using Time = WindowScheduler::Time;
  Time At(double seconds) const {
    return t0_ + std::chrono::duration_cast<WindowScheduler::Clock::duration>(
                     std::chrono::duration<double>(seconds));
  }
  // Opens window ID at time T the way the adapter does for a scheduled or triggered window.
  void Open(WindowScheduler& s, int64_t id, int64_t start, double t, bool slowdown = false,
            double mean_ms = 0) {
    s.Opened(id, start, At(t), slowdown, mean_ms);
  }
  Time t0_ = WindowScheduler::Clock::now();
};

TEST_F(SchedulerTest, StartIterationLeadsByIterationsAndBySeconds) {
  WindowScheduler s({}, At(0));
  EXPECT_EQ(s.StartIteration({}), 0);  // no iterations yet: the next one
  // 100 ms iterations: 2 s ahead is 20 iterations, more than the 5-iteration lead.
  EXPECT_EQ(s.StartIteration({.furthest_step = 40, .mean_iteration_ms = 100}), 60);
  // 1 s iterations: the 5-iteration lead is the larger.
  EXPECT_EQ(s.StartIteration({.furthest_step = 40, .mean_iteration_ms = 1000}), 45);
  EXPECT_EQ(s.Iterations(0), 10);
  EXPECT_EQ(s.Iterations(3), 3);
}

TEST_F(SchedulerTest, SlowdownsCoolDownAfterTheirWindowUnlessTheyEscalate) {
  WindowScheduler s({}, At(0));
  ASSERT_EQ(s.OnSlowdown(100, 120, "slow", At(10)), Action::kOpen);
  Open(s, 1, 110, 10, /*slowdown=*/true, 120);
  EXPECT_EQ(s.slowdown_window(), 1);
  s.Closed(1, At(20));
  EXPECT_EQ(s.open_window(), 0);
  // Another rank fires on the same slowdown: ignored during the 60 s cooldown.
  EXPECT_EQ(s.OnSlowdown(300, 125, "slow", At(30)), Action::kIgnore);
  // A much bigger slowdown (over 1.25x the one profiled) is a new one.
  EXPECT_EQ(s.OnSlowdown(310, 160, "slower", At(31)), Action::kOpen);
  // After the cooldown the same level opens a window again.
  EXPECT_EQ(s.OnSlowdown(900, 125, "slow", At(81)), Action::kOpen);
}

TEST_F(SchedulerTest, DuringTheCooldownASlowdownBeyondWhatTheWindowMeasuredIsANewOne) {
  WindowScheduler s({}, At(0));
  Open(s, 1, /*start=*/100, 1);  // the baseline
  // Noise before it starts: the triggers join it (the job ran at 27.5 ms for a while).
  ASSERT_EQ(s.OnSlowdown(84, 25.3, "noise", At(1)), Action::kOpen);
  ASSERT_EQ(s.OnSlowdown(90, 27.5, "noise", At(1)), Action::kOpen);
  s.Closed(1, At(3));
  s.Measured(1, 24.2);  // its diagnosis: the job ran at 24.2 ms in the window
  // A real fault, 1.13x the noise's trigger but 1.29x what the window measured: a new one.
  EXPECT_EQ(s.OnSlowdown(310, 31.1, "fault", At(7)), Action::kOpen);
  Open(s, 2, 330, 8, /*slowdown=*/true, 31.1);
  s.Closed(2, At(10));
  // A lasting slowdown: every detector fires again after the window, at what it measured.
  s.Measured(2, 33.0);
  EXPECT_EQ(s.OnSlowdown(400, 34.5, "again", At(12)), Action::kIgnore);
  EXPECT_NE(s.IgnoredBecause().find("cooling down after slowdown window 2"), std::string::npos);
  // Another window's measure says nothing of the slowdown window.
  s.Measured(1, 10.0);
  EXPECT_EQ(s.OnSlowdown(401, 34.5, "again", At(12)), Action::kIgnore);
}

TEST_F(SchedulerTest, OtherWindowsDoNotCoolSlowdownsDown) {
  WindowScheduler s({}, At(0));
  Open(s, 1, 50, 5);  // a user's window
  s.Closed(1, At(8));
  EXPECT_EQ(s.OnSlowdown(200, 120, "slow", At(9)), Action::kOpen);
}

TEST_F(SchedulerTest, ASlowdownAfterTheOpenWindowStartedGetsAWindowOfItsOwn) {
  WindowScheduler s({}, At(0));
  Open(s, 1, /*start=*/100, 1);  // the baseline, profiling from iteration 100
  // Seen before the baseline's iterations: the baseline profiles it (joined).
  EXPECT_EQ(s.OnSlowdown(90, 130, "early", At(2)), Action::kOpen);
  EXPECT_EQ(s.slowdown_window(), 1);
  WindowScheduler s2({}, At(0));
  Open(s2, 1, 100, 1);
  EXPECT_EQ(s2.OnSlowdown(105, 130, "late", At(2)), Action::kFollowUp);
  EXPECT_FALSE(s2.Due({}, At(3)));  // not while the baseline is open
  s2.Closed(1, At(4));
  auto due = s2.Due({}, At(4));
  ASSERT_TRUE(due);
  EXPECT_EQ(due->reason, "late");
  EXPECT_TRUE(due->slowdown);
  EXPECT_EQ(due->mean_ms, 130);
  Open(s2, 2, 200, 4, due->slowdown, due->mean_ms);
  EXPECT_EQ(s2.slowdown_window(), 2);
  EXPECT_FALSE(s2.Due({}, At(5)));  // the follow-up is taken once
}

TEST_F(SchedulerTest, AHangIsConfirmedOnlyWhenNoRankProgressed) {
  ScheduleOptions o;
  o.hang_confirm_seconds = 5;
  WindowScheduler s(o, At(0));
  s.OnHangTrigger(/*rank=*/2, 100, /*furthest_step=*/50, At(10));
  EXPECT_TRUE(s.pending_hang());
  EXPECT_FALSE(s.TakeConfirmedHang(At(14)));
  // A rank reached step 51: an epoch boundary, not a hang.
  EXPECT_EQ(s.Progressed(51), 2);
  EXPECT_FALSE(s.TakeConfirmedHang(At(20)));
  // A second trigger with no progress after it is confirmed after 5 s.
  s.OnHangTrigger(3, 100, 51, At(30));
  EXPECT_FALSE(s.Progressed(51));  // the same step again is no progress
  auto h = s.TakeConfirmedHang(At(35));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->rank, 3);
  EXPECT_EQ(h->since, At(30));
  EXPECT_FALSE(s.pending_hang());
}

TEST_F(SchedulerTest, AReportedHangHoldsTriggersUntilIterationsResume) {
  ScheduleOptions o;
  o.hang_confirm_seconds = 0;  // at once
  WindowScheduler s(o, At(0));
  s.OnHangTrigger(0, 100, 70, At(1));
  ASSERT_TRUE(s.TakeConfirmedHang(At(1)));
  s.HangStarted(70);
  EXPECT_TRUE(s.collecting_hang());
  s.OnHangTrigger(1, 100, 70, At(2));  // another rank's trigger on the same hang
  EXPECT_FALSE(s.TakeConfirmedHang(At(2)));
  EXPECT_EQ(s.OnSlowdown(70, 900, "slow", At(2)), Action::kIgnore);
  s.HangFinished();
  EXPECT_FALSE(s.collecting_hang());
  EXPECT_EQ(s.OnSlowdown(70, 900, "slow", At(3)), Action::kIgnore);
  s.OnHangTrigger(1, 100, 70, At(3));
  EXPECT_FALSE(s.TakeConfirmedHang(At(9)));
  // Iterations resumed: the next hang is a new one, slowdowns count again.
  s.Progressed(71);
  EXPECT_EQ(s.OnSlowdown(80, 900, "slow", At(10)), Action::kOpen);
  s.OnHangTrigger(1, 100, 90, At(11));
  EXPECT_TRUE(s.TakeConfirmedHang(At(11)));
}

TEST_F(SchedulerTest, AHangAfterWhichIterationsResumeWasSlowNotHung) {
  ScheduleOptions o;
  o.hang_confirm_seconds = 0;
  o.baseline_window = false;
  WindowScheduler s(o, At(0));
  s.OnHangTrigger(2, 400, 30, At(1));
  ASSERT_TRUE(s.TakeConfirmedHang(At(1)));
  s.HangStarted(30);
  s.Progressed(30);  // no further than where the job stood: still stuck
  s.HangFinished();
  EXPECT_FALSE(s.TakeResumedHang());
  EXPECT_FALSE(s.Due({30, 400, 30}, At(5)));
  s.Progressed(31);  // the slow rank finished its iteration
  EXPECT_EQ(s.TakeResumedHang(), 31);
  EXPECT_FALSE(s.TakeResumedHang());  // once
  // A window follows to profile the rank that was slow.
  auto due = s.Due({31, 400, 31}, At(6));
  ASSERT_TRUE(due);
  EXPECT_TRUE(due->slowdown);
  EXPECT_NE(due->reason.find("slow, not hung"), std::string::npos);
}

TEST_F(SchedulerTest, IterationsResumingWhileStacksAreCollectedAmendAtOnce) {
  ScheduleOptions o;
  o.hang_confirm_seconds = 0;
  WindowScheduler s(o, At(0));
  s.OnHangTrigger(2, 400, 30, At(1));
  ASSERT_TRUE(s.TakeConfirmedHang(At(1)));
  s.HangStarted(30);
  s.Progressed(32);
  EXPECT_FALSE(s.TakeResumedHang());  // not diagnosed yet: nothing to amend
  s.HangFinished();
  EXPECT_EQ(s.TakeResumedHang(), 32);
  // Not held as a reported hang: a new hang trigger counts.
  s.OnHangTrigger(2, 400, 40, At(9));
  EXPECT_TRUE(s.TakeConfirmedHang(At(9)));
}

TEST_F(SchedulerTest, TheBaselineWaitsForEveryRanksWarmUp) {
  WindowScheduler s({}, At(0));
  EXPECT_FALSE(s.Due({.fewest_iterations = -1}, At(1)));  // no rank known yet
  EXPECT_FALSE(s.Due({.fewest_iterations = 19}, At(2)));
  auto due = s.Due({.fewest_iterations = 20}, At(3));
  ASSERT_TRUE(due);
  EXPECT_NE(due->reason.find("baseline"), std::string::npos);
  EXPECT_FALSE(due->slowdown);
  Open(s, 1, 30, 3);
  s.Closed(1, At(10));
  EXPECT_FALSE(s.Due({.fewest_iterations = 500}, At(1000)));  // once; no periodic by default
  // A new job on the server gets a baseline of its own.
  s.NewJob();
  EXPECT_TRUE(s.Due({.fewest_iterations = 20}, At(1001)));
}

TEST_F(SchedulerTest, ANewAttemptStartsAfreshLikeANewJob) {
  ScheduleOptions o;
  o.hang_confirm_seconds = 0;
  WindowScheduler s(o, At(0));
  ASSERT_TRUE(s.Due({.fewest_iterations = 20}, At(1)));  // attempt 0's baseline
  Open(s, 1, 30, 1);
  s.Closed(1, At(5));
  ASSERT_EQ(s.OnSlowdown(50, 120, "slow", At(6)), Action::kOpen);
  Open(s, 2, 60, 6, /*slowdown=*/true, 120);
  s.Closed(2, At(9));
  // A rank died; the others hung in a collective and a hang was reported at step 70.
  s.OnHangTrigger(1, 100, 70, At(10));
  ASSERT_TRUE(s.TakeConfirmedHang(At(10)));
  s.HangStarted(70);
  s.HangFinished();
  EXPECT_EQ(s.OnSlowdown(5, 130, "slow", At(11)), Action::kIgnore);
  // torchrun started every rank again: their iterations count from 0, and nothing of the
  // old processes holds the new ones back.
  s.NewAttempt();
  EXPECT_FALSE(s.Due({.fewest_iterations = 19}, At(12)));
  ASSERT_TRUE(s.Due({.fewest_iterations = 20}, At(13)));  // attempt 1's own baseline
  Open(s, 3, 25, 13);
  s.Closed(3, At(16));
  EXPECT_EQ(s.OnSlowdown(40, 125, "slow", At(17)), Action::kOpen);  // no cooldown, no hang
  s.OnHangTrigger(2, 100, 45, At(18));
  EXPECT_TRUE(s.TakeConfirmedHang(At(18)));
}

TEST_F(SchedulerTest, PeriodicWindowsCountFromTheLastOpened) {
  ScheduleOptions o;
  o.baseline_window = false;
  o.profile_every_seconds = 60;
  WindowScheduler s(o, At(0));
  EXPECT_FALSE(s.Due({}, At(59)));
  auto due = s.Due({}, At(60));
  ASSERT_TRUE(due);
  EXPECT_EQ(due->reason, "periodic: every 60 s");
  Open(s, 1, 0, 60);
  s.Closed(1, At(90));
  EXPECT_FALSE(s.Due({}, At(119)));
  EXPECT_TRUE(s.Due({}, At(120)));
  // A pending hang holds scheduled windows back.
  s.OnHangTrigger(0, 100, 5, At(121));
  EXPECT_FALSE(s.Due({}, At(200)));
}

TEST_F(SchedulerTest, UserTriggersHaveACooldownPerCaller) {
  WindowScheduler s({}, At(0));
  EXPECT_TRUE(s.OnUserTrigger("ipv4:10.0.0.1", At(0)).ok());
  Open(s, 1, 10, 0);
  // Joining the open window is free.
  EXPECT_TRUE(s.OnUserTrigger("ipv4:10.0.0.1", At(1)).ok());
  s.Closed(1, At(5));
  Status again = s.OnUserTrigger("ipv4:10.0.0.1", At(10));
  EXPECT_EQ(again.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(again.message(),
            "a window was requested from here 10 s ago; one per 30 s (try again in 20 s)");
  EXPECT_TRUE(s.OnUserTrigger("ipv4:10.0.0.2", At(10)).ok());  // another host
  EXPECT_TRUE(s.OnUserTrigger("ipv4:10.0.0.1", At(30)).ok());
}

}  // namespace
}  // namespace perftracker::server
