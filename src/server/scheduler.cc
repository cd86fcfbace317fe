#include "server/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/units.h"

namespace perftracker::server {

namespace {

std::chrono::duration<double> Secs(double s) { return std::chrono::duration<double>(s); }

}  // namespace

WindowScheduler::WindowScheduler(ScheduleOptions options, Time start)
    : options_(std::move(options)), last_opened_(start) {}

int64_t WindowScheduler::StartIteration(const JobProgress& progress) const {
  if (progress.furthest_step < 0) return 0;
  int64_t lead = options_.start_lead;
  if (progress.mean_iteration_ms > 0)
    lead = std::max<int64_t>(lead, static_cast<int64_t>(std::ceil(SToMs(options_.lead_seconds) /
                                                                  progress.mean_iteration_ms)));
  return progress.furthest_step + lead;
}

int WindowScheduler::Iterations(int requested) const {
  return requested > 0 ? requested : options_.default_iterations;
}

void WindowScheduler::Opened(int64_t id, int64_t start_iteration, Time now, bool slowdown,
                             double mean_ms) {
  open_window_ = id;
  open_start_ = start_iteration;
  last_opened_ = now;
  if (slowdown) {
    slowdown_window_ = id;
    slowdown_mean_ms_ = mean_ms;
    profiled_ms_ = 0;
  }
}

void WindowScheduler::Closed(int64_t id, Time now) {
  if (open_window_ == id) open_window_ = 0;
  if (id == slowdown_window_) last_slowdown_closed_ = now;
}

std::optional<int> WindowScheduler::Progressed(int64_t step) {
  // Iterations again after a hang: it was slow, not hung (amended once it is reported), and the
  // next hang is a new one.
  if ((hang_reported_ || collecting_hang_) && step > hang_step_ && !resumed_step_)
    resumed_step_ = step;
  if (hang_reported_ && step > hang_step_) hang_reported_ = false;
  if (pending_hang_ && step > pending_hang_->step) {
    const int rank = pending_hang_->rank;
    pending_hang_.reset();
    return rank;
  }
  return std::nullopt;
}

void WindowScheduler::HangStarted(int64_t furthest_step) {
  collecting_hang_ = true;
  hang_step_ = furthest_step;
  resumed_step_.reset();
}

void WindowScheduler::HangFinished() {
  collecting_hang_ = false;
  // Resumed while its stacks were collected: reported, and amended at once.
  hang_reported_ = !resumed_step_;
}

std::optional<int64_t> WindowScheduler::TakeResumedHang() {
  if (collecting_hang_ || !resumed_step_) return std::nullopt;
  const int64_t step = *resumed_step_;
  resumed_step_.reset();
  // Profile the rank that was slow: its window says why (the cause the hang's stacks cannot).
  if (!open_window_ && !followup_)
    followup_ = Scheduled{"after a stall: the job was slow, not hung; profiling why", true, 0};
  return step;
}

void WindowScheduler::ForgetHang() {
  pending_hang_.reset();
  collecting_hang_ = false;
}

void WindowScheduler::NewJob() { baseline_done_ = false; }

void WindowScheduler::NewAttempt() {
  baseline_done_ = false;
  followup_.reset();
  pending_hang_.reset();
  collecting_hang_ = false;
  hang_reported_ = false;
  hang_step_ = -1;
  resumed_step_.reset();
  last_slowdown_closed_.reset();
  slowdown_window_ = 0;
  slowdown_mean_ms_ = 0;
  profiled_ms_ = 0;
}

WindowScheduler::SlowdownAction WindowScheduler::OnSlowdown(int64_t iteration, double mean_ms,
                                                            const std::string& reason, Time now) {
  const bool escalated =
      mean_ms > options_.cooldown_escalation * slowdown_mean_ms_ ||
      (profiled_ms_ > 0 && mean_ms > options_.profiled_escalation * profiled_ms_);
  const bool cooling = last_slowdown_closed_ &&
                       now - *last_slowdown_closed_ < Secs(options_.cooldown_seconds) && !escalated;
  if (!open_window_ && (cooling || collecting_hang_ || hang_reported_))
    return SlowdownAction::kIgnore;
  // The open window (baseline, periodic, user) started profiling before this slowdown: it
  // cannot show it, so a window of its own follows once the open one closes.
  if (open_window_ && open_window_ != slowdown_window_ && iteration >= open_start_) {
    followup_ = Scheduled{reason, true, mean_ms};
    slowdown_mean_ms_ = mean_ms;
    profiled_ms_ = 0;
    return SlowdownAction::kFollowUp;
  }
  if (open_window_) {  // joined: that window profiles it
    if (slowdown_window_ != open_window_) profiled_ms_ = 0;
    slowdown_window_ = open_window_;
    slowdown_mean_ms_ = mean_ms;
  }
  return SlowdownAction::kOpen;
}

void WindowScheduler::Measured(int64_t id, double iteration_ms) {
  if (id == slowdown_window_ && iteration_ms > 0) profiled_ms_ = iteration_ms;
}

std::string WindowScheduler::IgnoredBecause() const {
  if (collecting_hang_ || hang_reported_) return "a hang is being handled";
  // What the window measured is known once it is diagnosed.
  const std::string measured = profiled_ms_ > 0
                                   ? fmt::format(" or {:.2f}x the {:.1f} ms it measured",
                                                 options_.profiled_escalation, profiled_ms_)
                                   : std::string();
  return fmt::format(
      "cooling down after slowdown window {} (a trigger within {:.0f} s must be {:.2f}x its "
      "trigger's {:.1f} ms{})",
      slowdown_window_, options_.cooldown_seconds, options_.cooldown_escalation, slowdown_mean_ms_,
      measured);
}

Status WindowScheduler::OnUserTrigger(const std::string& caller, Time now) {
  if (open_window_) return Status::Ok();  // joins the open window: nothing new runs
  auto it = user_triggers_.find(caller);
  if (it != user_triggers_.end() &&
      now - it->second < Secs(options_.user_trigger_cooldown_seconds)) {
    const double ago = std::chrono::duration<double>(now - it->second).count();
    const double wait = options_.user_trigger_cooldown_seconds - ago;
    return ResourceExhausted(
        fmt::format("a window was requested from here {:.0f} s ago; one per {:.0f} s (try again "
                    "in {:.0f} s)",
                    ago, options_.user_trigger_cooldown_seconds, std::ceil(wait)));
  }
  if (user_triggers_.size() >= kMaxTriggerCallers) user_triggers_.clear();
  user_triggers_[caller] = now;
  return Status::Ok();
}

void WindowScheduler::OnHangTrigger(int rank, double mean_ms, int64_t furthest_step, Time now) {
  if (HangInTheWay()) return;
  pending_hang_ = PendingHang{now, rank, mean_ms, furthest_step};
}

std::optional<WindowScheduler::PendingHang> WindowScheduler::TakeConfirmedHang(Time now) {
  if (!pending_hang_ || now - pending_hang_->since < Secs(options_.hang_confirm_seconds))
    return std::nullopt;
  PendingHang p = *pending_hang_;
  pending_hang_.reset();
  if (collecting_hang_ || hang_reported_) return std::nullopt;
  return p;
}

std::optional<WindowScheduler::Scheduled> WindowScheduler::Due(const JobProgress& progress,
                                                               Time now) {
  // A reported hang does not hold scheduled windows back: the job may have resumed.
  if (open_window_ || collecting_hang_ || pending_hang_) return std::nullopt;
  if (followup_) {
    Scheduled s = std::move(*followup_);
    followup_.reset();
    return s;
  }
  if (options_.baseline_window && !baseline_done_) {
    if (progress.fewest_iterations < options_.baseline_after_iterations) return std::nullopt;
    baseline_done_ = true;
    return Scheduled{
        "baseline: every rank after its warm-up, compared with its peers and with the expected "
        "patterns"};
  }
  if (options_.profile_every_seconds > 0 &&
      now - last_opened_ >= Secs(options_.profile_every_seconds))
    return Scheduled{fmt::format("periodic: every {:.0f} s", options_.profile_every_seconds)};
  return std::nullopt;
}

}  // namespace perftracker::server
