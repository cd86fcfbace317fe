// The attempts of one job. An elastic launcher (torchrun --max-restarts N) starts every rank
// again after one failed: the new processes number their iterations from 0, learn the iteration
// again and know nothing of the old windows. AttemptLog tells the attempts apart from what the
// agents report (each iteration batch names its rank, its process and the launcher's restart
// count; each ended worker connection says whether its exit hook ran), decides when a report
// begins a new attempt, and describes each attempt for the report: its ranks and processes, how
// far it got, and how it ended (which rank's process ended first, killed or crashed, or exited).
//
// Pure state, no lock and no clock (times come in); the server calls it under its mutex. Bounded:
// the newest kMaxAttempts attempts are kept (a launcher in a restart loop), each with at most one
// record per rank.
#ifndef PERFTRACKER_SERVER_ATTEMPTS_H_
#define PERFTRACKER_SERVER_ATTEMPTS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "diagnose/finding.h"

namespace perftracker::server {

struct AttemptRank {
  int pid = 0;
  int restart_count = 0;
  std::string host;
  int64_t last_step = -1;  // the furthest iteration it reported
  int64_t iterations = 0;  // iterations reported
  bool ended = false;      // its worker's connection ended
  bool clean = false;      // ...after its exit hook ran (a Python exit)
  double ended_unix_s = 0;
};

struct Attempt {
  int number = 0;         // 0, 1, ... in the order they began
  int restart_count = 0;  // the highest launcher restart count its ranks said
  // The run-wide iteration of its iteration 0: the attempts' iterations one after another, for
  // the run's chart.
  int64_t run_offset = 0;
  std::map<int, AttemptRank> ranks;

  int64_t LastStep() const;
};

class AttemptLog {
 public:
  // Attempts kept, the newest; older ones are dropped (and counted).
  static constexpr size_t kMaxAttempts = 32;

  enum class Placement {
    kCurrent,  // the current attempt (it may have just joined it)
    kNew,      // it began a new attempt, now the current one
    kEarlier,  // late news from an earlier attempt's process
  };
  struct Placed {
    Placement placement = Placement::kCurrent;
    int attempt = 0;  // the attempt it belongs to
  };

  // Where a report of RANK from process PID (restart count RESTART, HOST) belongs. A rank the
  // current attempt knows in another process (or with a lower restart count) begins a new
  // attempt: its process was started again. A process an earlier attempt knows is that
  // attempt's. PID 0 (unknown) is always the current attempt's. RANK must be valid.
  Placed Place(int rank, int pid, int restart, const std::string& host);

  // RANK reported N iterations up to STEP in attempt ATTEMPT (as Place returned it).
  void Progress(int attempt, int rank, int64_t step, int64_t n);

  // The worker PID of RANK ended at UNIX_S (CLEAN: its exit hook ran) after LAST_ITERATION.
  // A process no attempt knows (it ended before its first iteration) is recorded in the
  // current attempt, unless that attempt knows the rank in another process.
  void Ended(int rank, int pid, int restart, bool clean, int64_t last_iteration, double unix_s,
             const std::string& host);

  int current() const { return attempts_.back().number; }
  const Attempt& Current() const { return attempts_.back(); }
  const std::deque<Attempt>& attempts() const { return attempts_; }
  size_t dropped() const { return dropped_; }

  // Attempt A for the report, with its one-line summary.
  static diagnose::AttemptInfo Info(const Attempt& a);
  // Every kept attempt that saw a rank.
  std::vector<diagnose::AttemptInfo> Report() const;

 private:
  Attempt* Find(int number);
  void Begin();

  std::deque<Attempt> attempts_ = std::deque<Attempt>(1);
  size_t dropped_ = 0;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_ATTEMPTS_H_
