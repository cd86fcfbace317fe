// What the collectors gather besides summaries, shared by collection (agent, server) and
// diagnosis: every rank's stacks when a job hangs, its CUDA allocator's figures, and the per-rank
// metrics the node agents sample during a window. Data flows one way: the agent fills these,
// diagnose/ reads them, and neither reaches into the other.
#ifndef PERFTRACKER_PATTERN_COLLECTED_H_
#define PERFTRACKER_PATTERN_COLLECTED_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace perftracker::pattern {

// The CUDA caching allocator's figures of a rank's process, as its collector read them with a
// batch of iterations (bytes, summed over its devices): what its tensors hold, what the allocator
// reserved from the driver, and the peak of the first since the process began (or
// torch.cuda.reset_peak_memory_stats).
struct CudaMemory {
  double allocated = 0, reserved = 0, peak_allocated = 0;
};

struct StackFrame {
  std::string file;
  int line = 0;
  std::string function;
};

struct ThreadStack {
  int64_t tid = 0;
  std::string name;
  bool main = false;               // the thread that runs the training loop
  std::vector<StackFrame> frames;  // outermost first
};

// The last collective the rank entered through torch.distributed's Python API.
struct LastCollective {
  std::string op;     // empty: none seen
  int64_t count = 0;  // collectives entered so far
  std::string file;   // the caller's file:line
  int line = 0;
  bool in_progress = false;
  double seconds = 0;  // since it was entered
};

struct RankStacks {
  int rank = -1;
  int pid = 0;
  std::string host;
  int64_t iteration = -1;  // the worker's last completed iteration index
  std::vector<ThreadStack> threads;
  LastCollective last_collective;
};

// One collective in a rank's ring of collectives, as torch's Flight Recorder keeps it (an entry
// of its dump) or perftracker's worker records it.
struct CollectiveCall {
  std::string group;       // the process group's name ("0": torch numbers or hashes them)
  std::string group_desc;  // its description ("default_pg")
  int64_t seq = -1;        // its number among the group's collectives (or p2p ops, for p2p)
  bool p2p = false;
  std::string op;       // "all_reduce", "barrier": the profiling name without its backend
  std::string backend;  // "gloo", "nccl"
  std::vector<std::vector<int64_t>> sizes;  // input tensors' sizes
  std::vector<std::string> dtypes;          // input tensors' dtypes ("Float")
  // Output tensors' sizes and dtypes, where the dump has them (torch's does, the worker's ring
  // does not): what PyTorch's fr_trace compares besides the inputs (pattern/fr_export.h).
  std::vector<std::vector<int64_t>> output_sizes;
  std::vector<std::string> output_dtypes;
  bool has_outputs = false;  // the dump recorded them (a barrier's are recorded, and none)
  std::string state;                        // scheduled, started, completed
  int64_t created_ns = 0;                   // wall clock
  std::vector<StackFrame> frames;           // outermost first
};

// Where a rank's group stood at the dump: the last collective it enqueued, started, completed
// (-1: none, or the backend does not say).
struct GroupProgress {
  int64_t last_enqueued = -1, last_started = -1, last_completed = -1;
};

// One rank's ring of collectives: the last ones it entered, oldest first.
struct CollectiveLog {
  int rank = -1;
  std::string source;   // the file or the worker it came from
  std::string version;  // the dump format's version ("2.10")
  std::vector<CollectiveCall> calls;
  std::map<std::string, GroupProgress> progress;        // by group name
  std::map<std::string, std::vector<int>> group_ranks;  // the group's ranks, where the dump says
};

// Metrics per rank, as agents upload them (agent/proc_sampler.h names).
using RankMetrics = std::map<int, std::map<std::string, double>>;

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_COLLECTED_H_
