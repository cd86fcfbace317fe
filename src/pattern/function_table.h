// The summarizer's function table: every function a trace calls, each identified by its kind,
// normalized name and call stack, with what the summary needs of it folded in as its events
// arrive (call statistics, time per iteration, self time, collective arguments, input shapes),
// and its FunctionPattern built from that at the end.
//
// It owns the trace's interned strings (names, call stacks, collective arguments) and the caches
// in front of them: most events repeat a few thousand raw names, so an event's function costs
// one hash lookup of its raw name (often none: the last name of its kind is checked first), and
// normalization runs once per distinct raw name. Summarizer::Impl (pattern/summarizer.cc) feeds
// it events in any order and decides which iteration and thread each belongs to.
#ifndef PERFTRACKER_PATTERN_FUNCTION_TABLE_H_
#define PERFTRACKER_PATTERN_FUNCTION_TABLE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pattern/histogram.h"
#include "pattern/input_shapes.h"
#include "pattern/pattern.h"
#include "pattern/string_id_map.h"
#include "trace/event.h"

namespace perftracker::pattern {

// Strings kept once each, numbered in the order they came; id 0 is "". The strings live in a
// deque (stable addresses), so the map keys on views of them and a lookup by an event's
// string_view never builds a std::string.
class Interner {
 public:
  Interner() { Intern(""); }
  Interner(const Interner&) = delete;  // the map holds views of the deque's strings
  Interner(Interner&&) = default;      // a moved deque keeps its elements where they are
  uint32_t Intern(std::string_view s);
  // S's id, or nullopt where S was never interned.
  std::optional<uint32_t> Find(std::string_view s) const {
    const StringIdMap::Entry* e = map_.Find(s);
    return e ? std::optional<uint32_t>(e->id) : std::nullopt;
  }
  const std::string& Get(uint32_t id) const { return strings_[id]; }
  size_t size() const { return strings_.size(); }

 private:
  std::deque<std::string> strings_;
  StringIdMap map_;
};

// A collective's arguments as one event carries them (-1 / 0: not given). The ids are of the
// table's own strings (group, dtype, operation).
struct CollArgs {
  double bytes = -1;
  int32_t group_size = -1;
  uint32_t group_id = 0;
  uint32_t dtype_id = 0;
  uint32_t op_id = 0;
};

// What one function has accumulated so far.
struct FnAcc {
  uint32_t name_id = 0;
  uint32_t stack_id = 0;
  trace::EventKind kind = trace::EventKind::kCpuOp;
  FunctionClass fclass = FunctionClass::kOther;
  int32_t device = -1;
  int32_t stream = -1;

  uint64_t count = 0;
  uint64_t top_count = 0;  // calls with no enclosing call on their thread
  double total = 0, min = std::numeric_limits<double>::infinity(), max = 0;
  double mean = 0, m2 = 0;  // Welford
  LogHistogram hist;
  std::vector<double> iter_us;  // per iteration; empty until a call lands in one
  std::vector<uint32_t> iter_calls;
  std::vector<double> iter_self;
  std::vector<std::pair<int64_t, double>> thread_us;  // usually one or two threads

  // Collective arguments, the bytes averaged over the calls that carried them.
  double coll_bytes = 0;
  uint64_t coll_bytes_n = 0;
  int32_t group_size = -1;
  uint32_t group_id = 0;
  uint32_t dtype_id = 0;
  uint32_t op_id = 0;

  ShapeTally shapes;  // record_shapes' input shapes (ids of the table's shape texts)
};

class FunctionTable {
 public:
  // A call with no thread of its own (a GPU op): AddCall's TID.
  static constexpr int64_t kNoThread = std::numeric_limits<int64_t>::min();

  FunctionTable() = default;
  FunctionTable(const FunctionTable&) = delete;  // the caches hold views of their own stores

  // The trace's iteration count: the length of each function's per-iteration values.
  void SetIterations(size_t n) { iterations_ = n; }

  // The function (KIND, normalized name NAME_ID, call stack STACK_ID), made and classified on
  // first sight. E.g. Intern(kCpuOp, NameId("aten::mm", kCpuOp), 0) twice gives one index.
  uint32_t Intern(trace::EventKind kind, uint32_t name_id, uint32_t stack_id);
  // The function of an event without a call stack, from its raw NAME: the same index as
  // Intern(kind, NameId(name, kind), 0), through one lookup of the raw name.
  uint32_t OfRawName(std::string_view name, trace::EventKind kind) {
    const LastFn& last = last_fn_[static_cast<size_t>(kind)];
    if (last.valid && last.name == name) return last.fn;  // inline: most events stop here
    return OfNewRawName(name, kind);
  }
  // The id of NAME's normalized form (pattern/names.h: a kernel's template arguments go).
  uint32_t NameId(std::string_view name, trace::EventKind kind);
  // The id of a legacy "Call stack" ("file(line): fn;..." innermost first), stored outermost
  // first with each frame normalized: "b.py(2): g;a.py(1): f" -> "a.py(1): f;b.py(2): g".
  uint32_t CallStackId(std::string_view raw);
  // The stack a Python call NAME_ID opens for its children when it runs in STACK_ID:
  // Stack(ChildStack(s, n)) is Stack(s) + ";" + Name(n), or Name(n) alone at the top.
  uint32_t ChildStack(uint32_t stack_id, uint32_t name_id);
  // One record_param_comms op stands for every collective: its function is split by operation
  // ("record_param_comms:all_reduce") so that sizes and bandwidths of two operations do not mix.
  uint32_t OfCommsRecord(trace::EventKind kind, std::string_view collective_name,
                         uint32_t stack_id);

  // One call of FN lasting DUR us, in iteration ITER (-1: none) on thread TID (kNoThread: none).
  void AddCall(uint32_t fn, double dur, int iter, int64_t tid);
  // FN's exclusive time of one call in ITER (-1: none).
  void AddSelf(uint32_t fn, int iter, double self_us);
  // The arguments of a collective event E (sizes from its element counts and dtype).
  CollArgs CollArgsOf(const trace::Event& e);
  // Folds A into FN's collective arguments: sizes averaged, the last group, dtype, op given.
  void AddColl(uint32_t fn, const CollArgs& a);
  // RAW, an event's "Input Dims", to FN's shapes (ignored when it is no shape list).
  void AddShapes(uint32_t fn, std::string_view raw, double dur_us);
  static bool HasCollArgs(const trace::Event& e) {
    return !e.collective_name.empty() || e.in_msg_nelems >= 0 || e.out_msg_nelems >= 0;
  }

  FnAcc& at(uint32_t fn) { return fns_[fn]; }
  const FnAcc& at(uint32_t fn) const { return fns_[fn]; }
  size_t size() const { return fns_.size(); }
  const std::string& Name(uint32_t name_id) const { return names_.Get(name_id); }
  const std::string& Stack(uint32_t stack_id) const { return stacks_.Get(stack_id); }

  // What the patterns are built over: the steady iterations (indices), their mean length, the
  // main thread (kNoThread: none), and META for a collective's group size where its events do
  // not give it (the trace's only process group, else the world).
  struct PatternInput {
    const std::vector<size_t>* steady = nullptr;
    double mean_iter_us = 0;
    int64_t main_tid = kNoThread;
    const trace::TraceMeta* meta = nullptr;
  };
  // Every called function's pattern, the costliest per iteration first.
  std::vector<FunctionPattern> Patterns(const PatternInput& in) const;

 private:
  uint32_t OfNewRawName(std::string_view name, trace::EventKind kind);
  FunctionPattern PatternOf(const FnAcc& f, const PatternInput& in) const;
  CollectiveInfo CollectiveOf(const FnAcc& f, const FunctionPattern& p,
                              const trace::TraceMeta& meta) const;

  // Raw names and shape texts kept in the caches at most: past it a new one is normalized each
  // time it comes (raw names may embed counters, and would grow the caches without end).
  static constexpr size_t kMaxRawNames = 1 << 16;
  static constexpr size_t kKinds = static_cast<size_t>(trace::EventKind::kOther) + 1;

  size_t iterations_ = 0;
  Interner names_;
  Interner stacks_;
  Interner misc_;  // dtypes, groups, collective ops
  Interner raw_call_stacks_;
  std::vector<uint32_t> raw_call_stack_to_stack_;
  std::string norm_buf_;

  std::unordered_map<uint64_t, uint32_t> fn_index_;
  std::vector<FnAcc> fns_;

  // Raw name -> normalized name id; only kernels normalize differently (template arguments),
  // so two caches suffice.
  struct RawNameCache {
    std::deque<std::string> store;
    StringIdMap map;
  };
  RawNameCache raw_kernel_names_, raw_other_names_;

  // Raw name -> function of the events without a call stack, one map per kind: one lookup per
  // event instead of NameId's and Intern's.
  std::array<StringIdMap, kKinds> raw_fns_;
  std::deque<std::string> raw_fn_store_;

  // The last name each kind looked up (a view of the map's own key), checked before hashing:
  // a thread often repeats a name (a run of aten::empty, the same kernel launched again).
  struct LastFn {
    std::string_view name;
    uint32_t fn = 0;
    bool valid = false;
  };
  std::array<LastFn, kKinds> last_fn_;

  InputDimsCache dims_{kMaxRawNames};
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_FUNCTION_TABLE_H_
