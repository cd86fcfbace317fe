// The server's watch on the job's healthy rate (diagnose/healthy_rate.h), and what a window is
// compared with. It keeps the unprofiled history (server/job_history.h), the attempt's baseline
// window with what that window named, and opens a window of its own when the history shows a
// slowdown no window profiled: a worker's detector learns its reference after the warm-up, and
// a fault that began while it learned (or while it was held after a window) never fires it.
//
// CompareWindow is what a window's diagnosis gets after the peer comparison: the comparison with
// the baseline window or, where that is spoiled, with the healthy rate; the memory findings; the
// cost bounds (diagnose/cost_bound.h); and a note that says what it compared against.
//
// Not thread-safe: the history under the server's lock, the baseline on the publisher thread.
#ifndef PERFTRACKER_SERVER_HEALTHY_WATCH_H_
#define PERFTRACKER_SERVER_HEALTHY_WATCH_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "diagnose/finding.h"
#include "diagnose/healthy_rate.h"
#include "diagnose/since_baseline.h"
#include "server/job_history.h"
#include "server/window.h"

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
  // The healthy rate of the history before step UNTIL.
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

// The attempt's baseline window as the comparison keeps it, and the problems it named (a rank's
// problem there was present while the job was healthy: not part of a later rise).
struct BaselineState {
  std::optional<diagnose::Baseline> baseline;
  int attempt = -1;
  std::set<std::pair<diagnose::Category, int>> named;
};

// Adds to D (SEALED's diagnosis) what its window is compared with: keeps SEALED as the baseline
// when it is one; else the comparison with STATE's baseline, or with RATE (the healthy rate up to
// the window) where the baseline is spoiled; MEMORY's findings; the bounded costs; the note that
// says what it was compared against.
void CompareWindow(Window::Sealed* sealed, const std::optional<diagnose::HealthyRate>& rate,
                   std::vector<diagnose::Finding> memory, const diagnose::DiagnoseOptions& options,
                   BaselineState* state, diagnose::Diagnosis* d);

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_HEALTHY_WATCH_H_
