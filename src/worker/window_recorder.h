// What the Python tracer records in one profiling window, without Python: the tracer's clock
// (worker/tracer_clock.h), the interned function names (worker/name_table.h) and the call tree
// (worker/call_tree.h), from the window's arming (Begin) to its end (Finish, which hands them to
// the window file: worker/window_file.h), and the tracer's totals over every window (stats()).
//
// The extension's profile callback turns a frame into a name id (names()) and calls the tree's
// Enter / Exit / ExitC / EnterUntraced with Now(); nothing here is virtual or locked.
//
// Owns the clock, the names and the tree of the window in progress. Not thread-safe: only the
// armed (training) thread touches it, under the GIL, and the install thread before any window.
#ifndef PERFTRACKER_WORKER_WINDOW_RECORDER_H_
#define PERFTRACKER_WORKER_WINDOW_RECORDER_H_

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "worker/call_tree.h"
#include "worker/name_table.h"
#include "worker/tracer_clock.h"
#include "worker/window_file.h"

namespace perftracker::worker {

// The tracer's bounds as a config may set them (install()'s tracer_max_nodes and
// tracer_max_depth): below 16 nodes a tree has no room past its fixed ones and the first
// stacks; 10 million nodes are gigabytes; 10,000 frames is ten times Python's own recursion limit.
inline constexpr double kMinTracerNodes = 16;
inline constexpr double kMaxTracerNodes = 1e7;
inline constexpr double kMaxTracerDepth = 10000;
// The message of a config beyond them (a ValueError in Python).
inline constexpr const char* kTracerLimitsMessage =
    "tracer_max_nodes or tracer_max_depth out of range";
// Checks NODES and DEPTH as a config gave them (numbers, before the casts to CallTreeLimits).
Status CheckTracerLimits(double nodes, double depth);

// Totals over every finished window (stats()).
struct TracerTotals {
  uint64_t calls = 0;        // calls recorded
  uint64_t other_calls = 0;  // of which in "<other>" (node or depth cap)
  uint64_t untraced = 0;     // C calls that could not be named
  uint64_t gc_spans = 0;     // garbage collections
  uint64_t nodes = 0;        // the last window's node count
};

class WindowRecorder {
 public:
  // At install: the start of the clock's rate measurement.
  void Start() { clock_.Start(); }
  // The window arms at NOW (steady clock): names are forgotten but the root's ("", id 0) and
  // "<gc>" (gc_name()), the clock is anchored, and a new tree records iteration 0.
  void Begin(int64_t now, const CallTreeLimits& limits);
  // The window ends at NOW: calls still open are closed there (their time so far is real), the
  // totals grow by the window's, and its tree and names move into W. Needs a Begin before.
  void Finish(int64_t now, PythonWindow* w);
  // A forked child has the parent's tree but must neither use nor free it (another thread of the
  // parent may have been using it at the fork): it is leaked, and the recorder holds none.
  void AbandonAfterFork() { (void)tree_.release(); }

  // The tracer's time (steady-clock nanoseconds). Inline: twice a traced call.
  int64_t Now() const { return clock_.Now(); }
  // The window's tree; null outside a window.
  CallTree* tree() { return tree_.get(); }
  NameTable& names() { return names_; }
  uint32_t gc_name() const { return gc_name_; }
  const TracerClock& clock() const { return clock_; }
  const TracerTotals& totals() const { return totals_; }

 private:
  TracerClock clock_;
  std::unique_ptr<CallTree> tree_;
  NameTable names_;
  uint32_t gc_name_ = 0;
  TracerTotals totals_;
};

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_WINDOW_RECORDER_H_
