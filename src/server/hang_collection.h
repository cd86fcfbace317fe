// A hang as the server handles it: the collection of every rank's stacks after a confirmed hang
// trigger (HangCollection), until each expected rank replied or a deadline passed, and the hang
// once reported (ReportedHang), kept until iterations resume (then amended: slow, not hung) or
// the next. Plain values: the collector's mutex guards them (server/server_impl.h).
#ifndef PERFTRACKER_SERVER_HANG_COLLECTION_H_
#define PERFTRACKER_SERVER_HANG_COLLECTION_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/hang.h"
#include "report/html.h"

namespace perftracker::server {

struct HangCollection {
  using Clock = std::chrono::steady_clock;

  int64_t id = 0;  // shares the window numbering (DIR/windows/<id>/)
  Clock::time_point deadline;
  Clock::time_point since;     // when the first hang trigger arrived
  double stalled_seconds = 0;  // how long the job had been stuck then (StalledAtTrigger)
  std::set<int> expected;
  std::map<int, diagnose::RankStacks> replies;

  // How long the job had been stuck when a detector with mean iteration MEAN_MS (0: unknown)
  // sent its hang trigger: it fires after kHangFactor x the mean, and after the floor at least
  // (base/window_defaults.h). 0 when the mean is unknown.
  static double StalledAtTrigger(double mean_ms);

  // Takes a rank's stacks (a rank not expected is expected from now on: it replied). Returns
  // whether every expected rank has replied.
  bool AddReply(diagnose::RankStacks stacks);

  // The replies in rank order.
  std::vector<diagnose::RankStacks> Replies() const;
  // How long the job has been stuck at NOW.
  double StalledSeconds(Clock::time_point now) const;
};

// The last hang reported, until iterations resume or the next one.
struct ReportedHang {
  int64_t id = 0;
  diagnose::Diagnosis diagnosis;
  std::chrono::steady_clock::time_point since;
  double stalled_before = 0;  // seconds without an iteration when its trigger arrived
  std::vector<report::WaitGroup> waits;

  // How long the job had been stuck at NOW.
  double StalledSeconds(std::chrono::steady_clock::time_point now) const;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_HANG_COLLECTION_H_
