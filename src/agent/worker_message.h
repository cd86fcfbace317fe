// Typed parsing of one line of the worker protocol (src/worker/protocol.md): the part of the
// agent that reads bytes a worker process wrote, kept apart from sockets and state so it can be
// fuzzed and tested alone (fuzz/worker_message_fuzz.cc). Everything a line may declare is
// bounded here: strings, iteration items, threads and frames; ranks and world sizes outside
// base/limits.h's range are treated as unknown.
#ifndef PERFTRACKER_AGENT_WORKER_MESSAGE_H_
#define PERFTRACKER_AGENT_WORKER_MESSAGE_H_

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/limits.h"
#include "pattern/collected.h"

namespace perftracker::agent {

enum class WorkerMessageType {
  kMalformed,  // not a JSON object with a string "type", or a known type missing what it needs
  kUnknown,    // well-formed, a type this agent does not know
  kHello,
  kIterations,
  kTrigger,
  kPythonTrace,
  kTorchTrace,
  kStacks,
  kLearned,
  kRelearn,
  kStats,
  kProfileAck,
};

// Bounds on one line's contents (a line itself is at most SocketSink::kMaxLineBytes).
struct WorkerMessageLimits {
  static constexpr size_t kMaxString = limits::kMaxWorkerString;  // longer strings are cut
  static constexpr size_t kMaxItems = limits::kMaxWorkerItems;
  static constexpr size_t kMaxThreads = limits::kMaxStackThreads;
  static constexpr size_t kMaxFrames = limits::kMaxStackFrames;  // innermost kept
};

struct IterationItem {
  int64_t index = 0;
  double start_ns = 0, end_ns = 0;
};

struct WorkerMessage {
  WorkerMessageType type = WorkerMessageType::kMalformed;
  // Identity, on every message (absent: not known yet). attempt: the launcher's restart count
  // of the worker (torchrun's TORCHELASTIC_RESTART_COUNT).
  std::optional<int> pid, rank, local_rank, world_size, attempt;
  std::optional<std::string> host;
  // hello
  int64_t version = 0;
  int64_t clock_offset_ns = 0;
  // iterations (items with a bad shape are skipped and counted)
  std::vector<IterationItem> items;
  size_t skipped_items = 0;
  // Read as the batch was sent; absent where the process has not initialized CUDA, or the
  // figures are not three finite byte counts of at most limits::kMaxMemoryBytes.
  std::optional<pattern::CudaMemory> cuda;
  // trigger: kind is "slowdown" or "hang" (another kind makes the message kUnknown)
  std::string kind;
  int64_t iteration = 0;
  double mean_ns = 0, best_ns = 0;
  // python_trace, torch_trace, profile_ack
  std::string path;
  std::optional<int64_t> window;
  std::optional<bool> torch;  // python_trace: a torch trace follows
  std::optional<std::string> error;
  bool accepted = false;  // profile_ack
  // stacks (rank, pid and host are filled from the identity by the caller)
  int64_t request_id = 0;
  pattern::RankStacks stacks;
  // learned
  std::string pattern;
  // stats
  double reference_ns = 0, threshold_ns = 0, recent_ns = 0;
  int64_t iterations = 0, slowdowns = 0, hangs = 0;
};

// Parses LINE (no newline) into OUT with PARSER (reused between lines: it keeps its buffers).
// Never fails: what cannot be used is kMalformed or kUnknown.
void ParseWorkerMessage(std::string_view line, simdjson::dom::parser& parser, WorkerMessage* out);

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_WORKER_MESSAGE_H_
