// The ranks' progress as their agents report it (server_impl.h): iteration batches, workers
// that ended, memory figures, each filed under the attempt it belongs to.
#include <algorithm>
#include <cmath>

#include "base/limits.h"
#include "server/server_impl.h"

namespace perftracker::server {

namespace {

// The memory figures of agent batch B (its proto's "0: unknown" kept).
MemoryReport MemoryReportOf(const v1::IterationBatch& b) {
  MemoryReport m;
  m.rss = std::max(b.rss_max_bytes(), b.rss_bytes());
  m.rss_low = b.rss_min_bytes();
  m.cgroup_limit = b.cgroup_memory_limit_bytes();
  m.cgroup_usage = b.cgroup_memory_usage_bytes();
  m.gpu_used = b.gpu_memory_bytes();
  m.gpu_free = b.gpu_free_bytes();
  m.gpu_total = b.gpu_total_bytes();
  m.gpu_index = b.gpu_index();
  m.cuda_allocated = b.cuda_allocated_bytes();
  m.cuda_reserved = b.cuda_reserved_bytes();
  m.cuda_peak_allocated = b.cuda_peak_allocated_bytes();
  return m;
}

}  // namespace

grpc::Status Server::Impl::OwnsLocked(const std::string& id, int rank) {
  switch (agents.Owns(id, rank)) {
    case AgentRegistry::Ownership::kOwns:
      return grpc::Status::OK;
    case AgentRegistry::Ownership::kUnknownAgent:
      return {grpc::StatusCode::NOT_FOUND, "unknown agent; register first"};
    case AgentRegistry::Ownership::kAnotherAgents:
      break;
  }
  return {grpc::StatusCode::PERMISSION_DENIED,
          fmt::format("rank {} belongs to another agent", rank)};
}

void Server::Impl::ReportIterationsLocked(const std::string& agent_id, const std::string& host,
                                          const v1::ReportIterationsRequest& req) {
  for (const v1::WorkerState& w : req.workers()) {
    if (!limits::ValidRank(w.rank()) || !OwnsLocked(agent_id, w.rank()).ok()) continue;
    RankState& r = ranks[w.rank()];
    WorkerSeen seen{w.pid(),    w.window_sent(),  w.window_acked(), w.window_accepted(),
                    w.exited(), w.exit_message(), w.process_gone(), w.last_iteration()};
    if (!r.worker || r.worker->ReplacedBy(seen)) r.worker = seen;
    r.agent = agent_id;
    if (!w.exited()) continue;
    // How the job's attempt ended (server/attempts.h); the time only orders the ends (a NaN
    // would break the sort).
    const double t = std::isfinite(w.exited_unix_seconds()) ? w.exited_unix_seconds() : 0;
    attempts.Ended(w.rank(), w.pid(), limits::ValidAttempt(w.attempt()) ? w.attempt() : 0,
                   w.exit_message(), std::max<int64_t>(w.last_iteration(), -1), t, host);
  }
  for (const v1::IterationBatch& b : req.batches()) {
    if (!limits::ValidRank(b.rank())) continue;  // nothing to file it under
    if (!OwnsLocked(agent_id, b.rank()).ok()) continue;
    const int restart = limits::ValidAttempt(b.attempt()) ? b.attempt() : 0;
    const AttemptLog::Placed placed = attempts.Place(b.rank(), std::max(b.pid(), 0), restart, host);
    if (placed.placement == AttemptLog::Placement::kNew) NewAttemptLocked(b.rank(), b.pid());
    RankState& r = ranks[b.rank()];
    r.agent = agent_id;
    const int n = std::min(b.steps_size(), b.iteration_ms_size());
    int64_t furthest = -1;
    for (int i = 0; i < n; ++i) furthest = std::max(furthest, b.steps(i));
    attempts.Progress(placed.attempt, b.rank(), furthest, n);
    if (placed.placement == AttemptLog::Placement::kEarlier) {
      // An earlier attempt's last batches: the run's statistics, not the current progress.
      for (int i = 0; i < n; ++i) r.Add(b.iteration_ms(i));
      continue;
    }
    r.attempt = placed.attempt;
    // The chart shows the attempts one after another: steps are run-wide there.
    const int64_t offset = attempts.Current().run_offset;
    for (int i = 0; i < n; ++i) {
      r.last_step = std::max(r.last_step, b.steps(i));
      r.AddStep(b.steps(i) + offset, b.iteration_ms(i));
      healthy.Add(b.steps(i), b.iteration_ms(i));
    }
    r.attempt_iterations += n;
    for (const MemoryGrowthFound& g : r.AddMemory(furthest, MemoryReportOf(b)))
      OnMemoryGrowthLocked(b.rank(), g.growth, g.kind);
    if (auto cleared = sched->Progressed(r.last_step))
      log::Detail("server", "rank {}'s hang trigger cleared: iterations resumed", *cleared);
    hangs.AmendIfResumed();
  }
}

}  // namespace perftracker::server
