#include "server/rank_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "diagnose/peer_stats.h"

namespace perftracker::server {

void RankState::AddStep(int64_t step, double ms) {
  Add(ms);
  if (bucket_first >= 0 && step / stride != bucket_first / stride) CloseBucket();
  if (bucket_n == 0) bucket_first = step;
  bucket_sum += ms;
  ++bucket_n;
}

void RankState::CloseBucket() {
  if (bucket_n == 0) return;
  series_steps.push_back(bucket_first);
  series_ms.push_back(static_cast<float>(bucket_sum / bucket_n));
  bucket_sum = 0;
  bucket_n = 0;
  bucket_first = -1;
  if (series_steps.size() < kMaxSeriesPoints) return;
  // Full: merge neighbours and double the stride.
  size_t j = 0;
  for (size_t i = 0; i < series_steps.size(); i += 2, ++j) {
    series_steps[j] = series_steps[i];
    series_ms[j] = i + 1 < series_ms.size() ? (series_ms[i] + series_ms[i + 1]) / 2 : series_ms[i];
  }
  series_steps.resize(j);
  series_ms.resize(j);
  stride *= 2;
}

report::RunSeries RankState::Series(int rank) const {
  report::RunSeries s;
  s.rank = rank;
  s.steps = series_steps;
  s.ms = series_ms;
  if (bucket_n > 0) {
    s.steps.push_back(bucket_first);
    s.ms.push_back(static_cast<float>(bucket_sum / bucket_n));
  }
  return s;
}

void RankState::Add(double ms) {
  if (count == 0 || ms < min_ms) min_ms = ms;
  if (count == 0 || ms > max_ms) max_ms = ms;
  last_ms = ms;
  sum_ms += ms;
  ++count;
  times.Add(ms);
}

diagnose::IterationStats RankState::Stats() const {
  diagnose::IterationStats s;
  s.count = count;
  if (count == 0) return s;
  s.mean_ms = sum_ms / count;
  s.min_ms = min_ms;
  s.max_ms = max_ms;
  // Within the extremes, which are exact (a bucket's value may lie a hair beyond them).
  s.p50_ms = std::clamp(times.Quantile(0.5), min_ms, max_ms);
  s.p99_ms = std::clamp(times.Quantile(0.99), min_ms, max_ms);
  return s;
}

namespace {

using diagnose::MissingRank;
using diagnose::MissingReason;

// The worker's process ended: dead, whatever else is true; or, when it exited normally before
// the window's first iteration (START), the job ended first.
std::optional<MissingRank> Dead(int rank, const WorkerSeen* w, int64_t last, int64_t start) {
  if (w == nullptr || !w->exited || !(w->process_gone || w->exit_message)) return std::nullopt;
  std::string when =
      last >= 0 ? fmt::format("at iteration {}", last) : "before its first iteration";
  if (w->exit_message && last >= 0 && last < start)
    return MissingRank{rank, MissingReason::kEndedBeforeWindow,
                       fmt::format("a normal exit {}, the window starts at {}", when, start), last};
  return MissingRank{
      rank, MissingReason::kRankDead,
      fmt::format("process exited {}, {}, pid {}", when,
                  w->exit_message ? "a normal exit" : "killed or crashed without an exit message",
                  w->pid),
      last};
}

std::optional<MissingRank> AgentGone(int rank, const AgentSeen& a, int64_t last) {
  if (a.gone)
    return MissingRank{rank, MissingReason::kAgentGone,
                       "no agent serves it any more: its agent was silent too long and forgotten",
                       last};
  if (!a.identified || a.connected) return std::nullopt;
  return MissingRank{rank, MissingReason::kAgentGone,
                     fmt::format("its agent{} silent for {:.0f} s",
                                 a.host.empty() ? "" : " on " + a.host, a.silent_seconds),
                     last};
}

// The command on its way: the server's queue, the agent, the agent's socket, the worker.
std::optional<MissingRank> NotDelivered(int rank, const WorkerSeen* w, const AgentSeen& a,
                                        int64_t window, int64_t last) {
  auto make = [&](std::string detail) {
    return MissingRank{rank, MissingReason::kCommandNotDelivered, std::move(detail), last};
  };
  // An agent that confirmed the command got it, wherever the server's copy is.
  const bool confirmed = a.window_received && *a.window_received >= window;
  if (a.identified && !confirmed && a.command_waiting)
    return make("the command still waited for its agent's command stream");
  if (a.identified && !confirmed && a.window_received)
    return make(a.registered_after_open
                    ? "its agent registered after the window opened (restarted?) and never got "
                      "the command"
                    : "its agent did not confirm the command");
  if (w == nullptr) {
    if (a.relays_workers) return make("no worker of this rank is connected to its agent");
    return std::nullopt;
  }
  if (w->exited)
    return make(fmt::format("its worker (pid {}) disconnected from the agent", w->pid));
  if (w->window_sent < window)
    return make(fmt::format("its agent did not send it to the worker (pid {})", w->pid));
  if (w->window_acked < window)
    return make(fmt::format("the worker (pid {}) did not acknowledge it", w->pid));
  if (!w->window_accepted && w->window_acked == window)
    return make(
        fmt::format("the worker (pid {}) refused it: another window was pending or open", w->pid));
  return std::nullopt;
}

// The rank got the command but never reached the window's first iteration.
std::optional<MissingRank> NoIteration(int rank, int64_t last, const WorkerSeen* w,
                                       const AgentSeen& a, const MissedWindow& window) {
  auto make = [&](std::string detail) {
    return MissingRank{rank, MissingReason::kNoIterationSinceCommand, std::move(detail), last};
  };
  if (last < 0) {
    // Only an agent that relays iterations can say there were none (a folder agent never does).
    if (w == nullptr && !a.relays_workers) return std::nullopt;
    return make("no iteration reported at all: it never learned an iteration");
  }
  if (window.step_at_open >= 0 && last <= window.step_at_open)
    return make(fmt::format("last iteration {}", last));
  if (last < window.start_iteration)
    return make(
        fmt::format("last iteration {}, the window starts at {}", last, window.start_iteration));
  return std::nullopt;
}

}  // namespace

diagnose::MissingRank ExplainMissing(int rank, const RankState* state, const AgentSeen& agent,
                                     const MissedWindow& window) {
  const WorkerSeen* w = state && state->worker ? &*state->worker : nullptr;
  int64_t last = state ? state->last_step : -1;
  if (w) last = std::max(last, w->last_iteration);
  if (auto m = Dead(rank, w, last, window.start_iteration)) return *m;
  if (auto m = AgentGone(rank, agent, last)) return *m;
  if (auto m = NotDelivered(rank, w, agent, window.id, last)) return *m;
  if (auto m = NoIteration(rank, last, w, agent, window)) return *m;
  std::string detail;
  if (last >= window.start_iteration)
    detail = fmt::format("it reached iteration {}, but its summary never arrived", last);
  return {rank, MissingReason::kUnknown, detail, last};
}

std::optional<diagnose::MemoryGrowth> MemoryWatch::Add(int64_t step, double bytes, double low) {
  series.Add(step, bytes, low);
  // A leak sets a new high at nearly every sample: until one is reported, a new high is checked
  // at once, so a leak is named as soon as the rule's own needs are met (the span and growth of
  // policy kMemoryMinIterations, kMemoryMinGrowthBytes) instead of up to kMemoryCheckEvery
  // samples later (measured: a leak starting at iteration 300 or 600 was named 154-182
  // iterations late, one sample coming every ~30 iterations). A flat rank rarely sets one after
  // its warm-up, and is checked every kMemoryCheckEvery samples: its cost at 100,000 ranks.
  const auto& samples = series.samples();
  if (samples.empty()) return std::nullopt;
  // A series that started afresh (a restarted rank) has no high yet.
  const bool new_high = samples.size() == 1 || samples.back().bytes > high;
  if (new_high) high = samples.back().bytes;
  if (++unchecked < kMemoryCheckEvery && (reported || !new_high)) return std::nullopt;
  unchecked = 0;
  // Checked on after the report too: /metrics shows the rate as it is now (the first fit, early
  // in a leak, still holds samples from before it began).
  growth = diagnose::FindMemoryGrowth(series);
  if (reported || !growth) return std::nullopt;
  reported = true;
  return growth;
}

std::vector<MemoryGrowthFound> RankState::AddMemory(int64_t step, const MemoryReport& m) {
  std::vector<MemoryGrowthFound> found;
  if (step < 0) return found;
  if (m.cgroup_limit > 0) {
    cgroup_limit_bytes = m.cgroup_limit;
    cgroup_usage_bytes = m.cgroup_usage > 0 ? m.cgroup_usage : -1;
  }
  if (m.rss > 0)
    if (auto g = memory.Add(step, m.rss, m.rss_low > 0 ? m.rss_low : -1))
      found.push_back({*g, diagnose::MemoryKind::kHost});
  if (m.gpu_used > 0) {
    gpu = m.gpu_index;
    gpu_free_bytes = m.gpu_free > 0 ? m.gpu_free : -1;
    gpu_total_bytes = m.gpu_total > 0 ? m.gpu_total : -1;
  }
  // The GPU series: PyTorch's tensors where the collector says (a leak without the caching
  // allocator's steps), else what NVML sees the process hold; not both in one series.
  if (m.cuda_allocated > 0) {
    gpu_series_torch = true;
    cuda_reserved_bytes = m.cuda_reserved;
    cuda_peak_allocated_bytes = m.cuda_peak_allocated;
  }
  if (const double bytes = gpu_series_torch ? m.cuda_allocated : m.gpu_used; bytes > 0)
    if (auto g = gpu_memory.Add(step, bytes)) found.push_back({*g, diagnose::MemoryKind::kGpu});
  return found;
}

std::vector<diagnose::RankMemoryUse> MemoryTimelines(const std::map<int, RankState>& ranks,
                                                     const std::set<int>& current) {
  // The ranks shown, at scale: those whose memory grows, then those that hold the most.
  struct Shown {
    bool grows;
    double bytes;  // its latest sample's
    int rank;
  };
  std::vector<Shown> order;
  for (const auto& [r, st] : ranks) {
    if (!current.count(r) || st.memory.series.samples().empty()) continue;
    order.push_back(
        {st.memory.growth || st.gpu_memory.growth, st.memory.series.samples().back().bytes, r});
  }
  std::sort(order.begin(), order.end(), [](const Shown& a, const Shown& b) {
    return std::tie(a.grows, a.bytes) > std::tie(b.grows, b.bytes);
  });
  if (order.size() > kMaxMemoryTimelineRanks) order.resize(kMaxMemoryTimelineRanks);
  std::sort(order.begin(), order.end(),
            [](const Shown& a, const Shown& b) { return a.rank < b.rank; });
  std::vector<diagnose::RankMemoryUse> out;
  for (const Shown& shown : order) {
    const int r = shown.rank;
    const RankState& st = ranks.at(r);
    for (const auto& [watch, device] :
         {std::pair{&st.memory, diagnose::RankMemoryUse::kOnlineHostMemory},
          {&st.gpu_memory, diagnose::RankMemoryUse::kOnlineGpuMemory}}) {
      const auto& samples = watch->series.samples();
      if (samples.empty()) continue;
      diagnose::RankMemoryUse& m = out.emplace_back();
      m.rank = r;
      m.device = device;
      const size_t stride =
          (samples.size() + kMaxMemoryTimelinePoints - 1) / kMaxMemoryTimelinePoints;
      for (size_t i = 0; i < samples.size(); ++i) {
        m.peak_allocated_bytes =
            std::max(m.peak_allocated_bytes, static_cast<double>(samples[i].rss));
        if (i % stride != 0 && i + 1 != samples.size()) continue;
        m.iteration_numbers.push_back(samples[i].step);
        m.iteration_end_bytes.push_back(samples[i].rss);
      }
      m.start_bytes = samples.front().rss;
      m.end_bytes = samples.back().rss;
      m.iterations = static_cast<int>(m.iteration_end_bytes.size());
      if (watch->growth) m.bytes_per_iteration = watch->growth->bytes_per_iteration;
    }
  }
  return out;
}

std::vector<diagnose::Finding> MemoryFindings(
    const std::map<int, RankState>& ranks, const std::set<int>& current,
    const std::function<std::string(const RankState&)>& host_of,
    const std::map<std::string, diagnose::HostMemoryState>& hosts) {
  std::vector<diagnose::RankMemory> mem, gpu;
  std::vector<double> iteration_ms;
  for (const auto& [r, st] : ranks) {
    if (!current.count(r)) continue;
    const std::string host = host_of(st);
    const double headroom = st.cgroup_limit_bytes > 0 && st.cgroup_usage_bytes >= 0
                                ? std::max(st.cgroup_limit_bytes - st.cgroup_usage_bytes, 0.0)
                                : -1;
    mem.push_back({r, host, &st.memory.series, headroom, st.cgroup_limit_bytes});
    if (!st.gpu_memory.series.samples().empty()) {
      diagnose::RankMemory g{r, host, &st.gpu_memory.series};
      g.gpu = st.gpu;
      g.gpu_free_bytes = st.gpu_free_bytes;
      g.gpu_total_bytes = st.gpu_total_bytes;
      g.cuda_reserved_bytes = st.cuda_reserved_bytes;
      g.cuda_peak_allocated_bytes = st.cuda_peak_allocated_bytes;
      gpu.push_back(g);
    }
    if (st.last_ms > 0) iteration_ms.push_back(st.last_ms);
  }
  const double typical = iteration_ms.empty() ? 0 : diagnose::internal::Median(iteration_ms);
  std::vector<diagnose::Finding> out = diagnose::MemoryGrowthFindings(mem, hosts, typical);
  for (auto& f : diagnose::MemoryGrowthFindings(gpu, hosts, typical, diagnose::MemoryKind::kGpu))
    out.push_back(std::move(f));
  return out;
}

int64_t FurthestStep(const std::map<int, RankState>& ranks) {
  int64_t step = -1;
  for (const auto& [r, st] : ranks) step = std::max(step, st.last_step);
  return step;
}

std::set<int> RanksOfAttempt(const std::map<int, RankState>& ranks, int attempt) {
  std::set<int> out;
  for (const auto& [r, st] : ranks)
    if (st.attempt == attempt) out.insert(r);
  return out;
}

std::vector<report::RunSeries> RunSeriesOf(const std::map<int, RankState>& ranks) {
  std::vector<report::RunSeries> out;
  out.reserve(ranks.size());
  for (const auto& [r, st] : ranks)
    if (st.count > 0) out.push_back(st.Series(r));
  return out;
}

JobProgress ProgressOf(const std::map<int, RankState>& ranks, const std::set<int>& expected) {
  JobProgress p;
  double sum = 0;
  int64_t n = 0;
  for (const auto& [r, st] : ranks) {
    p.furthest_step = std::max(p.furthest_step, st.last_step);
    sum += st.sum_ms;
    n += st.count;
  }
  if (n > 0 && sum > 0) p.mean_iteration_ms = sum / n;
  for (int r : expected) {
    auto it = ranks.find(r);
    // This attempt's iterations: a restarted rank learns its iteration again.
    const int64_t count = it == ranks.end() ? 0 : it->second.attempt_iterations;
    p.fewest_iterations = p.fewest_iterations < 0 ? count : std::min(p.fewest_iterations, count);
  }
  return p;
}

}  // namespace perftracker::server
