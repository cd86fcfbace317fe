// The agent's side of the worker protocol (src/worker/protocol.md): listens on a Unix stream
// socket, reads each worker's newline-delimited JSON (iterations, triggers, finished traces,
// stack replies), and sends profile and stacks commands. Owns the socket file, one I/O thread
// (poll(), non-blocking, bounded buffers) and each connected worker's identity; the parsing of
// a line is agent/worker_message.h, and putting a worker's Python and torch.profiler traces of a
// window together is agent/trace_pairing.h. The stream is lossy by design: bad lines are counted
// and skipped, never fatal.
#ifndef PERFTRACKER_AGENT_SOCKET_SINK_H_
#define PERFTRACKER_AGENT_SOCKET_SINK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent.h"
#include "agent/trace_retention.h"
#include "base/limits.h"
#include "base/status.h"
#include "pattern/collected.h"

namespace perftracker::agent {

class SocketSink : public AgentLocalSink {
 public:
  struct Options {
    // A Python trace announced with torch: true is uploaded without its torch trace after this.
    double torch_wait_seconds = 30;
    // A torch trace whose Python trace never came is uploaded alone after this.
    double orphan_torch_seconds = 60;
    // A worker that connects this long after StartWindow no longer gets that window's command
    // (on top of the window's max_seconds: the worker may wait 30 s for its rank first).
    double late_join_seconds = 60;
    // Raw traces kept on the node: the newest windows' folders, within a size cap.
    TraceRetention retention;
    // After a worker's connection closed, how long its process is looked for again.
    double exit_recheck_seconds = 10;
  };

  // What the I/O thread dropped or skipped, for logs and tests.
  struct Counters {
    uint64_t connections = 0;       // accepted so far
    uint64_t lines = 0;             // complete lines read
    uint64_t malformed = 0;         // not a JSON object with a string "type"
    uint64_t unknown_type = 0;      // well-formed, but a type this agent does not know
    uint64_t oversized_lines = 0;   // longer than kMaxLineBytes: dropped
    uint64_t dropped_commands = 0;  // a worker's output buffer was full
    uint64_t dropped_iterations = 0;
    uint64_t refused_peers = 0;    // connections from another user's process: closed at once
    uint64_t forged_messages = 0;  // naming another pid or rank than their connection's: dropped
    uint64_t rank_conflicts = 0;   // claimed a rank a live worker of another process holds
    uint64_t refused_traces = 0;   // a trace path not a regular file inside the trace folder
  };

  static constexpr size_t kMaxLineBytes = limits::kMaxWorkerLine;
  static constexpr size_t kMaxOutputBytes = 1 << 20;       // per connection
  static constexpr size_t kMaxUnrankedIterations = 10000;  // per connection, until rank is known

  SocketSink(std::string socket_path, std::string trace_dir, Options options);
  SocketSink(std::string socket_path, std::string trace_dir)
      : SocketSink(std::move(socket_path), std::move(trace_dir), Options()) {}
  ~SocketSink() override;
  SocketSink(const SocketSink&) = delete;
  SocketSink& operator=(const SocketSink&) = delete;

  // Makes the socket's folder private (base/private_dir.h; refused if it exists and is not),
  // binds and listens (a stale socket file is replaced; the socket is 0600), links
  // TraceDirLink() to the trace folder, and starts the I/O thread. Only processes of this
  // agent's user are served (SO_PEERCRED); each connection's pid and rank are the first it
  // names, and a trace is read only if it is a regular file inside the trace folder
  // (agent/worker_guard.h).
  Status Start();
  // Where the workers learn which folder they may write traces to: SOCKET.traces, a link.
  static std::string TraceDirLink(const std::string& socket_path) {
    return socket_path + ".traces";
  }
  // Joins the I/O thread, closes every connection and removes the socket file. Idempotent.
  void Stop();

  // Sends every connected worker a profile command writing under
  // <trace_dir>/window-<id>; workers connecting later while the window is open get it too,
  // unless they are a later attempt of the job: a higher restart count than the workers that
  // got the command, or every one of those workers is gone (an elastic restart numbers its
  // iterations from 0 again, and a stale window would keep its ranks from the next one).
  Status StartWindow(const WindowCommand& command) override;
  std::vector<WorkerTrace> PollFinished() override;
  std::vector<IterationReport> PollIterations() override;
  std::vector<int> WorkerPids() override;
  std::vector<WorkerTrigger> PollTriggers() override;
  Status RequestStacks(int64_t request_id) override;
  void WindowUploaded(int pid, int64_t window_id) override;
  std::vector<std::pair<int64_t, pattern::RankStacks>> PollStacks() override;
  // A worker's status changes when its rank becomes known, a window's command is sent to it, it
  // answers the command, or its connection closes (then whether its process is gone is checked
  // again for exit_recheck_seconds: a socket closes before its process has quite ended).
  std::vector<WorkerStatus> PollWorkerChanges() override;
  std::vector<WorkerStatus> AllWorkers() override;
  bool RelaysWorkers() const override { return true; }
  // The socket's folder: python/perftracker/loader.py finds it from the socket path it is given.
  std::string LoaderStatsDir() const override;

  Counters counters() const;
  // The folder a window's traces are written to.
  std::string WindowDir(int64_t window_id) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_SOCKET_SINK_H_
