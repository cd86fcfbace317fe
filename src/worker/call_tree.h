// The Python tracer's record of one profiling window: an aggregate per call-stack node instead of
// one record per call, so that it loses nothing at any call rate and its memory does not grow
// with the number of calls.
//
// A node is a call-stack path: a function together with every caller above it (the function's
// identity in perftracker, as in PerfTracker). Each node keeps its call count, inclusive and
// exclusive (self) time, min and max, a sum of squares (for the spread), a log-scale histogram,
// and per window iteration its calls, inclusive and self time. Python's garbage collections are
// nodes too ("<gc>"), children of whatever stack was running when the collection started, so a
// finding can name the function whose allocations trigger them.
//
// Bounds, all in CallTreeLimits: a node cap (calls of stacks first seen past it are counted in
// one "<other>" node, so totals stay exact), a depth cap (deeper calls count in "<other>" too),
// and a bounded list of timed records for the calls long enough to matter on a timeline.
//
// Not thread-safe: one CallTree per traced thread, driven under the GIL.
#ifndef PERFTRACKER_WORKER_CALL_TREE_H_
#define PERFTRACKER_WORKER_CALL_TREE_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/bucket_counts.h"
#include "base/python_window_format.h"

namespace perftracker::worker {

struct CallTreeLimits {
  // ~200 bytes a node plus its per-iteration cells: 64 K nodes stay under ~20 MB.
  size_t max_nodes = 1 << 16;
  // Python's own recursion limit is 1,000; real stacks under a training step are < 100 deep.
  int max_depth = 256;
  // Calls at least this long keep a timed record (the timeline shows them); shorter ones are
  // only counted. 1 ms: a training iteration is tens of ms and up.
  int64_t long_call_ns = 1'000'000;
  size_t max_long_calls = 1 << 16;
  // Iterations a window records per node; later ones count as outside any iteration.
  int32_t max_iterations = 4096;
};

// A power-of-two histogram with four linear steps per octave (the window file's buckets,
// base/python_window_format.h): any quantile within ~12% of a real value, no logarithm on the
// hot path. Only the bucket range actually hit is stored.
class QuarterLog2Histogram {
 public:
  void Add(int64_t ns) { counts_.Add(python_window::HistogramBucket(ns)); }
  int offset() const { return counts_.offset(); }
  const std::vector<uint32_t>& counts() const { return counts_.counts(); }

 private:
  BucketCounts counts_;
};

struct IterationCell {
  int32_t iteration;  // index in the window's iterations
  uint32_t calls;
  int64_t inclusive_ns;
  int64_t self_ns;
};

struct CallNode {
  uint32_t parent = 0;
  uint32_t name = 0;  // the caller's name id (CallTree does not own names)
  bool gc = false;    // a garbage collection
  // One-entry cache of the last child looked up: loops call the same child again and again.
  uint32_t last_child_name = UINT32_MAX;
  uint32_t last_child = 0;
  uint64_t count = 0;
  int64_t total_ns = 0;
  int64_t self_ns = 0;
  int64_t min_ns = INT64_MAX;
  int64_t max_ns = 0;
  double sum_sq_ns = 0;  // sum of squared durations
  QuarterLog2Histogram hist;
  std::vector<IterationCell> iterations;  // ascending by iteration
};

struct LongCall {
  uint32_t node;
  int64_t start_ns;
  int64_t end_ns;
};

struct CallTreeStats {
  uint64_t calls = 0;           // calls recorded (every node's count)
  uint64_t other_calls = 0;     // of which in "<other>": the node or depth cap was reached
  uint64_t untraced_calls = 0;  // C calls the tracer cannot name (counted, not timed)
  uint64_t long_calls_dropped = 0;
  uint64_t gc_collections = 0;
  uint64_t unmatched_returns = 0;  // returns of calls that began before the window
};

class CallTree {
 public:
  static constexpr uint32_t kRoot = python_window::kRootNode;
  static constexpr uint32_t kOther = python_window::kOtherNode;

  explicit CallTree(const CallTreeLimits& limits = {});

  // A call of function NAME (an id the caller interns) begins at NOW.
  void Enter(uint32_t name, int64_t now);
  // A Python call already in progress when the window began (the training loop, the step):
  // entered at NOW so that its callees get their whole stack. C calls in progress are invisible
  // (only Python frames can be listed), so a C return that finds such a frame on top belongs
  // to one of them and is ignored (ExitC).
  void EnterInProgress(uint32_t name, int64_t now);
  // A named C call (a builtin) begins at NOW: as Enter, but Resync knows it is no Python frame.
  void EnterC(uint32_t name, int64_t now);
  // A call the tracer cannot name: it keeps returns balanced, and its time stays in its parent.
  void EnterUntraced();
  // A call whose whole subtree goes unrecorded (the collector's own per-op code: a memory
  // window's tensor recorder, python/perftracker/kept_tensors.py): its calls, returns and
  // collections only count depth until it returns, and its time stays in its parent, as a C
  // call's work does.
  void EnterMuted();
  bool muted() const { return muted_depth_ > 0; }
  // The thread's Python stack is PYTHON_STACK (name ids, outermost first), and this tree missed
  // some of its calls and returns (another profile function held the thread meanwhile:
  // torch.profiler's with_stack): the open calls that still match it are kept, the others
  // close at NOW, and the Python frames the tree lacks are entered as in progress.
  void Resync(const std::vector<uint32_t>& python_stack, int64_t now);
  // The innermost open call returns at NOW. An open collection is never closed by a return.
  void Exit(int64_t now);
  // The same for a C call's return.
  void ExitC(int64_t now);
  // A garbage collection starts (NAME: the "<gc>" id) / the innermost open one stops.
  void EnterGc(uint32_t name, int64_t now);
  void ExitGc(int64_t now);
  // Calls from now on belong to window iteration I (-1: none).
  void SetIteration(int32_t i) { iteration_ = i; }
  // The window ends at NOW: calls still open are closed there.
  void CloseAll(int64_t now);

  const std::vector<CallNode>& nodes() const { return nodes_; }
  const std::vector<LongCall>& long_calls() const { return long_calls_; }
  const CallTreeStats& stats() const { return stats_; }
  size_t depth() const { return frames_.size(); }
  // The innermost traced call's node (the root when none is open) and the iteration calls now
  // belong to: where an allocation made now is placed (worker/heap_sampler.h).
  uint32_t current_node() const { return Current(); }
  int32_t iteration() const { return iteration_; }

 private:
  struct Frame {
    uint32_t node;
    bool traced;  // false: an untraced C call, or a return-balancing placeholder
    bool gc;
    bool in_progress;   // EnterInProgress
    bool c_call;        // EnterC
    int32_t iteration;  // the window iteration the call began in
    int64_t start;
    int64_t child_ns;  // inclusive time of direct children
  };
  uint32_t Child(uint32_t parent, uint32_t name, bool gc);
  void Close(const Frame& f, int64_t now);
  uint32_t Current() const;

  CallTreeLimits limits_;
  std::vector<CallNode> nodes_;
  std::unordered_map<uint64_t, uint32_t> children_;  // (parent << 32 | name) -> node
  std::vector<Frame> frames_;
  std::vector<LongCall> long_calls_;
  CallTreeStats stats_;
  int32_t iteration_ = -1;
  int muted_depth_ = 0;  // > 0: inside a muted call, this many calls deep (the call itself: 1)
};

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_CALL_TREE_H_
