#include "server/attempts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace perftracker::server {

namespace {

// Pids listed in an attempt's one-line summary; the rest are counted.
constexpr size_t kListedPids = 8;

std::string HowEnded(bool clean) { return clean ? "exited" : "killed or crashed (no exit hook)"; }

}  // namespace

int64_t Attempt::LastStep() const {
  int64_t step = -1;
  for (const auto& [r, a] : ranks) step = std::max(step, a.last_step);
  return step;
}

Attempt* AttemptLog::Find(int number) {
  for (Attempt& a : attempts_)
    if (a.number == number) return &a;
  return nullptr;
}

void AttemptLog::Begin() {
  const Attempt& last = attempts_.back();
  Attempt next;
  next.number = last.number + 1;
  next.run_offset = last.run_offset + last.LastStep() + 1;
  attempts_.push_back(std::move(next));
  while (attempts_.size() > kMaxAttempts) {
    attempts_.pop_front();
    ++dropped_;
  }
}

AttemptLog::Placed AttemptLog::Place(int rank, int pid, int restart, const std::string& host) {
  Attempt& cur = attempts_.back();
  AttemptRank* known = nullptr;
  if (auto it = cur.ranks.find(rank); it != cur.ranks.end() && it->second.pid > 0)
    known = &it->second;
  bool begin = false;
  if (pid > 0 && known != nullptr && known->pid == pid) {
    // The same process never says a higher restart count: a new process reused the pid.
    begin = restart > known->restart_count;
  } else if (pid > 0) {
    // Late news from an earlier attempt's process (its last batches)?
    for (auto a = attempts_.rbegin() + 1; a != attempts_.rend(); ++a) {
      auto r = a->ranks.find(rank);
      if (r != a->ranks.end() && r->second.pid == pid) return {Placement::kEarlier, a->number};
    }
    // The rank runs in another process now: the launcher started the job's ranks again.
    begin = known != nullptr;
  }
  if (begin) Begin();
  Attempt& a = attempts_.back();
  AttemptRank& ar = a.ranks[rank];
  if (pid > 0) ar.pid = pid;
  ar.restart_count = std::max(ar.restart_count, restart);
  if (!host.empty()) ar.host = host;
  a.restart_count = std::max(a.restart_count, restart);
  return {begin ? Placement::kNew : Placement::kCurrent, a.number};
}

void AttemptLog::Progress(int attempt, int rank, int64_t step, int64_t n) {
  Attempt* a = Find(attempt);
  if (a == nullptr) return;
  AttemptRank& r = a->ranks[rank];
  r.last_step = std::max(r.last_step, step);
  r.iterations += n;
}

void AttemptLog::Ended(int rank, int pid, int restart, bool clean, int64_t last_iteration,
                       double unix_s, const std::string& host) {
  if (pid <= 0) return;
  AttemptRank* found = nullptr;
  for (auto a = attempts_.rbegin(); a != attempts_.rend() && !found; ++a) {
    auto r = a->ranks.find(rank);
    if (r != a->ranks.end() && r->second.pid == pid) found = &r->second;
  }
  if (found == nullptr) {
    // It ended before its first iteration: the current attempt's, unless that attempt already
    // runs the rank in another process.
    Attempt& cur = attempts_.back();
    if (restart < cur.restart_count || (cur.ranks.count(rank) && cur.ranks[rank].pid > 0)) return;
    found = &cur.ranks[rank];
    found->pid = pid;
    found->restart_count = restart;
    found->host = host;
    cur.restart_count = std::max(cur.restart_count, restart);
  }
  if (found->ended) return;
  found->ended = true;
  found->clean = clean;
  found->ended_unix_s = unix_s;
  found->last_step = std::max(found->last_step, last_iteration);
}

diagnose::AttemptInfo AttemptLog::Info(const Attempt& a) {
  diagnose::AttemptInfo info;
  info.attempt = a.number;
  info.restart_count = a.restart_count;
  info.last_iteration = a.LastStep();
  std::set<std::string> hosts;
  std::vector<int> running;
  for (const auto& [rank, r] : a.ranks) {
    info.ranks.push_back(rank);
    if (r.pid > 0) info.pids[rank] = r.pid;
    if (!r.host.empty()) hosts.insert(r.host);
    if (r.ended)
      info.ends.push_back({rank, r.pid, r.clean, r.last_step});
    else
      running.push_back(rank);
  }
  info.hosts.assign(hosts.begin(), hosts.end());
  // First first; a tie (one agent poll) by rank.
  std::stable_sort(info.ends.begin(), info.ends.end(), [&](const auto& x, const auto& y) {
    return a.ranks.at(x.rank).ended_unix_s < a.ranks.at(y.rank).ended_unix_s;
  });
  std::string pids;
  size_t listed = 0;
  for (const auto& [rank, pid] : info.pids) {
    if (listed++ == kListedPids) {
      pids += fmt::format(",... ({} processes)", info.pids.size());
      break;
    }
    pids += fmt::format("{}{}", pids.empty() ? "" : ",", pid);
  }
  std::string s = fmt::format("attempt {} (restart count {}): ranks {}", a.number, a.restart_count,
                              diagnose::RankList(info.ranks));
  if (!pids.empty()) s += fmt::format(", pids {}", pids);
  if (!info.hosts.empty()) s += fmt::format(" on {}", fmt::join(info.hosts, ","));
  s += info.last_iteration >= 0 ? fmt::format("; up to iteration {}", info.last_iteration)
                                : std::string("; no iteration reported");
  if (!info.ends.empty()) {
    const auto& first = info.ends.front();
    const AttemptRank& fr = a.ranks.at(first.rank);
    s += fmt::format("; ended: rank {} (pid {}{}) first, {}, after iteration {}", first.rank,
                     first.pid, fr.host.empty() ? "" : " on " + fr.host, HowEnded(first.clean),
                     first.last_iteration);
    std::vector<int> then;
    int clean = 0;
    for (size_t i = 1; i < info.ends.size(); ++i) {
      then.push_back(info.ends[i].rank);
      clean += info.ends[i].clean ? 1 : 0;
    }
    if (!then.empty())
      s += fmt::format(", then rank{} {} ({} exited, {} killed or crashed)",
                       then.size() == 1 ? "" : "s", diagnose::RankList(then), clean,
                       static_cast<int>(then.size()) - clean);
  }
  if (!running.empty() && running.size() < info.ranks.size())
    s += fmt::format("; rank{} {} not seen ending", running.size() == 1 ? "" : "s",
                     diagnose::RankList(running));
  info.summary = std::move(s);
  return info;
}

std::vector<diagnose::AttemptInfo> AttemptLog::Report() const {
  std::vector<diagnose::AttemptInfo> out;
  for (const Attempt& a : attempts_)
    if (!a.ranks.empty()) out.push_back(Info(a));
  return out;
}

}  // namespace perftracker::server
