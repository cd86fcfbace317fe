// Runtime behaviour patterns: the compact, per-rank summary of a profiling window. One
// FunctionPattern per function identity (category + normalized name + Python call stack), plus
// per-rank iteration and GPU time breakdowns. This is what leaves a node; raw events never do.
#ifndef PERFTRACKER_PATTERN_PATTERN_H_
#define PERFTRACKER_PATTERN_PATTERN_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trace/event.h"

namespace perftracker::pattern {

// Coarse role of a function, used by diagnosis rules.
enum class FunctionClass : uint8_t {
  kCompute,     // CPU ops, GPU compute kernels
  kCollective,  // NCCL kernels, gloo/c10d collectives, record_param_comms
  kMemcpy,      // GPU copies / memsets
  kDataLoader,  // enumerate(DataLoader)#..., __next__ of loaders
  kOptimizer,   // Optimizer.step / zero_grad
  kSync,        // cudaDeviceSynchronize, cudaStreamSynchronize, aten::item, .cpu() waits
  kLaunch,      // cudaLaunchKernel and other runtime calls
  kPython,      // python_function
  kGc,          // Python garbage collection
  kAnnotation,  // user annotations (ProfilerStep excluded)
  kOther,
};
const char* FunctionClassName(FunctionClass c);

struct CollectiveInfo {
  std::string op;        // all_reduce, all_gather, reduce_scatter, broadcast, send, recv...
  double msg_bytes = 0;  // mean message size
  std::string dtype;
  int group_size = 0;
  std::string group;      // process group ranks or name
  double algbw_gbps = 0;  // msg_bytes / mean duration
  double busbw_gbps = 0;  // algbw scaled by the op's bus factor (nccl-tests convention)
};

struct FunctionPattern {
  std::string name;  // normalized name
  trace::EventKind kind = trace::EventKind::kCpuOp;
  FunctionClass fclass = FunctionClass::kOther;
  std::string stack;  // Python call stack, outermost first, ";"-joined; may be empty
  int32_t device = -1;
  int32_t stream = -1;
  bool main_thread = false;  // ran on the thread that owns the iterations (critical path)
  bool top_level = false;    // not nested in another event of the same thread
  // Its time is already inside the Python tracer's frames: a torch.profiler op on the training
  // thread of an online window (pattern/merge.h), where the tracer's frame that called it holds
  // the same time as self time. Compared as a function; left out of the rank's own-work and
  // collective totals, which would count that time twice.
  bool in_python = false;

  uint64_t count = 0;
  double total_us = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, max_us = 0, min_us = 0;
  double cv = 0;  // coefficient of variation of single-call durations
  double calls_per_iter = 0;
  double per_iter_us = 0;       // mean time per iteration
  double share = 0;             // per_iter_us / mean iteration time
  double self_per_iter_us = 0;  // exclusive time per iteration (minus nested same-thread events)
  std::vector<float> iter_us;   // time in each iteration (bounded by the window's iterations)

  CollectiveInfo coll;  // set when fclass == kCollective

  // Its inputs where the trace recorded shapes (record_shapes; pattern/input_shapes.h): the
  // shapes its time went to most, as text ("[64, 256], [256, 256]"), and the mean element count
  // of its inputs per call. Empty and 0 without shapes.
  std::string input_dims;
  double input_elements = 0;

  // Stable identity used to match functions across ranks.
  std::string Key() const;
};

// A FunctionPattern's fields without owning them: how the summary decoder hands a rank's
// functions to a compact job (pattern/compact_job.h), which keeps only their numbers and
// identities, so that no rank needs a string or vector per function on the way. The views
// live as long as what they point into (the decoder's: until it reads the next summary).
struct FunctionView {
  static constexpr uint32_t kNoRef = UINT32_MAX;
  std::string_view name;
  trace::EventKind kind = trace::EventKind::kCpuOp;
  FunctionClass fclass = FunctionClass::kOther;
  std::string_view stack;
  int32_t device = -1;
  int32_t stream = -1;
  bool main_thread = false;
  bool top_level = false;
  bool in_python = false;
  uint64_t count = 0;
  double total_us = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, max_us = 0, min_us = 0;
  double cv = 0;
  double calls_per_iter = 0;
  double per_iter_us = 0;
  double share = 0;
  double self_per_iter_us = 0;
  std::span<const float> iter_us;
  // CollectiveInfo's fields (empty and 0 for a function without them).
  std::string_view coll_op;
  double coll_msg_bytes = 0;
  std::string_view coll_dtype;
  int coll_group_size = 0;
  std::string_view coll_group;
  double coll_algbw_gbps = 0;
  double coll_busbw_gbps = 0;
  std::string_view input_dims;  // FunctionPattern's
  double input_elements = 0;
  // Where name and stack are in the decoder's string table (SummaryViews::strings): a compact
  // job then hashes and matches each string once per summary, not once per function that
  // names it. kNoRef: not from a table.
  uint32_t name_ref = kNoRef;
  uint32_t stack_ref = kNoRef;

  static FunctionView Of(const FunctionPattern& f);
  FunctionPattern ToPattern() const;
};

// An iteration left out of the per-iteration values: cut by the trace's start or end, or a
// warm-up step before the job reached its steady state.
struct ExcludedIteration {
  enum Reason : uint8_t { kPartial = 0, kWarmup = 1 };
  Reason reason = kPartial;
  int64_t step = -1;  // N of ProfilerStep#N; -1 for other sources
  int32_t index = 0;  // position among all the trace's iterations
  double ms = 0;
};

// One device's memory over a trace (profile_memory; pattern/memory_use.h), as the allocator
// counted it (bytes). The CPU's totals
// count only what was allocated while the profiler recorded (torch's CPU reporter starts from
// zero), the CUDA caching allocator's everything the process holds on the device.
struct DeviceMemory {
  std::string device;                // "cpu", "cuda:0", "device9:0"
  double peak_allocated_bytes = 0;   // the highest "Total Allocated"
  double peak_reserved_bytes = -1;   // the highest "Total Reserved"; -1: the trace gave none
  double start_allocated_bytes = 0;  // before the trace's first record
  double end_allocated_bytes = 0;    // after its last
  uint64_t allocations = 0;
  double allocated_bytes = 0;       // their sizes, summed
  uint64_t failed_allocations = 0;  // "[OutOfMemory]" records
  double largest_failed_bytes = 0;  // the largest request that failed
  // Per steady iteration of the summary (RankSummary::iteration_ms), the level at its end and
  // its peak: an iteration without a record keeps the level before it.
  std::vector<double> iteration_end_bytes;
  std::vector<double> iteration_peak_bytes;
};

// Memory that outlived the iteration that allocated it, by where it was allocated
// (pattern/memory_sites.h): from profile_memory's records, an allocation made in a steady
// iteration before the last and never freed in the trace. The place is the innermost Python
// frame around the allocation where the trace has Python frames (with_stack=True), else the
// top-level op. A leak keeps memory at the same place every iteration; a healthy job's kept
// memory (gradients, optimizer state made once) is one iteration's, or none.
struct MemorySite {
  std::string device;     // as DeviceMemory::device
  std::string function;   // "train.py(42): keep", or an op ("aten::clone")
  std::string stack;      // its callers, outermost first (FunctionPattern::stack)
  std::string op;         // under a Python function, the outermost op that allocated ("aten::ones")
  double kept_bytes = 0;  // summed over the iterations counted
  uint32_t kept_iterations = 0;     // the counted iterations that kept some here
  uint32_t counted_iterations = 0;  // the steady iterations before the last
  uint64_t allocations = 0;         // kept allocations
};

struct RankSummary {
  // 5: a process group's ranks as runs (start, stride, length); 4: a function may carry its
  // input shapes (flag 8); 3: zstd payload; 2 (deflated) and 1 still read.
  static constexpr int kVersion = 5;
  int rank = -1;
  int world_size = -1;
  std::string host;
  std::string network_switch;  // the switch above the host, where known ("switch-3")
  std::string source;          // trace file path or worker id
  bool legacy_format = false;
  bool has_gpu = false;
  std::vector<trace::ProcessGroup> process_groups;
  std::vector<trace::DeviceInfo> devices;
  std::string backend;       // distributedInfo.backend: nccl, gloo, ...
  std::string nccl_version;  // distributedInfo.nccl_version

  // Iterations. Only the steady-state ones: every per-iteration value (iteration_ms, the GPU
  // breakdown, each function's per-iteration time and calls) is over these; the partial and
  // warm-up iterations are listed in excluded_iterations.
  std::string iteration_source;  // "ProfilerStep", "optimizer", "window"
  bool whole_window = false;     // no markers: the window is one iteration (flagged)
  std::vector<double> iteration_ms;
  std::vector<int64_t> iteration_steps;  // N of each ProfilerStep#N; empty for other sources
  std::vector<ExcludedIteration> excluded_iterations;
  double window_ms = 0;
  uint64_t events_outside_iterations = 0;  // CPU events left out of per-iteration stats
  int64_t main_tid = -1;                   // the thread main_thread refers to

  // Per-iteration means, microseconds.
  double gpu_busy_us = 0;
  double gpu_idle_us = 0;
  double compute_us = 0;
  double comm_us = 0;
  double memcpy_us = 0;
  double comm_compute_overlap_us = 0;
  double cpu_critical_us = 0;  // CPU-side time while the GPU sits idle (GPU waits on CPU)
  // GPU work is charged to the step whose CPU side launched it (correlation ids), wherever it
  // runs; work launched before the profiler started belongs to no step: counted here.
  uint64_t pre_profiler_gpu_ops = 0;
  double pre_profiler_gpu_us = 0;

  std::vector<FunctionPattern> functions;  // sorted by per_iter_us, descending
  trace::ReadStats read_stats;

  // An online window's summary merges two parts: the Python tracer's file and torch.profiler's
  // trace. When one never came: which ("torch.profiler" or "python") and why. Such a rank is
  // compared with its peers only on what it has.
  std::string missing_part;
  std::string missing_why;

  // Per device, where the trace holds the profiler's memory records (profile_memory=True);
  // empty otherwise.
  std::vector<DeviceMemory> memory;
  // Where memory was kept, most kept first, at most kMaxMemorySites per device; empty without
  // profile_memory's records or with nothing kept.
  static constexpr size_t kMaxMemorySites = 8;
  std::vector<MemorySite> memory_sites;

  double MeanIterationMs() const;
  double MedianIterationMs() const;
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_PATTERN_H_
