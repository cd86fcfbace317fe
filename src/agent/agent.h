// The node agent: registers with the server, watches for profile commands, relays them to the
// local workers through an AgentLocalSink, summarizes each worker's window into behaviour
// patterns in this process (never in the training process), adds hardware metrics sampled
// during the window, and uploads the summary.
#ifndef PERFTRACKER_AGENT_AGENT_H_
#define PERFTRACKER_AGENT_AGENT_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/os_stats.h"
#include "base/credentials.h"
#include "base/status.h"
#include "pattern/collected.h"

namespace perftracker::agent {

struct WindowCommand {
  int64_t window_id = 0;
  int64_t start_iteration = 0;
  int iterations = 0;
  double max_seconds = 0;
  bool record_shapes = false;  // the CPU ops' input shapes (ProfileWindow.record_shapes)
  std::vector<int> memory_ranks =
      {};  // the ranks that record allocations (ProfileWindow.memory_ranks)
};

struct IterationReport {
  int rank = -1;
  int64_t step = 0;
  double iteration_ms = 0;
  int pid = 0;      // the worker process (0: unknown)
  int attempt = 0;  // its launcher's restart count (torchrun's TORCHELASTIC_RESTART_COUNT)
  // The CUDA allocator's figures its worker sent with the batch, on the batch's last iteration.
  std::optional<pattern::CudaMemory> cuda = {};
};

// The traces a worker finished for the current window: the first path owns the iterations (the
// Python tracer's file with ProfilerStep markers), the others (torch.profiler's) are merged into
// it (pattern/merge.h).
struct WorkerTrace {
  std::vector<std::string> paths;
  int rank = -1;        // -1: take it from the trace
  int pid = 0;          // 0: unknown
  int world_size = -1;  // the worker's WORLD_SIZE, where known (traces may not say)
  // A part that never came: "torch.profiler" or "python", and why (RankSummary::missing_part).
  std::string missing_part;
  std::string missing_why;
};

// A worker's iteration detector fired.
struct WorkerTrigger {
  int rank = -1;
  std::string kind;  // "slowdown" or "hang"
  int64_t iteration = 0;
  double mean_ms = 0;
  double best_ms = 0;  // slowdown: the best mean since learning
};

// What the agent knows of one local worker process, for the server (proto WorkerState): whether
// a window's command reached it, and whether it exited. The server says with it why a rank did
// not report for a window.
struct WorkerStatus {
  int rank = -1;
  int pid = 0;
  int64_t window_sent = 0;   // the newest window whose profile command went to it
  int64_t window_acked = 0;  // the newest window it answered (profile_ack); 0: none
  bool window_accepted = false;
  bool exited = false;        // its connection closed
  bool exit_message = false;  // it sent its exit message (stats) first: a normal exit
  bool process_gone = false;  // its process no longer exists
  int64_t last_iteration = -1;
  // Its launcher's restart count (torchrun's TORCHELASTIC_RESTART_COUNT; an elastic restart
  // starts every rank again), and when its connection closed (unix seconds, 0: it has not).
  int attempt = 0;
  double exited_unix_s = 0;
};

// How the agent reaches local workers. The worker side (a Unix-socket interface) plugs in here;
// FolderSink is the stand-in that picks up trace files dropped into a folder.
class AgentLocalSink {
 public:
  virtual ~AgentLocalSink() = default;
  // Tells every local worker to profile the window.
  virtual Status StartWindow(const WindowCommand& command) = 0;
  // Traces finished since the last call.
  virtual std::vector<WorkerTrace> PollFinished() = 0;
  // Iterations the workers completed since the last call.
  virtual std::vector<IterationReport> PollIterations() { return {}; }
  // Worker processes whose CPU time and context switches are sampled.
  virtual std::vector<int> WorkerPids() { return {}; }
  // Detector triggers since the last call (forwarded to the server, which opens the window).
  virtual std::vector<WorkerTrigger> PollTriggers() { return {}; }
  // Asks every local worker for its Python stacks and last collective (a hang).
  virtual Status RequestStacks(int64_t request_id) { return Status::Ok(); }
  // The window's summary of worker PID went to the server (or could not): the worker's detector
  // counts iterations again (the collection slowed them until now).
  virtual void WindowUploaded(int pid, int64_t window_id) {}
  // Stack replies since the last call, with the request id they answer.
  virtual std::vector<std::pair<int64_t, pattern::RankStacks>> PollStacks() { return {}; }
  // Workers whose status changed since the last call, the newest status of each.
  virtual std::vector<WorkerStatus> PollWorkerChanges() { return {}; }
  // The status of every worker known (after the agent registered again: a new server knows
  // none of them).
  virtual std::vector<WorkerStatus> AllWorkers() { return {}; }
  // Whether the ranks are worker processes this sink talks to (a socket; a folder is not).
  virtual bool RelaysWorkers() const { return false; }
  // The folder where the workers' DataLoader worker processes keep their batch counts
  // (agent/loader_stats.h); "" where there are none.
  virtual std::string LoaderStatsDir() const { return ""; }
};

// Trace files (*.json, *.json.gz) appearing in DIR while a window is open belong to it. Files
// there before the agent started are ignored; a file counts once it stopped growing.
class FolderSink : public AgentLocalSink {
 public:
  explicit FolderSink(std::string dir);
  Status StartWindow(const WindowCommand& command) override;
  std::vector<WorkerTrace> PollFinished() override;

 private:
  std::string dir_;
  std::set<std::string> seen_;
  std::map<std::string, uintmax_t> sizes_;  // size at the previous poll
};

struct AgentOptions {
  std::string server;  // host:port
  std::string token;
  TlsFiles tls;        // a server off loopback speaks TLS: its CA (and this agent's cert and key)
  std::string host;    // this node's name (default: hostname)
  std::string job_id;  // the same on every node of a job (RegisterRequest.job_id)
  std::vector<int> ranks;  // local ranks, where known
  double poll_seconds = 0.2;
  // Asks the server for a window once a local rank completed this iteration (scripted use;
  // -1: never).
  int64_t profile_at_iteration = -1;
};

// What the agent sees of its local ranks, for a launcher's live status line.
struct AgentProgress {
  int ranks = 0;            // local ranks that reported an iteration
  int64_t iteration = -1;   // the furthest iteration of any of them (-1: none yet)
  double iteration_ms = 0;  // the median of their latest iteration times
  std::string trigger;      // the latest detector trigger ("slowdown on rank 2"); "" none
  int64_t window = 0;       // the latest window command (0: none)
  int window_uploads = 0;   // local summaries of that window uploaded so far
};

// A worker's memory at its latest iteration report: its resident set and its memory cgroup.
struct WorkerMemory {
  int64_t step = -1;  // the iteration it reported last
  double rss_bytes = -1;
  CgroupMemory cgroup;          // dir "" when none was found
  int64_t host_oom_kills = -1;  // the host's OOM kills since boot (/proc/vmstat; -1: unknown)
  // The same counts at the report before (its cgroup's where it was in the same one).
  int64_t oom_kills_before = -1, host_oom_kills_before = -1;
};
// What a worker's memory cgroup says once the worker died: whether an OOM killer ended a process
// since the worker's report before last (the kernel counts kills per memory cgroup and on the
// host; a SIGKILL with a kill counted is the OOM killer's), with the last report's figures.
struct MemoryEnd {
  WorkerMemory last;
  CgroupMemory now;
  bool oom_killed = false;
};

class Agent {
 public:
  Agent(AgentOptions options, std::unique_ptr<AgentLocalSink> sink);
  ~Agent();
  // Registers (UNAUTHENTICATED comes back as an error: the token is missing or wrong) and
  // serves until Stop.
  Status Run();
  void Stop();
  // Once the local workers' connections have all closed (each one's last messages read), waits
  // for a whole round of the agent's loop to send what they said to the server; false when
  // TIMEOUT passed first. For a launcher whose ranks all ended. Thread-safe.
  bool Flush(std::chrono::milliseconds timeout);
  // Thread-safe; cheap (a copy under the agent's lock).
  AgentProgress Progress() const;
  // After worker PID died: its memory cgroup's verdict (nullopt: it never reported an iteration
  // with a pid). Thread-safe; reads the cgroup's files.
  std::optional<MemoryEnd> MemoryAtEnd(int pid) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Client-side calls for the CLI: open a window now, and print the server's view.
StatusOr<std::string> TriggerNow(const std::string& server, const std::string& token,
                                 const TlsFiles& tls, const std::string& reason);
StatusOr<std::string> ServerStatus(const std::string& server, const std::string& token,
                                   const TlsFiles& tls = {});

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_AGENT_H_
