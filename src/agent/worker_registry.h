// What the agent knows of its workers for the server: each worker's newest status by pid, live
// and exited, the pids whose status changed since the server last heard, and, for a worker whose
// connection closed before its process had quite ended, when to look again. SocketSink keeps one
// (under its lock) and fills it from the workers' connections.
#ifndef PERFTRACKER_AGENT_WORKER_REGISTRY_H_
#define PERFTRACKER_AGENT_WORKER_REGISTRY_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "agent/agent.h"

namespace perftracker::agent {

class WorkerRegistry {
 public:
  using Clock = std::chrono::steady_clock;

  // At most MAX_WORKERS kept; an exited worker's process is looked for (PROCESS_GONE) until
  // EXIT_RECHECK_SECONDS after its connection closed.
  WorkerRegistry(size_t max_workers, double exit_recheck_seconds,
                 std::function<bool(int pid)> process_gone);

  // W's newest status (a worker of no pid is not kept). A new worker takes the place of an
  // exited one when the registry is full; with none exited it is not kept.
  void Note(const WorkerStatus& w);
  // W's connection closed at NOW: noted as exited, its process looked for now and, until it is
  // gone, at each RecheckExits. The status noted.
  WorkerStatus NoteExit(WorkerStatus w, double now_unix_s, Clock::time_point now);
  // Exited workers whose process has ended since: changed.
  void RecheckExits(Clock::time_point now);
  // The statuses changed since the last call, of workers whose rank is known (the server files
  // a worker under its rank: one not known yet is said once it is).
  std::vector<WorkerStatus> TakeChanged();
  // Every worker whose rank is known.
  std::vector<WorkerStatus> All() const;

 private:
  size_t max_workers_;
  double exit_recheck_seconds_;
  std::function<bool(int pid)> process_gone_;
  std::map<int, WorkerStatus> workers_;
  std::set<int> changed_;
  std::map<int, Clock::time_point> exit_rechecks_;
};

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_WORKER_REGISTRY_H_
