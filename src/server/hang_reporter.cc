#include "server/hang_reporter.h"

#include <utility>
#include <vector>

#include "base/log.h"
#include "server/server_impl.h"

namespace perftracker::server {

void HangReporter::Start(int rank, double mean_ms, std::chrono::steady_clock::time_point since) {
  if (s_.sched->open_window()) s_.publishing.CloseLater(s_.sched->open_window());
  HangCollection h;
  h.id = s_.windows.NextId();
  h.since = since;
  h.deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(s_.options.stacks_seconds));
  // How long the job has been stuck: the detector fires after hang_factor x the mean, and after
  // the floor at least (base/window_defaults.h).
  h.stalled_seconds = HangCollection::StalledAtTrigger(mean_ms);
  h.expected = s_.agents.DeclaredRanks();
  for (int r : s_.CurrentRanksLocked()) h.expected.insert(r);
  s_.windows.AddMark({h.id, -1, 0, "hang"});
  ++s_.counters.windows_opened["hang"];
  if (::perftracker::Status st = s_.store->AddWindow(s_.job_id, h.id, -1, 0, "hang"); !st.ok())
    log::Error("server", "{}", st.message());
  v1::Command cmd;
  cmd.mutable_stacks()->set_request_id(h.id);
  s_.agents.Send(cmd);
  s_.sched->HangStarted(FurthestStep(s_.ranks));
  log::Event("", "hang reported by rank {}: collecting stacks from {} rank(s)", rank,
             h.expected.size());
  hang_ = std::move(h);
  s_.cv.notify_all();
}

void HangReporter::FinishIfDue(std::unique_lock<std::mutex>& lk) {
  if (!hang_ || std::chrono::steady_clock::now() < hang_->deadline) return;
  const int64_t id = hang_->id;  // only the timer starts one; a new attempt may finish it
  lk.unlock();
  if (s_.options.before_reading_dumps) s_.options.before_reading_dumps();
  CollectiveDumps dumps = ReadCollectiveDumps(CollectivesDir(s_.options.report_dir));
  lk.lock();
  if (hang_ && hang_->id == id) Finish(std::move(dumps));
}

void HangReporter::Finish(CollectiveDumps dumps) {
  HangCollection h = std::move(*hang_);
  hang_.reset();
  s_.sched->HangFinished();
  const std::vector<diagnose::RankStacks> replies = h.Replies();
  const double stalled = h.StalledSeconds(std::chrono::steady_clock::now());
  diagnose::Diagnosis d = diagnose::DiagnoseHang(
      replies, std::vector<int>(h.expected.begin(), h.expected.end()), stalled);
  // The sequence view: each rank's collectives, dumped as it answered (where it could).
  AddCollectiveFindings(std::move(dumps), std::nullopt, stalled, &d);
  LatestReport& latest = s_.reports->latest();
  latest.waits = report::GroupWaits(replies);
  s_.publishing.Publish(
      h.id, d, "hang", nullptr,
      s_.RenderHtmlLocked(d, latest.job.get(), h.id, latest.waits, latest.window_id));
  reported_ = ReportedHang{h.id, d, h.since, h.stalled_seconds, latest.waits};
  // Iterations resumed while the stacks were collected: slow, not hung, and not a hang to act on.
  if (AmendIfResumed()) return;
  if (s_.options.on_hang) callback_ = d;
}

bool HangReporter::AmendIfResumed() {
  const std::optional<int64_t> step = s_.sched->TakeResumedHang();
  if (!step || !reported_) return false;
  ReportedHang h = std::move(*reported_);
  reported_.reset();
  const double stalled = h.StalledSeconds(std::chrono::steady_clock::now());
  diagnose::Diagnosis d = diagnose::SlowNotHung(h.diagnosis, stalled, *step);
  log::Event("", "hang {} was not one: iterations resumed at {} after {:.1f} s", h.id, *step,
             stalled);
  const LatestReport& latest = s_.reports->latest();
  s_.publishing.Publish(
      h.id, d, "amended", nullptr,
      s_.RenderHtmlLocked(d, latest.job.get(), h.id, std::move(h.waits), latest.window_id));
  return true;
}

void HangReporter::NewAttempt() {
  // At once, under the lock: no file is read here, so without its ranks' dumps.
  if (hang_) {
    Finish({{},
            {"the ranks' collective dumps were not read: a new attempt began while their stacks "
             "were collected"}});
  }
  reported_.reset();
}

std::optional<diagnose::Diagnosis> HangReporter::TakeCallback() {
  std::optional<diagnose::Diagnosis> d = std::move(callback_);
  callback_.reset();
  return d;
}

}  // namespace perftracker::server
