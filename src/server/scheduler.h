// The online policy of the server, apart from its transport: when a profiling window opens and
// at which iteration it starts, when a worker's slowdown trigger is ignored (cooldown) or
// deferred (it began after the open window started), when a hang is confirmed, when a user's
// trigger is refused (cooldown per caller), and the scheduled windows (baseline, periodic,
// follow-up). It owns that state and nothing else: no lock (its owner serialises calls), no
// sockets, no clock of its own (every call that depends on time takes NOW, so tests run it on a
// fake time). server/server.cc is the gRPC adapter around it: it owns the windows, the agents
// and the hang's stacks, asks the scheduler what to do, and tells it what happened.
#ifndef PERFTRACKER_SERVER_SCHEDULER_H_
#define PERFTRACKER_SERVER_SCHEDULER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/window_defaults.h"

namespace perftracker::server {

// The policy's numbers (ServerOptions::schedule; `perftracker server|run` set some of them).
struct ScheduleOptions {
  int default_iterations = window_defaults::kIterations;  // W: iterations a window profiles
  int start_lead = 5;  // the window starts at least this many iterations ahead...
  double lead_seconds = window_defaults::kLeadSeconds;  // ...and this long ahead (commands travel)
  // After a window that a slowdown opened closes, workers' slowdown triggers are ignored this
  // long (a lasting slowdown fires on every rank, one after another); other windows (baseline,
  // periodic, user) leave triggers alone, and user triggers always open a window.
  double cooldown_seconds = 60;
  // ...unless the job got this much slower than at the trigger that opened (or joined) that
  // window: a new, bigger slowdown (a real fault after a trigger on the host's own drift) is not
  // the one that window profiled.
  double cooldown_escalation = 1.25;
  // ...or this much slower than that window measured the job (its median iteration, once
  // diagnosed). The trigger's own level can be noise: a transient that joined the baseline
  // window (27.5 ms) left the job at 24.2 ms there, and a real fault then fired at 31.1 ms,
  // 1.13x the trigger but 1.29x the window. Every detector fires again after a window (the
  // window's iterations do not feed it, and it starts its recent median anew), so a lasting
  // slowdown fires once more on every rank at the level the window measured (100 ms after a
  // window at 96 ms): the margin keeps those out.
  double profiled_escalation = 1.15;
  // A user's `perftracker trigger` (any caller other than a worker's detector) opens at most one
  // window per caller host this often: a script in a loop would keep every rank profiling and
  // fill the disk with traces.
  double user_trigger_cooldown_seconds = 30;
  // One window once every rank has reported this many iterations (its detector learned the
  // iteration and the warm-up is behind): the peer comparison and the expected-pattern rules
  // need no slowdown, so a problem present from the first iteration is found too.
  bool baseline_window = true;
  int baseline_after_iterations = 20;
  // A window every this many seconds (0: never), after the baseline.
  double profile_every_seconds = 0;
  // A worker's hang trigger is confirmed when no rank progressed for this long after it (an
  // epoch boundary, a checkpoint or the job's own exit are pauses, not hangs).
  double hang_confirm_seconds = 5;
};

// Where the job is, as the adapter knows it from the ranks' iteration reports.
struct JobProgress {
  int64_t furthest_step = -1;      // the furthest step any rank reported; -1: none yet
  double mean_iteration_ms = 0;    // over every reported iteration; 0: none yet
  int64_t fewest_iterations = -1;  // of the ranks the job waits for; -1: no rank known
};

class WindowScheduler {
 public:
  using Clock = std::chrono::steady_clock;
  using Time = Clock::time_point;

  // Periodic windows count from START (the server's start).
  WindowScheduler(ScheduleOptions options, Time start);

  const ScheduleOptions& options() const { return options_; }

  // The iteration a window opened now starts at: a common future iteration, so every rank
  // profiles the same steps, far enough ahead for the command to reach every rank; 0 when no
  // rank reported iterations yet (workers read it as "the next iteration").
  int64_t StartIteration(const JobProgress& progress) const;
  // ITERATIONS asked for, or the default.
  int Iterations(int requested) const;

  // --- what the adapter tells it ---

  // A window opened (SLOWDOWN: a slowdown trigger opened it; MEAN_MS its recent iteration time).
  void Opened(int64_t id, int64_t start_iteration, Time now, bool slowdown = false,
              double mean_ms = 0);
  // Window ID closed (diagnosed, or sealed at the end of the job).
  void Closed(int64_t id, Time now);
  // A rank reported iterations up to STEP. Returns the rank whose pending hang trigger this
  // progress cleared, if any (iterations resumed: a pause, not a hang).
  std::optional<int> Progressed(int64_t step);
  // Once after a hang was reported (its stacks collected and diagnosed) and iterations then
  // resumed: the step they resumed at. The job was slow, not hung: the adapter amends the hang's
  // diagnosis (diagnose::SlowNotHung), and a slowdown window follows to profile why it was slow.
  std::optional<int64_t> TakeResumedHang();
  // A hang's stacks are being collected (FURTHEST_STEP: where the job stood), then reported.
  void HangStarted(int64_t furthest_step);
  void HangFinished();
  // The job ended: a hang trigger still pending was its exit, not a hang.
  void ForgetHang();
  // Another job took over the server: its baseline is still to come.
  void NewJob();
  // The job's ranks were started again (an elastic restart, server/attempts.h): they number
  // their iterations from 0 and their detectors learn again, so the new attempt gets a baseline
  // of its own; a hang pending or reported, a deferred slowdown and the slowdown cooldown were
  // about processes that are gone. Call with no window open (close it first).
  void NewAttempt();

  // --- what the adapter asks it ---

  int64_t open_window() const { return open_window_; }  // 0: none
  bool collecting_hang() const { return collecting_hang_; }
  int64_t slowdown_window() const { return slowdown_window_; }  // 0: none yet
  bool pending_hang() const { return pending_hang_.has_value(); }
  // Why OnSlowdown answered kIgnore, for the log.
  std::string IgnoredBecause() const;

  enum class SlowdownAction {
    kIgnore,    // cooling down after a slowdown window, or a hang is being handled
    kFollowUp,  // it began after the open window started: a window of its own follows it
    kOpen,      // open a window (or join the open one; it becomes the slowdown window)
  };
  // A worker's detector saw its recent iterations (ending at ITERATION) at MEAN_MS.
  SlowdownAction OnSlowdown(int64_t iteration, double mean_ms, const std::string& reason, Time now);
  // Window ID's diagnosis measured the job's median iteration at ITERATION_MS.
  void Measured(int64_t id, double iteration_ms);

  // A user's trigger from CALLER (its host): refused with RESOURCE_EXHAUSTED and when to try
  // again if that caller opened a window less than user_trigger_cooldown_seconds ago; joining
  // the open window is always allowed.
  Status OnUserTrigger(const std::string& caller, Time now);

  // A worker's hang trigger; FURTHEST_STEP: the furthest step any rank reported.
  void OnHangTrigger(int rank, double mean_ms, int64_t furthest_step, Time now);
  struct PendingHang {
    Time since;
    int rank = -1;
    double mean_ms = 0;
    int64_t step = -1;  // the furthest step of any rank when it fired
  };
  // The pending hang trigger once no rank progressed for hang_confirm_seconds (then no longer
  // pending); nothing while a hang is being collected or was reported and iterations did not
  // resume.
  std::optional<PendingHang> TakeConfirmedHang(Time now);

  struct Scheduled {
    std::string reason;
    bool slowdown = false;  // a deferred slowdown (Opened with slowdown = true)
    double mean_ms = 0;
  };
  // The window to open now, if any: a deferred slowdown first, then the baseline (once every
  // rank waited for reported baseline_after_iterations), then the periodic one.
  std::optional<Scheduled> Due(const JobProgress& progress, Time now);

 private:
  bool HangInTheWay() const { return collecting_hang_ || hang_reported_ || pending_hang_; }

  ScheduleOptions options_;
  int64_t open_window_ = 0;
  int64_t open_start_ = 0;  // its start iteration
  Time last_opened_;
  std::optional<Time> last_slowdown_closed_;
  int64_t slowdown_window_ = 0;  // the window a slowdown trigger opened or joined
  double slowdown_mean_ms_ = 0;  // the recent iteration time of the trigger that did
  double profiled_ms_ = 0;       // the median iteration that window measured (0: not yet known)
  bool baseline_done_ = false;
  std::optional<Scheduled> followup_;
  std::optional<PendingHang> pending_hang_;
  bool collecting_hang_ = false;
  bool hang_reported_ = false;  // until iterations progress past hang_step_
  int64_t hang_step_ = -1;
  // Where iterations resumed after a hang being collected or reported; taken once it is reported.
  std::optional<int64_t> resumed_step_;
  // When each caller host last opened a window with `perftracker trigger`; bounded: forgotten
  // all at once past the cap, which only lets a flood through once.
  static constexpr size_t kMaxTriggerCallers = 1024;
  std::map<std::string, Time> user_triggers_;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_SCHEDULER_H_
