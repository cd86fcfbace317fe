// Design notes.
//
// Iterations are fixed in OnBegin from the reader's pre-scanned markers, so every CPU event is
// assigned to an iteration as it arrives (binary search over the sorted spans). Per-call
// statistics (count, Welford mean/variance, log histogram, per-iteration time) are folded in
// immediately, in the function table (pattern/function_table.h): they cost O(functions x
// iterations) memory.
//
// Exclusive (self) time and the top-level flag need each thread's events in nesting order, and
// Kineto files are far from sorted per thread (measured on the shared traces: a 4096-event
// reorder buffer still leaves a quarter of the events late). So each CPU event also leaves a
// 24-byte record (ts, dur, function) in its thread's list, and Finish sorts each list and runs
// a stack over it. This is the one per-event cost on the CPU side, and it is released as soon
// as the thread is processed.
//
// GPU events are kept as 24-byte records (ts, dur, function, correlation) because the busy /
// idle / overlap breakdown needs their intervals anyway. They are assigned to the iteration of
// their launch: every cuda_runtime / cuda_driver event widens its iteration's correlation-id
// range, and at Finish a GPU event's correlation id is looked up in those ranges (CUPTI hands
// out increasing ids, so the ranges are ordered). Without a match the GPU event's own start
// time decides.
//
// python_function identity includes the call stack, which is only known once every ancestor has
// been seen, so Python calls are stored (id -> name, parent) and resolved at Finish.
#include "pattern/summarizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/units.h"
#include "pattern/function_table.h"
#include "pattern/intervals.h"
#include "pattern/iteration_breakdown.h"
#include "pattern/memory_sites.h"
#include "pattern/memory_use.h"
#include "pattern/names.h"
#include "pattern/steady_state.h"

namespace perftracker::pattern {
namespace {

using trace::Event;
using trace::EventKind;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint32_t kPyTag = 0x80000000u;
constexpr int64_t kNoTid = FunctionTable::kNoThread;
constexpr int kMaxStackDepth = 256;

struct CpuRec {
  double ts;
  double dur;
  uint32_t ref;  // function index, or kPyTag | python call index
};

struct ThreadState {
  int64_t tid = 0;
  std::vector<CpuRec> recs;
  double top_us = 0;          // top-level CPU time: picks the main thread
  std::vector<Interval> top;  // merged top-level CPU intervals
};

struct PyCall {
  double ts;
  double dur;
  int64_t parent;
  int64_t tid;
  uint32_t name_id;
  int32_t iter;
  double self_us;
  bool top;
};

struct GpuRec {
  double ts;
  int64_t corr;
  float dur;
  uint32_t fn;
};

bool IsStepMarker(std::string_view name) { return name.substr(0, 13) == "ProfilerStep#"; }

// CPU activity that keeps the GPU waiting when it runs alone (runtime calls are excluded: a
// launch or sync is the CPU talking to the GPU, not CPU work).
bool IsCpuWorkKind(EventKind k) {
  return k == EventKind::kCpuOp || k == EventKind::kUserAnnotation ||
         k == EventKind::kPythonFunction;
}

}  // namespace

struct Summarizer::Impl {
  trace::TraceMeta meta;
  trace::ReadStats stats;
  bool finished = false;

  FunctionTable fns;  // every function called, and what it accumulates

  // Iterations: [it_start, it_end) sorted. In optimizer mode the first start is -inf until
  // Finish, when the first event's time is known; in window mode both ends are open.
  std::string iteration_source;
  bool whole_window = false;
  bool judge_warmup = true;  // Summarizer::LeaveWarmupIn
  std::vector<double> it_start, it_end;
  std::vector<int64_t> it_step;
  int64_t step_tid = kNoTid;
  std::vector<int64_t> corr_min, corr_max;
  int64_t corr_seen_min = std::numeric_limits<int64_t>::max();  // any launch in the trace

  std::unordered_map<int64_t, uint32_t> thread_index;
  std::vector<ThreadState> threads;
  int64_t last_tid = kNoTid;
  uint32_t last_thread = 0;

  std::vector<PyCall> py;
  std::unordered_map<int64_t, uint32_t> py_index;

  std::vector<GpuRec> gpu;
  std::vector<std::pair<uint32_t, int64_t>> coll_kernel_ext;  // NCCL kernel fn -> External id
  std::unordered_map<int64_t, CollArgs> coll_by_ext;

  MemoryUseBuilder memory;  // the trace's memory records (profile_memory)
  MemorySiteBuilder sites;  // and where what they kept was allocated
  bool has_gpu = false;
  double first_ts = kInf;
  double last_end = -kInf;
  uint64_t outside = 0;

  size_t NumIters() const { return it_start.size(); }

  void SetIterations(const std::vector<trace::Span>& spans, bool optimizer) {
    // Optimizer.step runs on the training thread as ProfilerStep does. Without it the thread with
    // the most top-level work would be the main one, which in a gloo job is a gloo worker
    // (its collectives span the whole step), not the thread the iterations belong to.
    IterationCuts cuts = CutIterations(spans, optimizer);
    step_tid = cuts.tid;
    it_start = std::move(cuts.start);
    it_end = std::move(cuts.end);
    it_step = std::move(cuts.step);
  }

  void Begin(const trace::TraceMeta& m) {
    meta = m;
    if (!m.profiler_steps.empty()) {
      iteration_source = "ProfilerStep";
      SetIterations(m.profiler_steps, false);
    } else if (!m.optimizer_steps.empty()) {
      iteration_source = "optimizer";
      SetIterations(m.optimizer_steps, true);
    }
    if (it_start.empty()) {
      iteration_source = "window";
      whole_window = true;
      it_start.assign(1, -kInf);
      it_end.assign(1, kInf);
      it_step.clear();
    }
    corr_min.assign(NumIters(), std::numeric_limits<int64_t>::max());
    corr_max.assign(NumIters(), std::numeric_limits<int64_t>::min());
    memory = MemoryUseBuilder(NumIters());
    fns.SetIterations(NumIters());
  }

  // Iterations are sorted and do not overlap (it_start[i + 1] >= it_end[i]), so when ts lies in
  // the iteration found last, the search would find that one again: events mostly arrive in
  // time order, and this skips the binary search for them.
  mutable size_t last_iter = 0;
  int IterOf(double ts) const {
    if (last_iter < it_start.size() && it_start[last_iter] <= ts && ts < it_end[last_iter]) {
      return static_cast<int>(last_iter);
    }
    auto it = std::upper_bound(it_start.begin(), it_start.end(), ts);
    if (it == it_start.begin()) return -1;
    const auto i = static_cast<size_t>(it - it_start.begin() - 1);
    if (ts < it_end[i]) {
      last_iter = i;
      return static_cast<int>(i);
    }
    return -1;
  }

  ThreadState& Thread(int64_t tid) {
    if (tid == last_tid) return threads[last_thread];
    auto [it, inserted] = thread_index.try_emplace(tid, static_cast<uint32_t>(threads.size()));
    if (inserted) {
      threads.emplace_back();
      threads.back().tid = tid;
    }
    last_tid = tid;
    last_thread = it->second;
    return threads[last_thread];
  }

  void OnEvent(const Event& e) {
    if (e.kind == EventKind::kOther) return;
    if (!std::isfinite(e.ts_us) || !std::isfinite(e.dur_us) || e.dur_us < 0) return;
    if (IsStepMarker(e.name)) return;  // iteration markers are not functions
    first_ts = std::min(first_ts, e.ts_us);
    last_end = std::max(last_end, e.ts_us + e.dur_us);

    if (IsGpuEventKind(e.kind)) {
      has_gpu = true;
      const uint32_t fn = fns.OfRawName(e.name, e.kind);
      FnAcc& f = fns.at(fn);
      if (f.device < 0) f.device = e.device;
      if (f.stream < 0) f.stream = e.stream;
      gpu.push_back({e.ts_us, e.correlation, static_cast<float>(e.dur_us), fn});
      if (f.fclass == FunctionClass::kCollective) {
        if (FunctionTable::HasCollArgs(e)) {
          fns.AddColl(fn, fns.CollArgsOf(e));
        } else if (e.external_id >= 0) {
          coll_kernel_ext.emplace_back(fn, e.external_id);
        }
      }
      return;
    }

    const int iter = IterOf(e.ts_us);
    if (iter < 0) ++outside;
    ThreadState& t = Thread(e.tid);
    if (e.kind == EventKind::kPythonFunction && e.python_id >= 0 && py.size() < kPyTag) {
      const auto idx = static_cast<uint32_t>(py.size());
      py.push_back({e.ts_us, e.dur_us, e.python_parent_id, e.tid, fns.NameId(e.name, e.kind), iter,
                    e.dur_us, false});
      py_index.try_emplace(e.python_id, idx);
      t.recs.push_back({e.ts_us, e.dur_us, kPyTag | idx});
      return;
    }
    const uint32_t stack = e.call_stack.empty() ? 0 : fns.CallStackId(e.call_stack);
    uint32_t fn;
    if (!e.collective_name.empty() && e.name == "record_param_comms") {
      fn = fns.OfCommsRecord(e.kind, e.collective_name, stack);
    } else if (stack == 0) {
      fn = fns.OfRawName(e.name, e.kind);
    } else {
      fn = fns.Intern(e.kind, fns.NameId(e.name, e.kind), stack);
    }
    fns.AddCall(fn, e.dur_us, iter, e.tid);
    if (!e.input_dims.empty()) fns.AddShapes(fn, e.input_dims, e.dur_us);
    t.recs.push_back({e.ts_us, e.dur_us, fn});
    if ((e.kind == EventKind::kCudaRuntime || e.kind == EventKind::kCudaDriver) &&
        e.correlation >= 0) {
      corr_seen_min = std::min(corr_seen_min, e.correlation);
    }
    if ((e.kind == EventKind::kCudaRuntime || e.kind == EventKind::kCudaDriver) &&
        e.correlation >= 0 && iter >= 0) {
      corr_min[static_cast<size_t>(iter)] =
          std::min(corr_min[static_cast<size_t>(iter)], e.correlation);
      corr_max[static_cast<size_t>(iter)] =
          std::max(corr_max[static_cast<size_t>(iter)], e.correlation);
    }
    if (FunctionTable::HasCollArgs(e)) {
      const CollArgs a = fns.CollArgsOf(e);
      fns.AddColl(fn, a);
      if (e.external_id >= 0) coll_by_ext[e.external_id] = a;
    }
  }

  // Sorts one thread's events into nesting order and walks them with a stack: exclusive time
  // is the duration minus the (clipped) durations of direct children.
  void ProcessThread(ThreadState& t) {
    auto nesting_order = [](const CpuRec& a, const CpuRec& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
    };
    // Traces list a thread's events in a few long sorted runs (one per flush of the profiler's
    // buffers).
    SortRuns(&t.recs, nesting_order);
    struct Open {
      double end;
      double child;
      uint32_t rec;
    };
    std::vector<Open> stack;
    auto close = [&](const Open& o) {
      const CpuRec& r = t.recs[o.rec];
      const double self = std::max(0.0, r.dur - o.child);
      const bool top = stack.empty();
      EventKind kind;
      if (r.ref & kPyTag) {
        PyCall& p = py[r.ref & ~kPyTag];
        p.self_us = self;
        p.top = top;
        kind = EventKind::kPythonFunction;
      } else {
        fns.AddSelf(r.ref, IterOf(r.ts), self);
        FnAcc& f = fns.at(r.ref);
        if (top) ++f.top_count;
        kind = f.kind;
      }
      if (top && IsCpuWorkKind(kind)) {
        t.top_us += r.dur;
        t.top.push_back({r.ts, r.ts + r.dur});
      }
    };
    auto pop_until = [&](double ts) {
      while (!stack.empty() && stack.back().end <= ts) {
        Open o = stack.back();
        stack.pop_back();
        close(o);
      }
    };
    // Each kept allocation's place (pattern/memory_sites.h): the innermost Python call open
    // at its time, else the outermost op (what the program called: aten::clone, not the
    // allocator's aten::empty inside it, nor the ProfilerStep annotation around it).
    std::span<MemorySiteBuilder::Live> allocs = sites.OfThread(t.tid);
    size_t next_alloc = 0;
    auto place_until = [&](double ts) {
      for (; next_alloc < allocs.size() && allocs[next_alloc].ts < ts; ++next_alloc) {
        MemorySiteBuilder::Live& a = allocs[next_alloc];
        pop_until(a.ts);
        // The program's own frame (IsProgramFrame), else the innermost Python frame.
        uint32_t op = MemorySiteBuilder::kNoSite;
        for (auto o = stack.rbegin(); o != stack.rend(); ++o) {
          const uint32_t ref = t.recs[o->rec].ref;
          if (!(ref & kPyTag)) {
            if (fns.at(ref).kind == EventKind::kCpuOp || op == MemorySiteBuilder::kNoSite) op = ref;
            continue;
          }
          const bool program = IsProgramFrame(fns.Name(py[ref & ~kPyTag].name_id));
          if (program || a.site == MemorySiteBuilder::kNoSite) a.Place(ref, op);
          if (program) break;
        }
        if (a.site == MemorySiteBuilder::kNoSite) a.site = op;  // no Python frame
      }
    };
    for (uint32_t i = 0; i < t.recs.size(); ++i) {
      const CpuRec& r = t.recs[i];
      place_until(r.ts);
      pop_until(r.ts);
      double end = r.ts + r.dur;
      if (!stack.empty()) {
        end = std::min(end, stack.back().end);  // a child never outlives its parent
        stack.back().child += end - r.ts;
      }
      stack.push_back({end, 0.0, i});
    }
    place_until(kInf);
    pop_until(kInf);
    std::vector<CpuRec>().swap(t.recs);
    MergeIntervals(&t.top);
  }

  // Stack id of the context a Python call creates for its children: its ancestors' names and
  // its own, outermost first. Memoized per call; iterative so deep stacks do not recurse.
  uint32_t ContextOf(uint32_t idx, std::vector<uint32_t>* memo) {
    constexpr uint32_t kUnset = std::numeric_limits<uint32_t>::max();
    std::vector<uint32_t> chain;
    uint32_t cur = idx;
    uint32_t base = 0;
    while (true) {
      if ((*memo)[cur] != kUnset) {
        base = (*memo)[cur];
        break;
      }
      chain.push_back(cur);
      if (chain.size() > kMaxStackDepth) break;  // cycle or absurd depth: cut it
      auto it = py_index.find(py[cur].parent);
      if (py[cur].parent < 0 || it == py_index.end()) break;
      cur = it->second;
    }
    std::string s;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      base = fns.ChildStack(base, py[*it].name_id);
      (*memo)[*it] = base;
    }
    return (*memo)[idx] != kUnset ? (*memo)[idx] : base;
  }

  void ResolvePython() {
    std::vector<uint32_t> memo(py.size(), std::numeric_limits<uint32_t>::max());
    std::vector<uint32_t> py_fn(sites.live().empty() ? 0 : py.size());  // a kept place's function
    for (uint32_t i = 0; i < py.size(); ++i) {
      const PyCall& p = py[i];
      uint32_t stack = 0;
      auto it = py_index.find(p.parent);
      if (p.parent >= 0 && it != py_index.end() && it->second != i) {
        stack = ContextOf(it->second, &memo);
      }
      const uint32_t fn = fns.Intern(EventKind::kPythonFunction, p.name_id, stack);
      if (!py_fn.empty()) py_fn[i] = fn;
      fns.AddCall(fn, p.dur, p.iter, p.tid);
      fns.AddSelf(fn, p.iter, p.self_us);
      if (p.top) ++fns.at(fn).top_count;
    }
    for (MemorySiteBuilder::Live& l : sites.live())
      if (l.site != MemorySiteBuilder::kNoSite && (l.site & kPyTag))
        l.site = py_fn[l.site & ~kPyTag];
    std::vector<PyCall>().swap(py);
    py_index.clear();
  }

  int IterByCorr(int64_t c, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                 const std::vector<int>& range_iter) const {
    if (c < 0 || ranges.empty()) return -1;
    auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                               [](int64_t v, const auto& r) { return v < r.first; });
    if (it == ranges.begin()) return -1;
    --it;
    return c <= it->second ? range_iter[static_cast<size_t>(it - ranges.begin())] : -1;
  }

  // The summary's fields that come from the trace's metadata and the reader.
  RankSummary Header() const {
    RankSummary s;
    s.rank = meta.rank;
    s.world_size = meta.world_size;
    s.host = meta.host;
    s.source = meta.path;
    s.legacy_format = meta.legacy_format;
    s.process_groups = meta.process_groups;
    s.devices = meta.devices;
    s.backend = meta.backend;
    s.nccl_version = meta.nccl_version;
    s.read_stats = stats;
    s.iteration_source = iteration_source;
    s.whole_window = whole_window;
    s.events_outside_iterations = outside;
    s.has_gpu = has_gpu;
    return s;
  }

  // Closes the iterations left open until the first and last events were known: the whole
  // window's both ends, the optimizer mode's first start. Sets the window's length.
  void CloseOpenIterations(RankSummary* s) {
    const bool any = first_ts <= last_end;
    if (any) s->window_ms = UsToMs(last_end - first_ts);
    if (whole_window) {
      it_start[0] = any ? first_ts : 0;
      it_end[0] = any ? last_end : 0;
    } else if (iteration_source == "optimizer") {
      it_start[0] = std::min(any ? first_ts : it_end[0], it_end[0]);
    }
  }

  // CPU threads: self time and top-level flags, then the Python calls; returns the main thread
  // (the markers' thread when it has top-level work, else the one with the most), or null.
  const ThreadState* ResolveCpu() {
    sites.Pair();
    for (ThreadState& t : threads) ProcessThread(t);
    ResolvePython();
    const ThreadState* main = nullptr;
    for (const ThreadState& t : threads) {
      if (step_tid != kNoTid && t.tid == step_tid && t.top_us > 0) {
        main = &t;
        break;
      }
      if (main == nullptr || t.top_us > main->top_us) main = &t;
    }
    return main;
  }

  // GPU: each op belongs to the step whose CPU side launched it (its correlation id among the
  // step's runtime calls), wherever it runs on the GPU timeline, so a step's tail after its CPU
  // end is still its own. An op launched before the first runtime call the trace holds was
  // queued before the profiler started: no step's. Other unmatched ops (launched between
  // steps, or traces without correlation ids) go by their start time. Returns the ops'
  // intervals per device and iteration and releases the GPU records.
  DeviceLanes AssignGpuOps(RankSummary* s) {
    const size_t n = NumIters();
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<int> range_iter;
    for (size_t i = 0; i < n; ++i) {
      if (corr_min[i] <= corr_max[i]) {
        ranges.emplace_back(corr_min[i], corr_max[i]);
        range_iter.push_back(static_cast<int>(i));
      }
    }
    const bool ordered = std::is_sorted(ranges.begin(), ranges.end());
    DeviceLanes lanes;
    for (const GpuRec& g : gpu) {
      int iter = ordered ? IterByCorr(g.corr, ranges, range_iter) : -1;
      if (iter < 0 && g.corr >= 0 && g.corr < corr_seen_min &&
          corr_seen_min != std::numeric_limits<int64_t>::max()) {
        ++s->pre_profiler_gpu_ops;
        s->pre_profiler_gpu_us += g.dur;
        fns.AddCall(g.fn, g.dur, -1, kNoTid);
        continue;
      }
      if (iter < 0) iter = IterOf(g.ts);
      fns.AddCall(g.fn, g.dur, iter, kNoTid);
      fns.AddSelf(g.fn, iter, g.dur);
      const FnAcc& f = fns.at(g.fn);
      if (f.kind == EventKind::kGpuUserAnnotation || iter < 0) continue;
      std::vector<IterLanes>& dev = lanes[f.device];
      if (dev.empty()) dev.resize(n);
      dev[static_cast<size_t>(iter)].Add({g.ts, g.ts + g.dur}, f.fclass);
    }
    std::vector<GpuRec>().swap(gpu);
    return lanes;
  }

  // NCCL kernels without arguments of their own take those of the CPU op that launched them.
  void AttachKernelCollArgs() {
    for (const auto& [fn, ext] : coll_kernel_ext) {
      auto it = coll_by_ext.find(ext);
      if (it != coll_by_ext.end()) fns.AddColl(fn, it->second);
    }
  }

  void FillGpuBreakdown(DeviceLanes* lanes, const std::vector<size_t>& steady,
                        const ThreadState* main, RankSummary* s) const {
    const GpuBreakdown g = BreakDownGpu(lanes, steady);
    s->gpu_busy_us = g.busy_us;
    s->gpu_idle_us = g.idle_us;
    s->compute_us = g.compute_us;
    s->comm_us = g.comm_us;
    s->memcpy_us = g.memcpy_us;
    s->comm_compute_overlap_us = g.overlap_us;
    if (main != nullptr) {
      s->cpu_critical_us = CpuCriticalUs(main->top, g.all_busy, steady, it_start, it_end);
    }
  }

  RankSummary Build() {
    RankSummary s = Header();
    CloseOpenIterations(&s);
    const size_t n = NumIters();
    // Steady-state iterations: every per-iteration value is a mean over them; the partial and
    // warm-up ones are listed (pattern/steady_state.h).
    std::vector<double> all_ms(n);
    for (size_t i = 0; i < n; ++i) all_ms[i] = UsToMs(it_end[i] - it_start[i]);
    const std::vector<size_t> steady =
        SplitSteadyIterations(all_ms, it_step, whole_window, judge_warmup, &s);
    double iter_total_us = 0;
    for (size_t i : steady) iter_total_us += it_end[i] - it_start[i];
    const double mean_iter_us =
        steady.empty() ? 0 : iter_total_us / static_cast<double>(steady.size());

    const ThreadState* main = ResolveCpu();
    if (main != nullptr) s.main_tid = main->tid;
    DeviceLanes lanes = AssignGpuOps(&s);
    AttachKernelCollArgs();
    if (!lanes.empty() && !steady.empty()) FillGpuBreakdown(&lanes, steady, main, &s);
    s.functions = fns.Patterns({.steady = &steady,
                                .mean_iter_us = mean_iter_us,
                                .main_tid = main != nullptr ? main->tid : kNoTid,
                                .meta = &meta});
    s.memory = memory.Build(steady);
    s.memory_sites = sites.Build(steady, [&](uint32_t fn) {
      return std::pair{fns.Name(fns.at(fn).name_id), fns.Stack(fns.at(fn).stack_id)};
    });
    return s;
  }
};

Summarizer::Summarizer() : impl_(std::make_unique<Impl>()) {}
Summarizer::~Summarizer() = default;

void Summarizer::LeaveWarmupIn() { impl_->judge_warmup = false; }

void Summarizer::OnBegin(const trace::TraceMeta& meta) { impl_->Begin(meta); }

void Summarizer::OnEvent(const trace::Event& event) {
  if (impl_->it_start.empty()) impl_->Begin(trace::TraceMeta{});  // no OnBegin: window mode
  impl_->OnEvent(event);
}

void Summarizer::OnMemory(const trace::MemoryEvent& event) {
  if (impl_->it_start.empty()) impl_->Begin(trace::TraceMeta{});
  const int iteration = impl_->IterOf(event.ts_us);
  impl_->memory.Add(event, iteration);
  impl_->sites.Add(event, iteration);
}

void Summarizer::OnEnd(const trace::ReadStats& stats) { impl_->stats = stats; }

RankSummary Summarizer::Finish() {
  if (impl_->it_start.empty()) impl_->Begin(trace::TraceMeta{});
  if (impl_->finished) return RankSummary{};
  impl_->finished = true;
  return impl_->Build();
}

}  // namespace perftracker::pattern
