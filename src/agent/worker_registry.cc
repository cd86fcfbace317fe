#include "agent/worker_registry.h"

#include <algorithm>
#include <utility>

namespace perftracker::agent {

WorkerRegistry::WorkerRegistry(size_t max_workers, double exit_recheck_seconds,
                               std::function<bool(int pid)> process_gone)
    : max_workers_(max_workers),
      exit_recheck_seconds_(exit_recheck_seconds),
      process_gone_(std::move(process_gone)) {}

void WorkerRegistry::Note(const WorkerStatus& w) {
  if (w.pid <= 0) return;
  if (!workers_.count(w.pid) && workers_.size() >= max_workers_) {
    auto old = std::find_if(workers_.begin(), workers_.end(),
                            [](const auto& kv) { return kv.second.exited; });
    if (old == workers_.end()) return;
    changed_.erase(old->first);
    exit_rechecks_.erase(old->first);
    workers_.erase(old);
  }
  workers_[w.pid] = w;
  changed_.insert(w.pid);
  if (!w.exited) exit_rechecks_.erase(w.pid);
}

WorkerStatus WorkerRegistry::NoteExit(WorkerStatus w, double now_unix_s, Clock::time_point now) {
  w.exited = true;
  w.exited_unix_s = now_unix_s;
  w.process_gone = process_gone_(w.pid);
  Note(w);
  if (!w.process_gone && workers_.count(w.pid)) exit_rechecks_[w.pid] = now;
  return w;
}

void WorkerRegistry::RecheckExits(Clock::time_point now) {
  for (auto it = exit_rechecks_.begin(); it != exit_rechecks_.end();) {
    auto w = workers_.find(it->first);
    if (w != workers_.end() && process_gone_(it->first)) {
      w->second.process_gone = true;
      changed_.insert(it->first);
      it = exit_rechecks_.erase(it);
    } else if (w == workers_.end() ||
               std::chrono::duration<double>(now - it->second).count() > exit_recheck_seconds_) {
      it = exit_rechecks_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<WorkerStatus> WorkerRegistry::TakeChanged() {
  std::vector<WorkerStatus> out;
  for (int pid : changed_) {
    auto it = workers_.find(pid);
    if (it != workers_.end() && it->second.rank >= 0) out.push_back(it->second);
  }
  changed_.clear();
  return out;
}

std::vector<WorkerStatus> WorkerRegistry::All() const {
  std::vector<WorkerStatus> out;
  for (const auto& [pid, w] : workers_)
    if (w.rank >= 0) out.push_back(w);
  return out;
}

}  // namespace perftracker::agent
