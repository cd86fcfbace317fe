// The server's watch on the job's healthy rate (diagnose/healthy_rate.h): it keeps the
// unprofiled history (server/job_history.h), gives the rate before a window for its comparison
// (diagnose/window_diagnosis.h), and opens a window of its own when the history shows a slowdown
// no window profiled: a worker's detector learns its reference after the warm-up, and a fault
// that began while it learned (or while it was held after a window) never fires it.
//
// Not thread-safe: used under the server's lock.
#ifndef PERFTRACKER_SERVER_HEALTHY_WATCH_H_
#define PERFTRACKER_SERVER_HEALTHY_WATCH_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "diagnose/healthy_rate.h"
#include "server/job_history.h"

namespace perftracker::server {

class HealthyWatch {
 public:
  // How often the history is checked for a slowdown that no window profiled.
  static constexpr double kCheckSeconds = 2.0;

  void Add(int64_t step, double ms) { history_.Add(step, ms); }
  // A window profiles ITERATIONS from START.
  void WindowOpened(int64_t start, int iterations);
  // A new attempt: steps from 0 again, nothing profiled yet.
  void NewAttempt();
  // The healthy rate of the history before step UNTIL, with the job's latest level there.
  std::optional<diagnose::HealthyRate> RateBefore(int64_t until) const;

  // A slowdown to profile: the history's slowdown (policy kHealthyRiseAtLeast) began after every
  // window so far started and lasted kChangeMinSegment points; once per slowdown, at most every
  // kCheckSeconds. NOW: the time.
  struct Due {
    int64_t step = 0;  // where the slowdown began
    double recent_ms = 0;
    std::string reason;
  };
  std::optional<Due> Check(std::chrono::steady_clock::time_point now);

 private:
  JobHistory history_;
  int64_t profiled_from_ = -1;  // the start of the newest window
  int64_t reported_step_ = -1;  // the slowdown a window was asked for
  std::chrono::steady_clock::time_point next_check_{};
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_HEALTHY_WATCH_H_
