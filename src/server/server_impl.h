// The server's internals, shared by its files: the state of one server, guarded by one
// mutex, as named parts (the agents: server/agent_registry.h; the windows: window_book.h, from
// sealed to published on a thread of their own: window_publisher.h; a hang: hang_reporter.h over
// hang_collection.h; the ranks: rank_state.h; the attempts: attempts.h; the policy:
// scheduler.h; what /metrics counts: server_counters.h), and the gRPC service over it
// (server_service.h, which answers the calls). server.cc starts and stops it;
// server_progress.cc files the agents' iteration reports, server_windows.cc opens windows (and
// runs the timer), server_metrics.cc renders /metrics. Not for use outside src/server.
#ifndef PERFTRACKER_SERVER_SERVER_IMPL_H_
#define PERFTRACKER_SERVER_SERVER_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "diagnose/hang.h"
#include "diagnose/since_baseline.h"
#include "perftracker.grpc.pb.h"
#include "report/html.h"
#include "server/agent_registry.h"
#include "server/attempts.h"
#include "server/command_stream.h"
#include "server/hang_collection.h"
#include "server/hang_reporter.h"
#include "server/healthy_watch.h"
#include "server/job_end.h"
#include "server/metrics_http.h"
#include "server/publisher.h"
#include "server/rank_state.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "server/server_counters.h"
#include "server/server_service.h"
#include "server/store.h"
#include "server/window.h"
#include "server/window_book.h"
#include "server/window_publisher.h"

namespace perftracker::server {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;

struct Server::Impl final {
  ServerOptions options;
  std::unique_ptr<Store> store;
  int64_t job_id = 0;
  std::unique_ptr<ServerService> service;  // the gRPC calls (server/server_service.h)
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool shutting_down = false;
  bool shut_down = false;
  AgentRegistry agents;                // the job's node agents (server/agent_registry.h)
  std::optional<std::string> job_key;  // the job being collected (RegisterRequest.job_id)
  std::map<int, RankState> ranks;
  // The job's attempts: an elastic launcher starts every rank again after a failure.
  AttemptLog attempts;
  WindowBook windows;  // the run's windows and their marks (server/window_book.h)
  // The online policy: when windows open, cooldowns, hang confirmation (server/scheduler.h).
  // Guarded by mu like the rest; the single source of which window is open.
  std::optional<WindowScheduler> sched;
  // The reports' files and the job's latest report (server/publisher.h); made at Start.
  std::optional<Publisher> reports;
  std::optional<diagnose::RankExit> first_failure;  // the launcher's, at the job's end
  ServerCounters counters;  // what /metrics counts (server/server_counters.h)
  std::unique_ptr<MetricsHttp> metrics;
  HangReporter hangs{this};  // a hang's stacks, diagnosis and amendment (server/hang_reporter.h)
  std::thread timer;
  HealthyWatch healthy;  // the unprofiled history, under mu
  // Closed windows, from sealed to published on a thread of its own (server/window_publisher.h).
  WindowPublisher publishing{this};

  // --- windows and hangs (server/server_windows.cc) ---

  // Where the job is, for the scheduler (with mu held). The ranks it waits for: those agents
  // declared, else those that reported.
  JobProgress ProgressLocked() const;

  // Opens a window, or returns the open one (already_open). SLOWDOWN and MEAN_MS: a slowdown
  // trigger opened it. TRIGGER_STEP (>= 0): the iteration the triggering rank reached, which the
  // start counts from when no report has gone further (an agent forwards a trigger before the
  // batch that led to it). MEMORY_RANKS: WindowSpec::memory_ranks. mu held.
  TriggerResult OpenWindowLocked(const std::string& reason, int iterations, bool slowdown = false,
                                 double mean_ms = 0, int64_t trigger_step = -1,
                                 std::vector<int> memory_ranks = {});

  // Says why each silent rank of SEALED did not report (server/rank_state.h ExplainMissing),
  // from what the server knows of the rank and of its agent now. Called with mu held.
  void ExplainMissingLocked(Window::Sealed* sealed) const;

  // The ranks the current attempt waits for, when no agent declared any: those that reported
  // in it (with mu held).
  std::set<int> CurrentRanksLocked() const;

  // Attempt attempts.current() began (RANK came back in process PID): the old attempt's open
  // window closes with what arrived, a hang collection ends, and progress and scheduling start
  // afresh, as for a new job, but in the same report. Called with mu held.
  void NewAttemptLocked(int rank, int pid);

  // One agent's iteration batches and ended workers (HOST: the agent's), with mu held.
  void ReportIterationsLocked(const std::string& agent_id, const std::string& host,
                              const v1::ReportIterationsRequest& req);

  void TimerLoop();
  // A rank's memory grows steadily (diagnose::FindMemoryGrowth): logged; a window opens once none
  // is under way (WindowBook) where that rank records its allocations (where it keeps memory).
  void OnMemoryGrowthLocked(int rank, const diagnose::MemoryGrowth& g, diagnose::MemoryKind kind);
  // The memory growth findings of the current attempt's ranks (mu held): every published
  // window's diagnosis carries them, since a leak stays.
  std::vector<diagnose::Finding> MemoryFindingsLocked() const;

  // Forgets what a long job no longer needs (with mu held): agents silent for
  // agent_expiry_seconds with no open stream (their ranks are no longer waited for), and
  // closed windows beyond the newest kKeptClosedWindows.
  void ExpireLocked();

  // One tick of the timer: window deadlines, hang confirmation, scheduled windows. LK is held
  // on entry and on a normal return.
  void TimerTick(std::unique_lock<std::mutex>& lk);

  // The windows the scheduler has due: a deferred slowdown, the baseline, the periodic ones.
  // Called with mu held.
  void MaybeOpenScheduledLocked();

  // The kind of a window's reason, for the windows_opened metric: its first word.
  static std::string ReasonKind(const std::string& reason);

  // The HTML page of diagnosis D (window ID; 0: the run's end; Publisher::RenderPage) with the
  // run's iteration series and windows as they are now. Called with mu held.
  std::string RenderHtmlLocked(const diagnose::Diagnosis& d, const pattern::CompactJob* job,
                               int64_t id, std::vector<report::WaitGroup> waits = {},
                               int64_t views_from = 0) const;

  // --- /metrics (server/server_metrics.cc) ---

  // /metrics in Prometheus' text format (called with mu held).
  std::string MetricsLocked() const;

  // --- the ranks' progress (server/server_progress.cc) ---

  // Whether agent ID may speak for RANK (AgentRegistry::Owns) as a gRPC status (with mu held):
  // an unknown id is NOT_FOUND, which tells an agent to register again.
  grpc::Status OwnsLocked(const std::string& id, int rank);
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_SERVER_IMPL_H_
