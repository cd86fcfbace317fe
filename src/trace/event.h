// The trace event model: what every reader (Kineto JSON, legacy torch JSON) hands to the
// summarizer. Events are delivered one at a time through an EventSink; string_views in an
// Event point into the reader's buffer and are valid only during the OnEvent call, so a sink
// that keeps a name must intern it. Nothing here allocates per event.
#ifndef PERFTRACKER_TRACE_EVENT_H_
#define PERFTRACKER_TRACE_EVENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace perftracker::trace {

// What an event is, from Kineto's "cat" (legacy traces have no cat: everything is kCpuOp,
// except what the reader recognises by name).
enum class EventKind : uint8_t {
  kCpuOp,              // cpu_op, operator
  kUserAnnotation,     // user_annotation, record_function (ProfilerStep#N lives here)
  kGpuUserAnnotation,  // gpu_user_annotation
  kPythonFunction,     // python_function
  kCudaRuntime,        // cuda_runtime
  kCudaDriver,         // cuda_driver
  kCudaSync,           // cuda_sync
  kKernel,             // kernel (compute or NCCL)
  kMemcpy,             // gpu_memcpy
  kMemset,             // gpu_memset
  kOther,              // a known but uninteresting complete event (Trace, overhead, ...)
};

const char* EventKindName(EventKind kind);
bool IsGpuKind(EventKind kind);

// One complete ("ph":"X") event. Times are microseconds relative to the trace's own clock.
struct Event {
  EventKind kind = EventKind::kOther;
  std::string_view name;
  double ts_us = 0;
  double dur_us = 0;
  int64_t pid = 0;  // string pids/tids are hashed to stable integers
  int64_t tid = 0;

  // Linking args; -1 when absent.
  int64_t external_id = -1;
  int64_t correlation = -1;
  int32_t device = -1;
  int32_t stream = -1;
  int64_t python_id = -1;
  int64_t python_parent_id = -1;

  // A cuda_sync "Stream Wait Event" / "Event Sync": the stream its CUDA event was recorded on
  // and that cudaEventRecord's correlation ("wait_on_stream", "wait_on_cuda_event_record_corr_id").
  int32_t wait_on_stream = -1;
  int64_t wait_on_record_correlation = -1;

  // Collective args (Kineto "Collective name", "In msg nelems", "Out msg nelems", "dtype",
  // "Group size", "Process Group Ranks", "Process Group Name"); empty / -1 when absent.
  std::string_view collective_name;
  int64_t in_msg_nelems = -1;
  int64_t out_msg_nelems = -1;
  std::string_view dtype;
  int32_t group_size = -1;
  std::string_view pg_ranks;
  std::string_view pg_name;

  // Memcpy args ("bytes", "memory bandwidth (GB/s)") and the copy direction in the name.
  int64_t bytes = -1;

  // Legacy / record_shapes traces may carry a "Call stack" string ("file(line): fn;...").
  std::string_view call_stack;

  // record_shapes: "Input Dims", the raw JSON of one list per input ("[[8, 96], [96, 128], []]";
  // [] for a scalar or a non-tensor). Empty when absent.
  std::string_view input_dims;
};

// One of the profiler's memory records (profile_memory=True): Kineto writes an instant event
// ("ph":"i") named "[memory]" for every allocation and free the allocator reports, and
// "[OutOfMemory]" for an allocation that failed, with the allocator's totals after it:
//   {"ph": "i", "name": "[memory]", "ts": 12.5, "args": {"Device Type": 1, "Device Id": 0,
//    "Bytes": 4096, "Total Allocated": 1052672, "Total Reserved": 2097152, "Addr": 139...}}
// gives {ts_us 12.5, device_type 1, device_id 0, bytes 4096, total_allocated 1052672,
// total_reserved 2097152, addr 139...}. A free has negative Bytes and the address its allocation
// had. -1 where the trace left a field out.
struct MemoryEvent {
  double ts_us = 0;
  int64_t tid = 0;           // the thread that allocated or freed (the event's "tid")
  int64_t addr = -1;         // "Addr": pairs a free with its allocation (pattern/memory_sites.h)
  int32_t device_type = -1;  // c10::DeviceType: 0 CPU, 1 CUDA, ...
  int32_t device_id = -1;    // -1 for the CPU
  int64_t bytes = 0;
  int64_t total_allocated = -1;
  int64_t total_reserved = -1;
  bool out_of_memory = false;  // "[OutOfMemory]": an allocation of `bytes` failed
};

struct ProcessGroup {
  std::string name;
  std::string desc;
  std::string backend;
  int size = 0;
  std::vector<int> ranks;
};

struct DeviceInfo {
  int id = -1;
  std::string name;
  int num_sms = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

// A span used to cut the trace into iterations.
struct Span {
  double ts_us = 0;
  double dur_us = 0;
  int64_t tid = 0;
  int64_t step = -1;  // N of ProfilerStep#N, -1 for optimizer steps
};

// What a reader learns about a trace before its events arrive (from the top-level fields and
// from a cheap pre-scan for iteration markers).
struct TraceMeta {
  std::string path;
  bool legacy_format = false;  // torch 1.x list-of-events
  int rank = -1;               // from distributedInfo, else from the file name, else -1
  std::string rank_source;     // "distributedInfo", "file name"
  int world_size = -1;
  std::string backend;
  std::string nccl_version;  // distributedInfo.nccl_version, where the trace carries it
  std::string host;
  int64_t base_time_ns = 0;
  std::vector<ProcessGroup> process_groups;
  std::vector<DeviceInfo> devices;
  std::vector<Span> profiler_steps;   // ProfilerStep#N, sorted by ts
  std::vector<Span> optimizer_steps;  // Optimizer.step#... spans, sorted by ts
};

// Counters for everything a reader skipped or could not use. Bad data is counted, not fatal.
struct ReadStats {
  uint64_t bytes = 0;             // uncompressed JSON bytes
  uint64_t events = 0;            // complete events delivered
  uint64_t flow_events = 0;       // ac2g / fwdbwd flows (s/f/t), counted and skipped
  uint64_t metadata_events = 0;   // ph M / i / C (other than memory records)
  uint64_t memory_events = 0;     // "[memory]" / "[OutOfMemory]" instant events delivered
  uint64_t unknown_kind = 0;      // complete events with an unknown cat
  uint64_t malformed_events = 0;  // events missing ts/name or with wrong types
  // The first malformed event: where it was found and what was expected instead, for the error
  // of a trace with no valid event and the note of one with some.
  uint64_t first_bad_byte = 0;
  std::string first_bad;                         // empty: none
  std::map<std::string, uint64_t> unknown_cats;  // cat -> count, bounded
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // Called once per trace, before any event.
  virtual void OnBegin(const TraceMeta& meta) {}
  virtual void OnEvent(const Event& event) = 0;
  // A memory record (profile_memory); most sinks have no use for them.
  virtual void OnMemory(const MemoryEvent& event) {}
  virtual void OnEnd(const ReadStats& stats) {}
};

}  // namespace perftracker::trace

#endif  // PERFTRACKER_TRACE_EVENT_H_
