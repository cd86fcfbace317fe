// A hang from its confirmation to its report, a part of the server's state (server_impl.h): the
// stacks collection it starts (the window in progress closed, every agent asked for its ranks'
// stacks), its diagnosis once every rank replied or the deadline passed (the stacks beside the
// ranks' collective dumps), and its amendment when iterations resume after it (slow, not hung:
// diagnose::SlowNotHung). It holds the hang being collected, the last one reported and the
// diagnosis still owed to ServerOptions::on_hang. Every method runs with the server's lock held.
// Not for use outside src/server.
#ifndef PERFTRACKER_SERVER_HANG_REPORTER_H_
#define PERFTRACKER_SERVER_HANG_REPORTER_H_

#include <chrono>
#include <mutex>
#include <optional>

#include "diagnose/finding.h"
#include "server/hang_collection.h"
#include "server/job_end.h"
#include "server/server.h"

namespace perftracker::server {

class HangReporter {
 public:
  // STATE: the server's, which owns this reporter.
  explicit HangReporter(Server::Impl* state) : s_(*state) {}

  // The hang whose stacks are being collected; null when none is.
  HangCollection* collecting() { return hang_ ? &*hang_ : nullptr; }
  const HangCollection* collecting() const { return hang_ ? &*hang_ : nullptr; }

  // A hang of RANK confirmed (its iterations took MEAN_MS; no rank progressed since SINCE):
  // closes the window in progress (queued behind any still being published, so windows are
  // published in order), marks the hang on the chart and in the store, and asks every agent for
  // its ranks' stacks until ServerOptions::stacks_seconds from now.
  void Start(int rank, double mean_ms, std::chrono::steady_clock::time_point since);
  // Past the collection's deadline (or every rank replied): reads the ranks' collective dumps
  // with LK (the server's lock) released, then finishes the hang if it is still the one it was.
  void FinishIfDue(std::unique_lock<std::mutex>& lk);
  // Diagnoses and publishes the hang being collected with DUMPS.
  void Finish(CollectiveDumps dumps);
  // Iterations resumed after the reported hang (WindowScheduler::TakeResumedHang): republishes
  // its diagnosis as diagnose::SlowNotHung says. Returns whether it did.
  bool AmendIfResumed();
  // A new attempt began: the hang being collected finishes at once with the stacks that came
  // (its ranks' dumps unread), and the reported one is forgotten (its processes are gone).
  void NewAttempt();
  // The job ended: a hang being collected was its exit, not a hang.
  void Drop() { hang_.reset(); }
  // The diagnosis owed to ServerOptions::on_hang, once.
  std::optional<diagnose::Diagnosis> TakeCallback();

 private:
  Server::Impl& s_;
  std::optional<HangCollection> hang_;
  std::optional<ReportedHang> reported_;
  std::optional<diagnose::Diagnosis> callback_;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_HANG_REPORTER_H_
