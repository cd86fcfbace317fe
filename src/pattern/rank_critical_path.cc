#include "pattern/rank_critical_path.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <unordered_map>
#include <utility>

#include "base/limits.h"
#include "pattern/python_window.h"
#include "trace/reader.h"

namespace perftracker::pattern {
namespace {

constexpr PathBoundInfo kBoundTable[kPathBounds] = {
    {"cpu_ms", "cpu_bound", "CPU"},
    {"gpu_compute_ms", "gpu_compute_bound", "GPU compute"},
    {"gpu_communication_ms", "gpu_communication_bound", "communication kernels"},
    {"launch_delay_ms", "gpu_kernel_launch_overhead", "kernel launch delay"},
    {"kernel_gap_ms", "gpu_kernel_kernel_overhead", "gaps between kernels"},
};

// CUDA calls that wait for the GPU (HTA's list; cudaMemcpyAsync too, as it may synchronise).
constexpr std::string_view kBlockingCalls[] = {
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventQuery",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpyAsync",
};

// CUDA calls that take the runtime's lock (HTA's list): two of them on different threads run one
// at a time, in the order they end.
constexpr std::string_view kLockingCalls[] = {"cudaHostAlloc", "cudaLaunchKernel",
                                              "cudaMemcpyAsync"};

// CUDA calls that queue GPU work on a stream (HTA's runtime launch events): the stream's queue
// grows by one at each, and shrinks by one when the work starts. (A CUDA graph's launch queues
// many and is not counted, as in HTA.)
constexpr std::string_view kQueueingCalls[] = {
    "cudaLaunchKernel",    "cudaLaunchKernelExC",
    "cuLaunchKernel",      "cuLaunchKernelEx",
    "cudaMemcpyAsync",     "cudaMemsetAsync",
    "hipLaunchKernel",     "hipExtModuleLaunchKernel",
    "hipMemsetAsync",      "hipMemcpyAsync",
    "hipMemcpyWithStream", "runFunction - job_prep_and_submit_for_execution",
};

template <size_t N>
bool OneOf(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

using Kept = CriticalPathSink::Kept;
using Kind = CriticalPathSink::Kind;
using Sync = CriticalPathSink::Sync;

// HTA's grouping of communication kernels: NCCL's, RCCL's (hip) and HCCL's.
bool IsCommKernel(std::string_view name) {
  return name.starts_with("nccl") || name.starts_with("hip") || name.starts_with("hccl") ||
         name.find("ncclKernel") != std::string_view::npos;
}

Sync SyncOf(std::string_view name) {
  if (name == "Stream Sync") return Sync::kStream;
  if (name == "Context Sync") return Sync::kContext;
  if (name == "Event Sync") return Sync::kEvent;
  if (name == "Stream Wait Event") return Sync::kStreamWait;
  return Sync::kNone;
}

void NoteTid(std::vector<int64_t>* tids, int64_t tid) {
  // Two distinct threads already make the pass ambiguous; more are not needed.
  if (tids->size() < 2 && std::find(tids->begin(), tids->end(), tid) == tids->end())
    tids->push_back(tid);
}

// What the whole trace says once, for every iteration's graph: each correlation's launching
// call, and per stream its GPU work in launch order, with the times of the queueing calls and of
// the starts of the work they queued (the stream's queue length at any moment is queued minus
// started).
struct TraceIndex {
  std::unordered_map<int64_t, uint32_t> launch_of;  // correlation -> CPU call
  struct Stream {
    std::vector<std::pair<double, uint32_t>> by_launch;  // (launch ts, GPU event)
    std::vector<double> queued, started;                 // sorted
  };
  std::unordered_map<int32_t, Stream> streams;

  TraceIndex(const std::vector<Kept>& ev) {
    for (uint32_t i = 0; i < ev.size(); ++i)
      if (ev[i].kind == Kind::kCpu && ev[i].correlation >= 0) launch_of[ev[i].correlation] = i;
    for (uint32_t i = 0; i < ev.size(); ++i) {
      const uint32_t l = Launch(ev, i);
      if (ev[i].kind != Kind::kGpu || l == kNone) continue;
      Stream& s = streams[ev[i].stream];
      s.by_launch.emplace_back(ev[l].ts, i);
      if (!ev[l].queues) continue;
      s.queued.push_back(ev[l].ts);
      s.started.push_back(ev[i].ts);
    }
    for (auto& [id, s] : streams) {
      std::stable_sort(s.by_launch.begin(), s.by_launch.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      std::sort(s.queued.begin(), s.queued.end());
      std::sort(s.started.begin(), s.started.end());
    }
  }

  // The CPU call that launched (or synchronised with) event I, or kNone.
  uint32_t Launch(const std::vector<Kept>& ev, uint32_t i) const {
    auto it = launch_of.find(ev[i].correlation);
    return ev[i].correlation < 0 || it == launch_of.end() ? kNone : it->second;
  }

  // GPU work on STREAM queued but not started at T (what is queued or starts at T counts).
  int64_t QueueAt(int32_t stream, double t) const {
    auto it = streams.find(stream);
    if (it == streams.end()) return 0;
    const auto& s = it->second;
    return (std::upper_bound(s.queued.begin(), s.queued.end(), t) - s.queued.begin()) -
           (std::upper_bound(s.started.begin(), s.started.end(), t) - s.started.begin());
  }

  // The last GPU work on STREAM launched before T, or the first launched after it.
  uint32_t LastLaunchedBefore(int32_t stream, double t) const {
    auto it = streams.find(stream);
    if (it == streams.end()) return kNone;
    const auto& v = it->second.by_launch;
    auto p = std::lower_bound(v.begin(), v.end(), t,
                              [](const auto& a, double x) { return a.first < x; });
    return p == v.begin() ? kNone : std::prev(p)->second;
  }
  uint32_t FirstLaunchedAfter(int32_t stream, double t) const {
    auto it = streams.find(stream);
    if (it == streams.end()) return kNone;
    const auto& v = it->second.by_launch;
    auto p = std::upper_bound(v.begin(), v.end(), t,
                              [](double x, const auto& a) { return x < a.first; });
    return p == v.end() ? kNone : p->second;
  }
};

enum class EdgeKind : uint8_t { kOp, kDependency, kSync, kLaunch, kGap };

struct Edge {
  uint32_t from, to;
  double weight;
  EdgeKind kind;
  uint32_t event;  // the trace event an op edge's time is charged to
};

// One iteration's graph: nodes 2i (start) and 2i+1 (end) of its i-th event.
class IterationGraph {
 public:
  // REMOVED: the name id of a function whose calls, what they call and the GPU work they launch
  // take no time (HTA's way of simulating a change: the edges reweighed, the path recomputed);
  // kNone for none.
  IterationGraph(const std::vector<Kept>& ev, const TraceIndex& index,
                 const std::unordered_map<int64_t, int64_t>& tid_map, uint32_t removed)
      : ev_(ev), index_(index), tid_map_(tid_map), removed_name_(removed) {}

  // Builds the graph of the events launched in [begin, end] and adds its longest path to OUT,
  // with each op edge's time to BY_NAME.
  void Walk(double begin, double end, RankCriticalPath* out,
            std::unordered_map<uint32_t, double>* by_name) {
    Select(begin, end);
    CpuEdges();
    LockEdges();
    GpuEdges();
    LongestPath(out, by_name);
  }

 private:
  uint32_t Start(uint32_t global) const { return 2 * local_.at(global); }
  uint32_t End(uint32_t global) const { return 2 * local_.at(global) + 1; }
  double TimeOf(uint32_t node) const {
    const Kept& k = ev_[members_[node / 2]];
    return node % 2 ? k.end : k.ts;
  }
  bool Has(uint32_t global) const { return global != kNone && local_.count(global) > 0; }
  bool Removed(uint32_t global) const { return removed_[local_.at(global)]; }
  // Marks G removed: the function asked for, or inside (launched by) a removed call PARENT.
  void MarkRemoved(uint32_t g, uint32_t parent) {
    removed_[local_.at(g)] = (removed_name_ != kNone && ev_[g].name == removed_name_) ||
                             (parent != kNone && Removed(parent));
  }

  void AddEdge(uint32_t from, uint32_t to, EdgeKind kind, uint32_t event, bool weightless) {
    if (from == to) return;
    double w = 0;
    if (!weightless && kind != EdgeKind::kDependency && kind != EdgeKind::kSync)
      w = TimeOf(to) - TimeOf(from);
    // A removed call's own time, and the wait for a removed kernel's launch or its stream.
    if ((kind == EdgeKind::kOp && event != kNone && Removed(event)) ||
        ((kind == EdgeKind::kLaunch || kind == EdgeKind::kGap) && removed_[to / 2]))
      w = 0;
    edges_.push_back({from, to, w, kind, event});
  }

  // HTA's clip: CPU events that start in the span; GPU work and sync records whose CPU call
  // does.
  void Select(double begin, double end) {
    members_.clear();
    local_.clear();
    edges_.clear();
    for (uint32_t i = 0; i < ev_.size(); ++i) {
      const Kept& k = ev_[i];
      bool in = false;
      if (k.kind == Kind::kCpu) {
        in = k.ts >= begin && k.ts <= end;
      } else {
        const uint32_t l = index_.Launch(ev_, i);
        in = l != kNone && ev_[l].ts >= begin && ev_[l].ts <= end;
      }
      if (!in) continue;
      local_[i] = static_cast<uint32_t>(members_.size());
      members_.push_back(i);
    }
    removed_.assign(members_.size(), false);
  }

  // Each thread's calls in call-stack order (HTA's depth-first walk of its call stacks).
  void CpuEdges() {
    std::unordered_map<int64_t, std::vector<uint32_t>> threads;
    for (uint32_t g : members_) {
      if (ev_[g].kind != Kind::kCpu) continue;
      auto m = tid_map_.find(ev_[g].tid);
      threads[m == tid_map_.end() ? ev_[g].tid : m->second].push_back(g);
    }
    for (auto& [tid, calls] : threads) {
      std::stable_sort(calls.begin(), calls.end(), [&](uint32_t a, uint32_t b) {
        if (ev_[a].ts != ev_[b].ts) return ev_[a].ts < ev_[b].ts;
        return ev_[a].end > ev_[b].end;  // the enclosing call first
      });
      std::vector<uint32_t> open;
      uint32_t last = kNone;
      auto close = [&] {
        const uint32_t g = open.back();
        open.pop_back();
        if (last != kNone && !SharesLock(last, End(g)))
          AddEdge(last, End(g), EdgeKind::kOp, g, ev_[g].blocking);
        last = End(g);
      };
      for (uint32_t g : calls) {
        // A call that ends past the open one's end is not inside it: that one is closed first.
        while (!open.empty() &&
               (ev_[open.back()].end <= ev_[g].ts || ev_[g].end > ev_[open.back()].end))
          close();
        MarkRemoved(g, open.empty() ? kNone : open.back());
        if (last != kNone && !SharesLock(last, Start(g))) {
          if (open.empty())
            AddEdge(last, Start(g), EdgeKind::kDependency, kNone, true);
          else
            AddEdge(last, Start(g), EdgeKind::kOp, open.back(), false);
        }
        last = Start(g);
        open.push_back(g);
      }
      while (!open.empty()) close();
    }
  }

  // Two nodes in a row on a thread where both are locking calls and not one's end before the
  // other's start: LockEdges links them, in the order the calls took the lock.
  bool SharesLock(uint32_t a, uint32_t b) const {
    return ev_[members_[a / 2]].locking && ev_[members_[b / 2]].locking && (a % 2 == 0 || b % 2);
  }

  // HTA's CUDA runtime lock path: the locking calls of every thread by time; each one's end
  // follows its start and whatever locking call started before it, and the end before it.
  void LockEdges() {
    std::vector<uint32_t> nodes;
    for (uint32_t l = 0; l < members_.size(); ++l)
      if (ev_[members_[l]].locking) nodes.insert(nodes.end(), {2 * l, 2 * l + 1});
    std::stable_sort(nodes.begin(), nodes.end(), [&](uint32_t a, uint32_t b) {
      if (TimeOf(a) != TimeOf(b)) return TimeOf(a) < TimeOf(b);
      return members_[a / 2] < members_[b / 2];
    });
    std::vector<uint32_t> started;
    uint32_t last = kNone;
    for (uint32_t v : nodes) {
      if (v % 2 == 0) {
        started.push_back(v);
      } else {
        for (; !started.empty(); started.pop_back()) {
          const uint32_t u = started.back();
          if (u / 2 == v / 2)
            AddEdge(u, v, EdgeKind::kOp, members_[u / 2], false);
          else
            AddEdge(u, v, EdgeKind::kDependency, kNone, true);
        }
        if (last != kNone && last % 2) AddEdge(last, v, EdgeKind::kDependency, kNone, true);
      }
      last = v;
    }
  }

  // GPU work in stream order, and the synchronisation records (HTA orders a record by its end).
  void GpuEdges() {
    std::vector<uint32_t> gpu;
    for (uint32_t g : members_)
      if (ev_[g].kind != Kind::kCpu) gpu.push_back(g);
    auto order = [&](uint32_t g) { return ev_[g].kind == Kind::kSync ? ev_[g].end : ev_[g].ts; };
    std::stable_sort(gpu.begin(), gpu.end(),
                     [&](uint32_t a, uint32_t b) { return order(a) < order(b); });
    std::unordered_map<int32_t, uint32_t> last;        // stream -> its last GPU work
    std::unordered_map<uint32_t, uint32_t> waits_for;  // GPU work -> work it waits for
    for (uint32_t g : gpu) {
      const Kept& k = ev_[g];
      const uint32_t launch = index_.Launch(ev_, g);
      if (k.kind == Kind::kSync) {
        Synchronise(g, launch, last, &waits_for);
        continue;
      }
      MarkRemoved(g, launch);
      AddEdge(Start(g), End(g), EdgeKind::kOp, g, false);
      uint32_t wait = kNone;
      if (auto w = waits_for.find(g); w != waits_for.end()) {
        if (Has(w->second)) {
          wait = w->second;
          AddEdge(End(wait), Start(g), EdgeKind::kSync, kNone, true);
        }
        waits_for.erase(w);
      }
      auto prev = last.find(k.stream);
      const double launch_ts = ev_[launch].ts;
      const bool alone = ev_[launch].queues && index_.QueueAt(k.stream, launch_ts) == 1 &&
                         index_.QueueAt(k.stream, k.ts) == 0 &&
                         (prev == last.end() || ev_[prev->second].end < launch_ts) &&
                         (wait == kNone || ev_[wait].end < launch_ts);
      if (alone) {
        AddEdge(Start(launch), Start(g), EdgeKind::kLaunch, kNone, false);
      } else if (prev != last.end() && k.ts - ev_[prev->second].end < kMaxKernelGapUs &&
                 (wait == kNone || ev_[wait].end < ev_[prev->second].end)) {
        AddEdge(End(prev->second), Start(g), EdgeKind::kGap, prev->second, false);
      }
      last[k.stream] = g;
    }
  }

  void Synchronise(uint32_t g, uint32_t call, const std::unordered_map<int32_t, uint32_t>& last,
                   std::unordered_map<uint32_t, uint32_t>* waits_for) {
    const Kept& k = ev_[g];
    switch (k.sync) {
      case Sync::kStream:
        if (auto p = last.find(k.stream); p != last.end())
          AddEdge(End(p->second), End(call), EdgeKind::kSync, kNone, true);
        break;
      case Sync::kContext:
        for (const auto& [stream, work] : last)
          AddEdge(End(work), End(call), EdgeKind::kSync, kNone, true);
        break;
      case Sync::kEvent:
      case Sync::kStreamWait: {
        auto record = index_.launch_of.find(k.wait_record);
        if (k.wait_record < 0 || record == index_.launch_of.end()) break;
        const uint32_t src = index_.LastLaunchedBefore(k.wait_stream, ev_[record->second].ts);
        if (!Has(src)) break;
        if (k.sync == Sync::kEvent) {
          AddEdge(End(src), End(call), EdgeKind::kSync, kNone, true);
        } else {
          const uint32_t dest = index_.FirstLaunchedAfter(k.stream, ev_[call].ts);
          if (dest != kNone) (*waits_for)[dest] = src;
        }
        break;
      }
      case Sync::kNone:
        break;
    }
  }

  // The heaviest path (nodes in topological order; on a tie the first predecessor found).
  void LongestPath(RankCriticalPath* out, std::unordered_map<uint32_t, double>* by_name) {
    const size_t n = 2 * members_.size();
    if (n == 0) return;
    std::vector<uint32_t> offset(n + 1, 0), indegree(n, 0);
    for (Edge& e : edges_) {
      if (e.weight < 0) {
        e.weight = 0;
        ++out->negative_edges;
      }
      ++offset[e.from + 1];
      ++indegree[e.to];
    }
    for (size_t i = 0; i < n; ++i) offset[i + 1] += offset[i];
    std::vector<uint32_t> out_edges(edges_.size());
    std::vector<uint32_t> fill(offset.begin(), offset.end() - 1);
    for (uint32_t e = 0; e < edges_.size(); ++e) out_edges[fill[edges_[e].from]++] = e;
    std::vector<uint32_t> ready, pred(n, kNone);
    std::vector<double> dist(n, 0);
    for (uint32_t v = 0; v < n; ++v)
      if (indegree[v] == 0) ready.push_back(v);
    uint32_t best = ready.empty() ? kNone : ready[0];
    for (size_t head = 0; head < ready.size(); ++head) {
      const uint32_t u = ready[head];
      if (dist[u] > dist[best]) best = u;
      for (uint32_t j = offset[u]; j < offset[u + 1]; ++j) {
        const Edge& e = edges_[out_edges[j]];
        if (pred[e.to] == kNone || dist[u] + e.weight > dist[e.to]) {
          dist[e.to] = dist[u] + e.weight;
          pred[e.to] = out_edges[j];
        }
        if (--indegree[e.to] == 0) ready.push_back(e.to);
      }
    }
    if (best == kNone) return;
    ++out->iterations;
    for (uint32_t v = best; pred[v] != kNone; v = edges_[pred[v]].from) {
      const Edge& e = edges_[pred[v]];
      out->path_us += e.weight;
      const Kept* k = e.event == kNone ? nullptr : &ev_[e.event];
      PathBound b = PathBound::kCpu;
      switch (e.kind) {
        case EdgeKind::kLaunch:
          b = PathBound::kLaunchDelay;
          break;
        case EdgeKind::kGap:
          b = PathBound::kKernelGap;
          break;
        default:
          if (k && k->kind == Kind::kGpu)
            b = k->comm ? PathBound::kGpuCommunication : PathBound::kGpuCompute;
      }
      out->bound_us[static_cast<size_t>(b)] += e.weight;
      if (e.kind == EdgeKind::kOp && k) (*by_name)[k->name] += e.weight;
    }
  }

  const std::vector<Kept>& ev_;
  const TraceIndex& index_;
  const std::unordered_map<int64_t, int64_t>& tid_map_;
  const uint32_t removed_name_;
  std::vector<uint32_t> members_;                 // local index -> trace event
  std::unordered_map<uint32_t, uint32_t> local_;  // trace event -> local index
  std::vector<bool> removed_;                     // local index -> taken out (MarkRemoved)
  std::vector<Edge> edges_;
};

}  // namespace

const PathBoundInfo& PathBoundOf(PathBound bound) {
  return kBoundTable[static_cast<size_t>(bound)];
}

uint32_t CriticalPathSink::Intern(std::string_view name) {
  const uint32_t id = names_.Intern(name);
  if (id == traits_.size()) {
    traits_.push_back({OneOf(kBlockingCalls, name), OneOf(kLockingCalls, name),
                       OneOf(kQueueingCalls, name), IsCommKernel(name),
                       name.find("forward") != std::string_view::npos,
                       name.find("autograd") != std::string_view::npos});
  }
  return id;
}

void CriticalPathSink::OnBegin(const trace::TraceMeta& meta) {
  rank_ = meta.rank;
  steps_ = meta.profiler_steps;
}

void CriticalPathSink::OnEvent(const trace::Event& e) {
  using trace::EventKind;
  const int64_t thread = e.tid ^ (e.pid << 32);  // a thread of one process
  if (e.kind == EventKind::kCpuOp && e.dur_us > 0) {
    const NameTraits& t = traits_[Intern(e.name)];  // kept below: its name is needed anyway
    if (t.forward) NoteTid(&forward_tids_, thread);
    if (t.autograd) NoteTid(&backward_tids_, thread);
  } else if (e.kind == EventKind::kCpuOp || e.kind == EventKind::kUserAnnotation) {
    // Not interned: annotations are mostly one of a kind (ProfilerStep#N), and an op without
    // duration is not kept.
    if (e.name.find("forward") != std::string_view::npos) NoteTid(&forward_tids_, thread);
    if (e.name.find("autograd") != std::string_view::npos) NoteTid(&backward_tids_, thread);
  }
  Kept k;
  switch (e.kind) {
    case EventKind::kCpuOp:
    case EventKind::kCudaRuntime:
    case EventKind::kCudaDriver:
      if (e.dur_us <= 0) return;
      k.kind = Kind::kCpu;
      break;
    case EventKind::kKernel:
    case EventKind::kMemcpy:
    case EventKind::kMemset:
      if (e.correlation < 0 || e.stream < 0) return;
      k.kind = Kind::kGpu;
      break;
    case EventKind::kCudaSync:
      k.kind = Kind::kSync;
      k.sync = SyncOf(e.name);
      if (k.sync == Sync::kNone || e.correlation < 0) return;
      break;
    default:
      return;
  }
  if (overflowed_) return;
  if (events_.size() >= limits::kMaxCriticalPathEvents) {
    overflowed_ = true;
    events_.clear();
    events_.shrink_to_fit();
    return;
  }
  k.ts = e.ts_us;
  k.end = e.ts_us + std::max(0.0, e.dur_us);
  k.tid = thread;
  k.correlation = e.correlation;
  k.wait_record = e.wait_on_record_correlation;
  k.stream = e.stream;
  k.wait_stream = e.wait_on_stream;
  k.name = Intern(e.name);
  const NameTraits& t = traits_[k.name];
  if (k.kind == Kind::kCpu) {
    k.blocking = t.blocking;
    k.locking = t.locking;
    k.queues = t.queues;
  }
  if (k.kind == Kind::kGpu) k.comm = t.comm;
  events_.push_back(k);
}

bool CriticalPathSink::Holds(std::string_view function) const {
  return names_.Find(function).has_value();
}

RankCriticalPath CriticalPathSink::Compute(const std::vector<int64_t>& steps, size_t top,
                                           std::string_view removed) const {
  RankCriticalPath out;
  out.too_many_events = overflowed_;
  if (overflowed_ || events_.empty()) return out;
  const TraceIndex index(events_);
  std::unordered_map<int64_t, int64_t> tid_map;
  if (forward_tids_.size() == 1 && backward_tids_.size() == 1 &&
      forward_tids_[0] != backward_tids_[0])
    tid_map[backward_tids_[0]] = forward_tids_[0];
  const std::optional<uint32_t> gone = removed.empty() ? std::nullopt : names_.Find(removed);
  IterationGraph graph(events_, index, tid_map, gone.value_or(kNone));
  std::unordered_map<uint32_t, double> by_name;
  if (steps_.empty()) {
    double begin = std::numeric_limits<double>::max(), end = std::numeric_limits<double>::lowest();
    for (const Kept& k : events_) {
      if (k.kind != Kind::kCpu) continue;
      begin = std::min(begin, k.ts);
      end = std::max(end, k.end);
    }
    if (begin <= end) graph.Walk(begin, end, &out, &by_name);
  } else {
    for (const trace::Span& s : steps_) {
      if (!steps.empty() && std::find(steps.begin(), steps.end(), s.step) == steps.end()) continue;
      const int before = out.iterations;
      graph.Walk(s.ts_us, s.ts_us + s.dur_us, &out, &by_name);
      if (out.iterations > before) out.steps.push_back(s.step);
    }
  }
  std::vector<std::pair<double, uint32_t>> ranked;
  for (const auto& [name, us] : by_name) ranked.emplace_back(us, name);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < ranked.size() && i < top; ++i)
    out.top.push_back({names_.Get(ranked[i].second), ranked[i].first});
  return out;
}

StatusOr<RankCriticalPath> TraceCriticalPath(const std::string& path,
                                             const std::vector<int64_t>& steps, size_t top) {
  std::string events = path;
  if (IsPythonWindowFile(path)) {
    // An online window's rank: the Python tracer's aggregates hold no events; its torch
    // profiler's trace beside it (window.py names it so) does.
    events = path + ".torch.json";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(events, ec)) return RankCriticalPath{};
  }
  CriticalPathSink sink;
  StatusOr<trace::ReadStats> read = trace::ReadTrace(events, &sink);
  if (!read.ok()) return read.status();
  RankCriticalPath p = sink.Compute(steps, top);
  // Steps the trace does not number as STEPS (a window's Python tracer numbers its own): all.
  if (p.iterations == 0 && !steps.empty()) p = sink.Compute({}, top);
  return p;
}

}  // namespace perftracker::pattern
