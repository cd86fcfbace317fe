#include "agent/memory_envelope.h"

#include <algorithm>

namespace perftracker::agent {

void MemoryEnvelope::Watch(const std::vector<int>& pids) {
  std::lock_guard lk(mu_);
  watched_.assign(pids.begin(),
                  pids.begin() + static_cast<std::ptrdiff_t>(std::min(pids.size(), kMaxWatched)));
  const auto gone = [&](const auto& kv) {
    return std::find(watched_.begin(), watched_.end(), kv.first) == watched_.end();
  };
  std::erase_if(recent_, gone);
  std::erase_if(last_take_, gone);
}

void MemoryEnvelope::Expire(std::deque<std::pair<Clock::time_point, double>>* d,
                            Clock::time_point now) const {
  while (!d->empty() && now - d->front().first > kHorizon) d->pop_front();
}

void MemoryEnvelope::SampleOnce(Clock::time_point now, const std::function<double(int pid)>& read) {
  std::vector<int> pids;
  {
    std::lock_guard lk(mu_);
    pids = watched_;
  }
  // Read outside the lock: the report loop's Take never waits on /proc.
  std::vector<std::pair<int, double>> got;
  got.reserve(pids.size());
  for (int pid : pids) {
    const double b = read(pid);
    if (b > 0) got.emplace_back(pid, b);
  }
  std::lock_guard lk(mu_);
  for (const auto& [pid, b] : got) {
    if (std::find(watched_.begin(), watched_.end(), pid) == watched_.end()) continue;
    auto& d = recent_[pid];
    Expire(&d, now);
    d.emplace_back(now, b);
  }
}

std::optional<MemoryEnvelope::Range> MemoryEnvelope::Take(int pid, Clock::time_point now,
                                                          double now_bytes) {
  std::optional<Range> r;
  if (now_bytes > 0) r = Range{now_bytes, now_bytes};
  std::lock_guard lk(mu_);
  auto it = recent_.find(pid);
  if (it == recent_.end()) return r;
  Expire(&it->second, now);
  const auto last = last_take_.find(pid);
  const bool first_take = last == last_take_.end();
  std::optional<double> low;  // of the readings since the previous Take
  for (const auto& [t, b] : it->second) {
    if (!r) r = Range{b, b};
    r->high = std::max(r->high, b);
    if (first_take || t > last->second) low = std::min(low.value_or(b), b);
  }
  last_take_[pid] = now;
  if (now_bytes > 0) low = std::min(low.value_or(now_bytes), now_bytes);
  if (r) r->low = low.value_or(r->high);
  return r;
}

}  // namespace perftracker::agent
