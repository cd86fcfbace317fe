// Pairs each worker's two files of a window, its Python tracer's and its torch.profiler's, which
// arrive as separate messages in either order (or one never does), into one trace to summarize.
// Owns the traces waiting for their partner and the recently paired ones a late torch trace
// may still follow. No sockets, no clock of its own: every call takes NOW, so tests run it on a
// fake time. agent/socket_sink.cc feeds it the worker messages and takes what is ready.
#ifndef PERFTRACKER_AGENT_TRACE_PAIRING_H_
#define PERFTRACKER_AGENT_TRACE_PAIRING_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace perftracker::agent {

class TracePairing {
 public:
  using Clock = std::chrono::steady_clock;
  using Time = Clock::time_point;

  struct Options {
    // A Python trace announced with torch: true is taken without its torch trace after this.
    double torch_wait_seconds = 30;
    // A torch trace whose Python trace never came is taken alone after this.
    double orphan_torch_seconds = 60;
  };

  // A worker's window, ready to summarize.
  struct Paired {
    int pid = 0;
    int rank = -1;                   // -1: not known when its files arrived
    std::vector<std::string> paths;  // the Python trace first, when there is one
    // A part that never came: "torch.profiler" or "python", and why (RankSummary::missing_part).
    std::string missing_part;
    std::string missing_why;
  };

  // Bounds: a worker that floods the agent with traces evicts its oldest pending ones.
  static constexpr size_t kMaxPending = 4096;
  static constexpr size_t kMaxRemembered = 1024;  // paired Python traces a torch trace may follow

  explicit TracePairing(Options options) : options_(options) {}

  // Worker PID (RANK) finished its Python trace at PATH for WINDOW (nullopt: unknown);
  // TORCH_EXPECTED: the worker also runs torch.profiler for it.
  void PythonTrace(int pid, int rank, std::optional<int64_t> window, const std::string& path,
                   bool torch_expected, Time now);
  // Worker PID's torch.profiler trace for WINDOW: at PATH, or ERROR (the worker's reason it has
  // none). False when it came after its window was already taken without it (it is dropped).
  bool TorchTrace(int pid, int rank, std::optional<int64_t> window, const std::string& path,
                  const std::optional<std::string>& error, Time now);
  // Appends to OUT the windows whose files are all in, or whose partner was waited for long
  // enough.
  void Reap(Time now, std::vector<Paired>* out);

  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    int pid = 0;
    int rank = -1;
    std::optional<int64_t> window;
    bool have_python = false;
    std::string python_path;
    bool torch_expected = true;
    bool torch_done = false;
    std::string torch_path;   // empty: the torch trace failed
    std::string torch_error;  // the worker's reason when it failed
    Time python_at, torch_at;
  };
  struct Taken {
    int pid = 0;
    std::optional<int64_t> window;
    std::string python_path;
  };

  Pending& NewPending();
  // Whether E is done at NOW; if so, what it gives is appended to OUT.
  bool Done(const Pending& e, Time now, std::vector<Paired>* out);

  Options options_;
  std::vector<Pending> pending_;
  std::deque<Taken> taken_;  // taken without their torch trace, which may still come
};

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_TRACE_PAIRING_H_
