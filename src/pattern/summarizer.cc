// Design notes.
//
// Iterations are fixed in OnBegin from the reader's pre-scanned markers, so every CPU event is
// assigned to an iteration as it arrives (binary search over the sorted spans). Per-call
// statistics (count, Welford mean/variance, log histogram, per-iteration time) are folded in
// immediately: they cost O(functions x iterations) memory.
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
#include <array>
#include <cmath>
#include <deque>
#include <limits>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/units.h"
#include "pattern/histogram.h"
#include "pattern/input_shapes.h"
#include "pattern/intervals.h"
#include "pattern/iteration_breakdown.h"
#include "pattern/memory_sites.h"
#include "pattern/memory_use.h"
#include "pattern/names.h"
#include "pattern/steady_state.h"
#include "pattern/string_id_map.h"

namespace perftracker::pattern {
namespace {

using trace::Event;
using trace::EventKind;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint32_t kPyTag = 0x80000000u;
constexpr int64_t kNoTid = std::numeric_limits<int64_t>::min();
constexpr int kMaxStackDepth = 256;

// Strings live in a deque (stable addresses), so the map can key on views of them and lookups
// by an event's string_view never build a std::string.
class Interner {
 public:
  Interner() { Intern(""); }
  uint32_t Intern(std::string_view s) {
    if (const StringIdMap::Entry* e = map_.Find(s)) return e->id;
    strings_.emplace_back(s);
    const auto id = static_cast<uint32_t>(strings_.size() - 1);
    map_.Insert(strings_.back(), id);
    return id;
  }
  const std::string& Get(uint32_t id) const { return strings_[id]; }
  size_t size() const { return strings_.size(); }

 private:
  std::deque<std::string> strings_;
  StringIdMap map_;
};

struct FnAcc {
  uint32_t name_id = 0;
  uint32_t stack_id = 0;
  EventKind kind = EventKind::kCpuOp;
  FunctionClass fclass = FunctionClass::kOther;
  int32_t device = -1;
  int32_t stream = -1;

  uint64_t count = 0;
  uint64_t top_count = 0;
  double total = 0, min = kInf, max = 0;
  double mean = 0, m2 = 0;  // Welford
  LogHistogram hist;
  std::vector<double> iter_us;
  std::vector<uint32_t> iter_calls;
  std::vector<double> iter_self;
  std::vector<std::pair<int64_t, double>> thread_us;  // usually one or two threads

  // Collective arguments, averaged over the calls that carried them.
  double coll_bytes = 0;
  uint64_t coll_bytes_n = 0;
  int32_t group_size = -1;
  uint32_t group_id = 0;
  uint32_t dtype_id = 0;
  uint32_t op_id = 0;

  ShapeTally shapes;  // record_shapes' input shapes (ids of Impl::dims)
};

struct CollArgs {
  double bytes = -1;
  int32_t group_size = -1;
  uint32_t group_id = 0;
  uint32_t dtype_id = 0;
  uint32_t op_id = 0;
};

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

  Interner names;
  Interner stacks;
  Interner misc;  // dtypes, groups, collective ops
  Interner raw_call_stacks;
  std::vector<uint32_t> raw_call_stack_to_stack;
  std::string norm_buf;

  std::unordered_map<uint64_t, uint32_t> fn_index;
  std::vector<FnAcc> fns;

  // Iterations: [it_start, it_end) sorted. In optimizer mode the first start is -inf until
  // Finish, when the first event's time is known; in window mode both ends are open.
  std::string iteration_source;
  bool whole_window = false;
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

  uint32_t InternFn(EventKind kind, uint32_t name_id, uint32_t stack_id) {
    const uint64_t key = static_cast<uint64_t>(kind) | (static_cast<uint64_t>(name_id) << 8) |
                         (static_cast<uint64_t>(stack_id) << 36);
    auto [it, inserted] = fn_index.try_emplace(key, static_cast<uint32_t>(fns.size()));
    if (inserted) {
      FnAcc& f = fns.emplace_back();
      f.name_id = name_id;
      f.stack_id = stack_id;
      f.kind = kind;
      f.fclass = kind == EventKind::kPythonFunction
                     ? ClassifyPythonFunction(names.Get(name_id), stacks.Get(stack_id))
                     : ClassifyFunction(kind, names.Get(name_id));
    }
    return it->second;
  }

  // Raw name -> normalized name id. Most events repeat a few thousand raw names, so this skips
  // normalization on the hot path; capped because raw names may embed counters.
  struct RawNameCache {
    std::deque<std::string> store;
    StringIdMap map;
  };
  static constexpr size_t kMaxRawNames = 1 << 16;
  RawNameCache raw_kernel_names, raw_other_names;

  // Raw name -> function of the events without a call stack, one map per kind: one lookup per
  // event instead of NameId's and InternFn's. Functions are still interned on first sight.
  static constexpr size_t kKinds = static_cast<size_t>(EventKind::kOther) + 1;
  std::array<StringIdMap, kKinds> raw_fns;
  std::deque<std::string> raw_fn_store;

  // The last name each kind looked up (a view of the map's own key), checked before hashing:
  // a thread often repeats a name (a run of aten::empty, the same kernel launched again).
  struct LastFn {
    std::string_view name;
    uint32_t fn = 0;
    bool valid = false;
  };
  std::array<LastFn, kKinds> last_fn;

  uint32_t FnOf(std::string_view name, EventKind kind) {
    LastFn& last = last_fn[static_cast<size_t>(kind)];
    if (last.valid && last.name == name) return last.fn;
    StringIdMap& map = raw_fns[static_cast<size_t>(kind)];
    if (const StringIdMap::Entry* e = map.Find(name)) {
      last = {e->key(), e->id, true};
      return e->id;
    }
    const uint32_t fn = InternFn(kind, NameId(name, kind), 0);
    if (raw_fn_store.size() < kMaxRawNames) {
      raw_fn_store.emplace_back(name);
      map.Insert(raw_fn_store.back(), fn);
      last = {raw_fn_store.back(), fn, true};
    }
    return fn;
  }

  uint32_t NameId(std::string_view name, EventKind kind) {
    // Only kernels normalize differently (template arguments), so two caches suffice.
    RawNameCache& cache = kind == EventKind::kKernel ? raw_kernel_names : raw_other_names;
    if (const StringIdMap::Entry* e = cache.map.Find(name)) return e->id;
    NormalizeNameInto(name, kind, &norm_buf);
    const uint32_t id = names.Intern(norm_buf);
    if (cache.map.size() < kMaxRawNames) {
      cache.store.emplace_back(name);
      cache.map.Insert(cache.store.back(), id);
    }
    return id;
  }

  InputDimsCache dims{kMaxRawNames};

  // Legacy "Call stack": "file(line): fn;..." innermost first; stored outermost first.
  uint32_t CallStackId(std::string_view raw) {
    const uint32_t rid = raw_call_stacks.Intern(raw);
    if (rid < raw_call_stack_to_stack.size()) return raw_call_stack_to_stack[rid];
    std::vector<std::string_view> frames;
    size_t pos = 0;
    while (pos < raw.size()) {
      size_t semi = raw.find(';', pos);
      if (semi == raw.npos) semi = raw.size();
      if (semi > pos) frames.push_back(raw.substr(pos, semi - pos));
      pos = semi + 1;
    }
    std::string stack, frame;
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      NormalizeNameInto(*it, EventKind::kPythonFunction, &frame);
      if (!stack.empty()) stack.push_back(';');
      stack += frame;
    }
    raw_call_stack_to_stack.resize(rid + 1, 0);
    raw_call_stack_to_stack[rid] = stacks.Intern(stack);
    return raw_call_stack_to_stack[rid];
  }

  void AddCall(uint32_t fn, double dur, int iter, int64_t tid) {
    FnAcc& f = fns[fn];
    ++f.count;
    f.total += dur;
    f.min = std::min(f.min, dur);
    f.max = std::max(f.max, dur);
    const double delta = dur - f.mean;
    f.mean += delta / static_cast<double>(f.count);
    f.m2 += delta * (dur - f.mean);
    f.hist.Add(dur);
    if (iter >= 0) {
      if (f.iter_us.empty()) {
        f.iter_us.assign(NumIters(), 0.0);
        f.iter_calls.assign(NumIters(), 0);
      }
      f.iter_us[static_cast<size_t>(iter)] += dur;
      ++f.iter_calls[static_cast<size_t>(iter)];
    }
    if (tid != kNoTid) {
      auto it = std::find_if(f.thread_us.begin(), f.thread_us.end(),
                             [tid](const auto& p) { return p.first == tid; });
      if (it == f.thread_us.end()) {
        f.thread_us.emplace_back(tid, dur);
      } else {
        it->second += dur;
      }
    }
  }

  void AddSelf(FnAcc& f, int iter, double self) {
    if (iter < 0) return;
    if (f.iter_self.empty()) f.iter_self.assign(NumIters(), 0.0);
    f.iter_self[static_cast<size_t>(iter)] += self;
  }

  CollArgs CollArgsOf(const Event& e) {
    CollArgs a;
    const int64_t nelems = std::max(e.in_msg_nelems, e.out_msg_nelems);
    const int dsz = DtypeBytes(e.dtype);
    // max(in, out) is the nccl-tests "size": the full buffer for all_gather / reduce_scatter,
    // the one buffer for the others.
    if (nelems >= 0 && dsz > 0) a.bytes = static_cast<double>(nelems) * dsz;
    a.group_size = e.group_size;
    a.group_id = misc.Intern(!e.pg_ranks.empty() ? e.pg_ranks : e.pg_name);
    a.dtype_id = misc.Intern(e.dtype);
    if (!e.collective_name.empty()) a.op_id = misc.Intern(CollectiveOp(e.collective_name));
    return a;
  }

  void AddColl(uint32_t fn, const CollArgs& a) {
    FnAcc& f = fns[fn];
    if (a.bytes >= 0) {
      f.coll_bytes += a.bytes;
      ++f.coll_bytes_n;
    }
    if (a.group_size > 0) f.group_size = a.group_size;
    if (a.group_id != 0) f.group_id = a.group_id;
    if (a.dtype_id != 0) f.dtype_id = a.dtype_id;
    if (a.op_id != 0 && !misc.Get(a.op_id).empty()) f.op_id = a.op_id;
  }

  static bool HasCollArgs(const Event& e) {
    return !e.collective_name.empty() || e.in_msg_nelems >= 0 || e.out_msg_nelems >= 0;
  }

  void OnEvent(const Event& e) {
    if (e.kind == EventKind::kOther) return;
    if (!std::isfinite(e.ts_us) || !std::isfinite(e.dur_us) || e.dur_us < 0) return;
    if (IsStepMarker(e.name)) return;  // iteration markers are not functions
    first_ts = std::min(first_ts, e.ts_us);
    last_end = std::max(last_end, e.ts_us + e.dur_us);

    if (IsGpuEventKind(e.kind)) {
      has_gpu = true;
      const uint32_t fn = FnOf(e.name, e.kind);
      FnAcc& f = fns[fn];
      if (f.device < 0) f.device = e.device;
      if (f.stream < 0) f.stream = e.stream;
      gpu.push_back({e.ts_us, e.correlation, static_cast<float>(e.dur_us), fn});
      if (f.fclass == FunctionClass::kCollective) {
        if (HasCollArgs(e)) {
          AddColl(fn, CollArgsOf(e));
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
      py.push_back({e.ts_us, e.dur_us, e.python_parent_id, e.tid, NameId(e.name, e.kind), iter,
                    e.dur_us, false});
      py_index.try_emplace(e.python_id, idx);
      t.recs.push_back({e.ts_us, e.dur_us, kPyTag | idx});
      return;
    }
    const uint32_t stack = e.call_stack.empty() ? 0 : CallStackId(e.call_stack);
    uint32_t fn;
    if (!e.collective_name.empty() && e.name == "record_param_comms") {
      // One record_param_comms op stands for every collective: split it by op so sizes and
      // bandwidths of all_reduce and broadcast do not mix.
      norm_buf.assign("record_param_comms:");
      norm_buf += CollectiveOp(e.collective_name);
      fn = InternFn(e.kind, names.Intern(norm_buf), stack);
    } else if (stack == 0) {
      fn = FnOf(e.name, e.kind);
    } else {
      fn = InternFn(e.kind, NameId(e.name, e.kind), stack);
    }
    AddCall(fn, e.dur_us, iter, e.tid);
    if (!e.input_dims.empty()) {
      if (const InputDimsCache::Parsed* d = dims.Find(e.input_dims))
        fns[fn].shapes.Add(d->text, d->elements, e.dur_us);
    }
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
    if (HasCollArgs(e)) {
      const CollArgs a = CollArgsOf(e);
      AddColl(fn, a);
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
        FnAcc& f = fns[r.ref];
        AddSelf(f, IterOf(r.ts), self);
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
            if (fns[ref].kind == EventKind::kCpuOp || op == MemorySiteBuilder::kNoSite) op = ref;
            continue;
          }
          const bool program = IsProgramFrame(names.Get(py[ref & ~kPyTag].name_id));
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
      s = stacks.Get(base);
      if (!s.empty()) s.push_back(';');
      s += names.Get(py[*it].name_id);
      base = stacks.Intern(s);
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
      const uint32_t fn = InternFn(EventKind::kPythonFunction, p.name_id, stack);
      if (!py_fn.empty()) py_fn[i] = fn;
      AddCall(fn, p.dur, p.iter, p.tid);
      FnAcc& f = fns[fn];
      AddSelf(f, p.iter, p.self_us);
      if (p.top) ++f.top_count;
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
        AddCall(g.fn, g.dur, -1, kNoTid);
        continue;
      }
      if (iter < 0) iter = IterOf(g.ts);
      AddCall(g.fn, g.dur, iter, kNoTid);
      FnAcc& f = fns[g.fn];
      AddSelf(f, iter, g.dur);
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
      if (it != coll_by_ext.end()) AddColl(fn, it->second);
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

  // A collective's operation, message size, group and bandwidths; the group's size falls back
  // to the trace's only process group, then to the world size.
  CollectiveInfo CollectiveOf(const FnAcc& f, const FunctionPattern& p) const {
    CollectiveInfo c;
    c.op = f.op_id != 0 ? misc.Get(f.op_id) : CollectiveOp(p.name);
    c.msg_bytes = f.coll_bytes_n ? f.coll_bytes / static_cast<double>(f.coll_bytes_n) : 0;
    c.dtype = misc.Get(f.dtype_id);
    c.group_size = f.group_size;
    c.group = misc.Get(f.group_id);
    if (c.group_size <= 0 && meta.process_groups.size() == 1) {
      c.group_size = meta.process_groups[0].size;
    }
    if (c.group_size <= 0 && meta.world_size > 0) c.group_size = meta.world_size;
    if (c.group_size < 0) c.group_size = 0;
    if (c.msg_bytes > 0 && p.mean_us > 0) {
      c.algbw_gbps = c.msg_bytes / (p.mean_us * 1e3);  // bytes/us -> GB/s is 1e-3
      c.busbw_gbps = c.algbw_gbps * BusFactor(c.op, c.group_size);
    }
    return c;
  }

  // One function's pattern: its call statistics, and per-iteration values as means over the
  // steady iterations (mean_iter_us: their mean length).
  FunctionPattern PatternOf(const FnAcc& f, const std::vector<size_t>& steady,
                            const ThreadState* main, double mean_iter_us) const {
    const size_t ns = steady.size();
    const double dn = ns ? static_cast<double>(ns) : 1.0;
    FunctionPattern p;
    p.name = names.Get(f.name_id);
    p.kind = f.kind;
    p.fclass = f.fclass;
    p.stack = stacks.Get(f.stack_id);
    p.device = f.device;
    p.stream = f.stream;
    const bool gpu_side = IsGpuEventKind(f.kind);
    if (!gpu_side && main != nullptr) {
      for (const auto& [tid, us] : f.thread_us) {
        if (tid == main->tid && 2 * us >= f.total) p.main_thread = true;
      }
    }
    p.top_level = !gpu_side && 2 * f.top_count >= f.count;
    p.count = f.count;
    p.total_us = f.total;
    p.mean_us = f.mean;
    p.min_us = f.min;
    p.max_us = f.max;
    p.p50_us = f.hist.Quantile(0.50, f.min, f.max);
    p.p99_us = f.hist.Quantile(0.99, f.min, f.max);
    p.cv = f.mean > 0 ? std::sqrt(f.m2 / static_cast<double>(f.count)) / f.mean : 0;
    double in_iters = 0, calls = 0, self = 0;
    p.iter_us.assign(ns, 0.0f);
    for (size_t k = 0; k < ns; ++k) {
      const size_t i = steady[k];
      if (i < f.iter_us.size()) {
        in_iters += f.iter_us[i];
        calls += f.iter_calls[i];
        p.iter_us[k] = static_cast<float>(f.iter_us[i]);
      }
      if (i < f.iter_self.size()) self += f.iter_self[i];
    }
    p.calls_per_iter = calls / dn;
    p.per_iter_us = in_iters / dn;
    p.share = mean_iter_us > 0 ? p.per_iter_us / mean_iter_us : 0;
    p.self_per_iter_us = self / dn;
    if (f.fclass == FunctionClass::kCollective) p.coll = CollectiveOf(f, p);
    if (f.shapes.calls() > 0) {
      p.input_elements = f.shapes.MeanElements();
      p.input_dims = dims.Text(f.shapes.Costliest());
    }
    return p;
  }

  // Every called function's pattern, the costliest per iteration first.
  void FillFunctions(const std::vector<size_t>& steady, const ThreadState* main,
                     double mean_iter_us, RankSummary* s) const {
    s->functions.reserve(fns.size());
    for (const FnAcc& f : fns) {
      if (f.count == 0) continue;
      s->functions.push_back(PatternOf(f, steady, main, mean_iter_us));
    }
    std::sort(s->functions.begin(), s->functions.end(),
              [](const FunctionPattern& a, const FunctionPattern& b) {
                if (a.per_iter_us != b.per_iter_us) return a.per_iter_us > b.per_iter_us;
                if (a.total_us != b.total_us) return a.total_us > b.total_us;
                return a.Key() < b.Key();
              });
  }

  RankSummary Build() {
    RankSummary s = Header();
    CloseOpenIterations(&s);
    const size_t n = NumIters();
    // Steady-state iterations: every per-iteration value is a mean over them; the partial and
    // warm-up ones are listed (pattern/steady_state.h).
    std::vector<double> all_ms(n);
    for (size_t i = 0; i < n; ++i) all_ms[i] = UsToMs(it_end[i] - it_start[i]);
    const std::vector<size_t> steady = SplitSteadyIterations(all_ms, it_step, whole_window, &s);
    double iter_total_us = 0;
    for (size_t i : steady) iter_total_us += it_end[i] - it_start[i];
    const double mean_iter_us =
        steady.empty() ? 0 : iter_total_us / static_cast<double>(steady.size());

    const ThreadState* main = ResolveCpu();
    if (main != nullptr) s.main_tid = main->tid;
    DeviceLanes lanes = AssignGpuOps(&s);
    AttachKernelCollArgs();
    if (!lanes.empty() && !steady.empty()) FillGpuBreakdown(&lanes, steady, main, &s);
    FillFunctions(steady, main, mean_iter_us, &s);
    s.memory = memory.Build(steady);
    s.memory_sites = sites.Build(steady, [&](uint32_t fn) {
      return std::pair{names.Get(fns[fn].name_id), stacks.Get(fns[fn].stack_id)};
    });
    return s;
  }
};

Summarizer::Summarizer() : impl_(std::make_unique<Impl>()) {}
Summarizer::~Summarizer() = default;

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
