// The compact, job-wide form of many ranks' patterns that diagnosis works on. A RankSummary
// spends ~340 bytes per function on strings and statistics that only one rank needs; 100,000
// ranks of 500 functions would take 17 GB. Here every function identity (kind, name, stack,
// class) is stored once per job and each rank keeps, per function, only the numbers diagnosis
// compares (40 bytes), plus its collectives' time in each iteration (the critical path's, a few
// per rank); process groups, shared by their members, are stored once too. Summaries
// are added one at a time and dropped, so a job streams in from disk or the network: as
// RankSummary, or (the loader's way) as FunctionViews into the summary decoder's buffers, with
// no string or vector per function. Adds run from many threads: lookups in the identity tables
// take a shared lock, only a rank that brings something new takes the exclusive one.
#ifndef PERFTRACKER_PATTERN_COMPACT_JOB_H_
#define PERFTRACKER_PATTERN_COMPACT_JOB_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pattern/pattern.h"
#include "pattern/string_id_map.h"

namespace perftracker::pattern {

// A function's identity: the same on every rank that runs it.
struct FunctionInfo {
  uint32_t id = 0;  // dense, per job
  std::string key;  // FunctionPattern::Key()
  std::string name;
  trace::EventKind kind = trace::EventKind::kCpuOp;
  FunctionClass fclass = FunctionClass::kOther;
  std::string stack;
};

// One function of one rank: its identity and the statistics diagnosis compares.
struct CompactFunction {
  static constexpr uint32_t kNoGroup = UINT32_MAX;
  const FunctionInfo* info = nullptr;
  float per_iter_us = 0;
  float self_per_iter_us = 0;
  float calls_per_iter = 0;
  float mean_us = 0;
  float cv = 0;
  // Standard deviation of its time across the window's iterations (0: fewer than two): how
  // much of a difference between ranks the iteration-to-iteration noise explains. Where it has
  // values of fewer iterations than its rank (a window's torch trace: its first few), scaled by
  // sqrt(the rank's count / its own), so that over the rank's count it gives its own mean's
  // standard error (compact_job.cc SpreadOverRankIterations).
  float iter_sd_us = 0;
  uint32_t group = kNoGroup;  // collectives: the process group, an id of CompactJob::Group()
  bool main_thread = false;
  bool top_level = false;
  bool in_python = false;  // FunctionPattern::in_python

  uint32_t id() const { return info->id; }
  const std::string& name() const { return info->name; }
  trace::EventKind kind() const { return info->kind; }
  FunctionClass fclass() const { return info->fclass; }
};
// 100,000 ranks of 500 functions: 2.0 GB of these (2.4 at 48 bytes, with a collective's message
// size and bandwidth in each: the job's peak passed 3 GB).
static_assert(sizeof(CompactFunction) <= 40);

// What only a collective has (CompactRank::collectives): a few of a rank's hundreds of functions.
struct CompactCollective {
  uint32_t index = 0;  // in CompactRank::compact
  float msg_bytes = 0;
  float busbw_gbps = 0;
};

// A function of a rank whose inputs' shapes the trace recorded (FunctionPattern::input_dims).
struct CompactShape {
  uint32_t index = 0;  // in CompactRank::compact
  float elements = 0;  // mean input elements per call
  std::string dims;    // the shapes its time went to most
};
// Shaped functions a rank keeps, its costliest: what "more work" compares (a record_shapes
// trace shapes every CPU op, and the cheap ones tell nothing of where the time went).
inline constexpr size_t kMaxShapedFunctions = 32;

// A rank: its summary without functions (iterations, GPU time split, host, ...) plus its
// functions in compact form, sorted as the summary had them (per_iter_us, descending).
struct CompactRank : RankSummary {
  std::vector<CompactFunction> compact;
  std::vector<CompactShape> shapes;  // by cost, at most kMaxShapedFunctions
  std::vector<CompactCollective> collectives;  // by index
  // The summary's process groups, stored once per job (RankSummary::process_groups is empty).
  std::vector<const trace::ProcessGroup*> groups;
  int role = -1;          // pipeline stage: position in the rank's "pp" group; -1 when unknown
  int gpu = -1;           // the device its GPU work ran on most (-1: none); NVML's index on a node
  bool has_self = false;  // the summary carries exclusive times
  bool any_main = false;  // some function is marked as running on the iteration thread
  // Each collective's time in each of the window's steady iterations (us; collectives' order,
  // `iterations` values each): when each iteration's last rank arrived (diagnose/what_if.h
  // CriticalPath). Empty, and iterations 0, when its collectives' counts of iterations differ.
  uint32_t iterations = 0;
  std::vector<float> collective_iter_us;

  // F's message size and bus bandwidth if F (one of compact) is a collective; zeros otherwise.
  CompactCollective CollectiveOf(const CompactFunction& f) const;
  // F's time in each iteration if F (one of compact) is a collective and they are known; empty
  // otherwise.
  std::span<const float> CollectiveIterations(const CompactFunction& f) const;
};

class CompactJob {
 public:
  // Adds one rank. Safe to call from several threads; ranks keep the order of the calls until
  // SortByRank() (by rank, then source).
  void Add(RankSummary&& r);
  void Add(const RankSummary& r);
  // The same, with the rank's functions as views (what ReadSummaryFileViews decodes: no
  // FunctionPattern is built); R's own functions are dropped. The views are read during the
  // call only.
  // STRINGS is the summary's string table that the views' name_ref and stack_ref index
  // (SummaryViews::strings); without it each name and stack counts as a string of its own.
  void Add(RankSummary&& r, std::span<const FunctionView> functions,
           std::span<const std::string_view> strings = {});
  // Room for N ranks (the loader knows how many files it reads).
  void Reserve(size_t n);
  void SortByRank();

  const std::vector<CompactRank>& ranks() const { return ranks_; }
  size_t function_count() const { return infos_.size(); }
  const FunctionInfo& function(uint32_t id) const { return infos_[id]; }
  // The function identity with this key (FunctionPattern::Key()), or nullptr.
  const FunctionInfo* FindFunction(std::string_view key) const;
  // Collective group names (CollectiveInfo::group) by id.
  const std::string& Group(uint32_t id) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return HashBytesWide(s); }
  };
  using Index = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

  // What Add works out before it takes the lock (compact_job.cc).
  struct Prepared;
  // Each finds a string, identity, group or process group in the job's tables, and with ADD
  // adds it when missing (under the exclusive lock); without, it gives kFree, nullptr or
  // nullopt for one the job does not have yet.
  uint32_t InternString(std::string_view s, uint64_t hash, bool add);
  // HASH: IdentitySlotHash(name, stack, f.kind).
  const FunctionInfo* InternIdentity(const FunctionView& f, uint32_t name, uint32_t stack,
                                     uint64_t hash, bool add);
  const FunctionInfo* InternKeyed(const FunctionView& f, bool add);
  std::optional<uint32_t> InternGroup(std::string_view g, bool add);
  // Moves *PG into the job when it adds it.
  const trace::ProcessGroup* InternProcessGroup(trace::ProcessGroup* pg, std::string_view key,
                                                bool add);
  const FunctionInfo* NewInfo(const FunctionView& f, std::string key);
  static void ProcessGroupKey(const trace::ProcessGroup& pg, std::string* key);
  // Finds (or with ADD, adds) every string, identity and group a rank names: FNS' info and
  // group, P's ids and process groups. Without ADD, false as soon as one is missing.
  bool Resolve(std::span<const FunctionView> views, std::vector<trace::ProcessGroup>* groups,
               Prepared* p, std::span<CompactFunction> fns, bool add);

  // Open addressing, half full at most; kFree marks a free slot.
  static constexpr uint32_t kFree = UINT32_MAX;
  struct StringSlot {
    uint64_t hash = 0;
    uint32_t id = kFree;
  };
  struct IdentitySlot {
    uint32_t name = 0;  // ids in strings_
    uint32_t stack = 0;
    uint32_t id = kFree;  // in infos_
    trace::EventKind kind = trace::EventKind::kCpuOp;
  };

  // The tables below ranks_: shared to find, exclusive to add. ranks_ has its own.
  std::unique_ptr<std::shared_mutex> mu_ = std::make_unique<std::shared_mutex>();
  std::unique_ptr<std::mutex> ranks_mu_ = std::make_unique<std::mutex>();
  std::deque<FunctionInfo> infos_;  // a deque: CompactFunction points into it
  Index by_key_;                    // every identity, by Key()
  // Function names and stacks, each stored once, and the identities of functions whose name
  // and stack hold no key separator, by (kind, name id, stack id): an identity is found with
  // integer compares once its two strings are, and those are found once per summary.
  std::deque<std::string> strings_;
  std::vector<StringSlot> string_slots_;
  size_t strings_used_ = 0;
  std::vector<IdentitySlot> identity_slots_;
  size_t identities_used_ = 0;
  std::vector<std::string> groups_;
  Index group_ids_;
  std::deque<trace::ProcessGroup> pgs_;
  std::unordered_map<std::string, const trace::ProcessGroup*, StringHash, std::equal_to<>>
      pg_index_;  // by ProcessGroupKey
  std::vector<CompactRank> ranks_;
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_COMPACT_JOB_H_
