// A rank's critical path through each of its iterations, in the single-rank model of Holistic
// Trace Analysis' lightweight critical path analysis (HTA's critical_path_analysis), so that
// `perftracker show` says what bounds a step: the CPU, GPU compute, communication kernels, the
// delay of launching a kernel, or gaps between kernels, and which functions lie on the path.
// (The critical path across ranks, which rank the others wait for, is diagnose/what_if.h's.)
//
// The graph of one iteration (a ProfilerStep's span; the whole trace where there is none) has a
// start and an end node per event and these edges:
//   - CPU ops and CUDA runtime / driver calls in call-stack order per thread (the backward
//     pass's thread folded into the forward pass's, as HTA does): within a top-level op an edge
//     weighs the time between its nodes; from one top-level op to the next it weighs nothing
//     (the thread was idle); a blocking call (cudaDeviceSynchronize, cudaStreamSynchronize,
//     cudaEventSynchronize, cudaEventQuery, cudaMemcpy, cudaMemcpyAsync) weighs nothing from its
//     last node to its end (the wait is the GPU's time, reached through a sync edge).
//   - Kernels, copies and memsets launched in the span: start to end weighs their duration; in
//     stream order, a launch edge (launch call's start to the kernel's start) where the kernel
//     waited on its launch (nothing else was queued on its stream when it was launched, and
//     nothing behind it when it started), else
//     a gap edge from the stream's kernel before, if the gap is under kMaxKernelGapUs.
//   - Synchronisation, weightless: a stream's (or for a context sync every stream's) last kernel
//     to the sync call's end; a CUDA event's kernel (the last launched on its stream before the
//     cudaEventRecord) to cudaEventSynchronize's end, or, for cudaStreamWaitEvent, to the next
//     kernel launched on the waiting stream.
// The critical path is the graph's heaviest path; each edge on it is bounded by its kind (a CPU
// op's edge by the CPU, a kernel's by GPU compute or communication, by its name as HTA groups
// NCCL/RCCL/HCCL kernels). The CUDA runtime's lock orders cudaLaunchKernel, cudaMemcpyAsync and
// cudaHostAlloc across threads (in the order they end), so the path may pass from one thread to
// another there.
//
// Owns the compact copy of the events it needs (CriticalPathSink, at most
// limits::kMaxCriticalPathEvents); each iteration's graph is built, walked and dropped.
#ifndef PERFTRACKER_PATTERN_RANK_CRITICAL_PATH_H_
#define PERFTRACKER_PATTERN_RANK_CRITICAL_PATH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "pattern/function_table.h"
#include "trace/event.h"

namespace perftracker::pattern {

// HTA's limit on a gap between two kernels of a stream that the later one waited out: compute
// streams show < 10 us, communication streams ~1 ms; a longer gap is a dependency the trace does
// not show, and linking the kernels across it would put idle time on the path.
inline constexpr double kMaxKernelGapUs = 1500;

// What bounds an edge of the path. One table (rank_critical_path.cc) gives each its JSON key,
// HTA's name for it and the text `show` prints.
enum class PathBound : uint8_t { kCpu, kGpuCompute, kGpuCommunication, kLaunchDelay, kKernelGap };
inline constexpr size_t kPathBounds = 5;

struct PathBoundInfo {
  const char* key;       // JSON key: "cpu_ms", ...
  const char* hta_name;  // HTA's bound_by: "cpu_bound", ...
  const char* text;      // "CPU", "GPU compute", ...
};
const PathBoundInfo& PathBoundOf(PathBound bound);

// A function's (CPU op's or kernel's) time on the path: its own edges, not its children's.
struct PathFunction {
  std::string name;
  double us = 0;
};

// The path summed over the iterations analysed.
struct RankCriticalPath {
  int iterations = 0;
  std::vector<int64_t> steps;    // the ProfilerStep numbers analysed; empty for a whole trace
  bool too_many_events = false;  // past limits::kMaxCriticalPathEvents: nothing analysed
  double path_us = 0;            // the paths' lengths (their edges' weights), summed
  std::array<double, kPathBounds> bound_us{};
  std::vector<PathFunction> top;  // most time on the path first
  uint64_t negative_edges = 0;    // edges whose nodes' times ran backwards, weighed as 0

  double MeanMs() const { return iterations > 0 ? path_us / iterations / 1000 : 0; }
  double Share(PathBound b) const {
    return path_us > 0 ? bound_us[static_cast<size_t>(b)] / path_us : 0;
  }
};

// Keeps what the graph needs of a trace's events as they stream by (kept: CPU ops, CUDA runtime
// and driver calls of positive duration, GPU work with a correlation, cuda_sync records).
class CriticalPathSink : public trace::EventSink {
 public:
  void OnBegin(const trace::TraceMeta& meta) override;
  void OnEvent(const trace::Event& event) override;

  int rank() const { return rank_; }
  // True when the trace held more than limits::kMaxCriticalPathEvents events to keep.
  bool overflowed() const { return overflowed_; }

  // The path through each iteration whose ProfilerStep number is in STEPS (empty: every
  // ProfilerStep, or the whole trace when it has none), summed; TOP functions named. With
  // REMOVED, the path as it would run without that function (a CPU op, CUDA call or kernel, by
  // name): its calls, what they call and the GPU work they launch take no time, everything else
  // keeps its own (HTA's simulation of a change); the path may then run elsewhere.
  RankCriticalPath Compute(const std::vector<int64_t>& steps, size_t top,
                           std::string_view removed = {}) const;
  // Whether the trace has a kept event named FUNCTION.
  bool Holds(std::string_view function) const;

  // Kept events, in trace order (their index is the node order's tie-break, as HTA's).
  enum class Kind : uint8_t { kCpu, kGpu, kSync };
  enum class Sync : uint8_t { kNone, kStream, kContext, kEvent, kStreamWait };
  struct Kept {
    double ts = 0, end = 0;
    int64_t tid = 0;
    int64_t correlation = -1;
    int64_t wait_record = -1;  // kEvent / kStreamWait: the cudaEventRecord's correlation
    uint32_t name = 0;
    int32_t stream = -1;
    int32_t wait_stream = -1;  // kEvent / kStreamWait: the stream the event was recorded on
    Kind kind = Kind::kCpu;
    Sync sync = Sync::kNone;
    bool blocking = false;  // a CPU call that waits for the GPU
    bool locking = false;   // a CUDA call that takes the runtime's lock
    bool queues = false;    // a CUDA call that queues GPU work (a launch, an async copy)
    bool comm = false;      // a communication kernel
  };

 private:
  // What a name says, worked out once per name (not per event): its Kept flags, and whether it
  // marks the forward or the backward pass's thread.
  struct NameTraits {
    bool blocking = false, locking = false, queues = false, comm = false;
    bool forward = false, autograd = false;
  };
  // NAME's id, its traits computed on first sight.
  uint32_t Intern(std::string_view name);

  int rank_ = -1;
  bool overflowed_ = false;
  std::vector<trace::Span> steps_;
  std::vector<Kept> events_;
  Interner names_;
  std::vector<NameTraits> traits_ = std::vector<NameTraits>(1);  // by name id; 0 is ""
  // Threads that run ops named "forward" / "autograd" (HTA's test for the two passes' threads):
  // with exactly one of each, the backward thread's ops are laid on the forward thread.
  std::vector<int64_t> forward_tids_, backward_tids_;
};

// Whether PATH is a Python tracer's window file (aggregates, no events:
// base/python_window_format.h).
bool IsPythonWindowFile(const std::string& path);

// The path through the trace file PATH's iterations STEPS (as CriticalPathSink::Compute); for an
// online window's Python tracer file, through its torch trace beside it (none where there is
// none); through all its ProfilerSteps where none is numbered as in STEPS. Errors are the
// reader's.
StatusOr<RankCriticalPath> TraceCriticalPath(const std::string& path,
                                             const std::vector<int64_t>& steps, size_t top);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_RANK_CRITICAL_PATH_H_
