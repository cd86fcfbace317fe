#include "pattern/compact_job.h"

#include <algorithm>
#include <cmath>
#include <shared_mutex>

#include "pattern/names.h"
#include "pattern/rank_runs.h"
#include "pattern/string_id_map.h"

namespace perftracker::pattern {
namespace {

// Position in the rank's pipeline group (IsPipelineGroup; Megatron order): ranks of different
// pipeline stages run different layers and are never peers, even when their functions look
// alike.
int PipelineStage(const RankSummary& r) {
  for (const auto& pg : r.process_groups) {
    if (!IsPipelineGroup(pg) || pg.ranks.size() < 2) continue;
    auto it = std::find(pg.ranks.begin(), pg.ranks.end(), r.rank);
    if (it != pg.ranks.end()) return static_cast<int>(it - pg.ranks.begin());
  }
  return -1;
}

// FunctionPattern::Key() of a function given as a view.
std::string KeyOf(const FunctionView& f) {
  std::string key = trace::EventKindName(f.kind);
  key.push_back('\x1f');
  key.append(f.name);
  key.push_back('\x1f');
  key.append(f.stack);
  return key;
}

// Open addressing (CompactJob's string and identity tables, whose default slot is a free
// one): SLOT into the first free place from HASH on; the table has one.
template <typename Slot>
void Place(std::vector<Slot>* slots, const Slot& slot, uint64_t hash) {
  const size_t mask = slots->size() - 1;
  size_t i = hash & mask;
  while ((*slots)[i].id != Slot{}.id) i = (i + 1) & mask;
  (*slots)[i] = slot;
}

// Twice the slots (1024 at first), every used one placed again by HASH_OF(slot).
template <typename Slot, typename HashOf>
void Regrow(std::vector<Slot>* slots, HashOf hash_of) {
  std::vector<Slot> old = std::move(*slots);
  slots->assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  for (const Slot& s : old) {
    if (s.id != Slot{}.id) Place(slots, s, hash_of(s));
  }
}

uint64_t IdentitySlotHash(uint32_t name, uint32_t stack, trace::EventKind kind) {
  const uint64_t h = HashMix(HashMix(0x9e3779b97f4a7c15ull, (uint64_t{name} << 32) | stack),
                             static_cast<uint64_t>(kind));
  return (h * 0xc4ceb9fe1a85ec53ull) ^ (h >> 29);
}

// Standard deviation of a function's time across the window's iterations (0: fewer than two).
float IterationSd(std::span<const float> iter_us) {
  if (iter_us.size() < 2) return 0;
  double sum = 0, sq = 0;
  for (float v : iter_us) sum += v;
  const double mean = sum / static_cast<double>(iter_us.size());
  for (float v : iter_us) sq += (v - mean) * (v - mean);
  return static_cast<float>(std::sqrt(sq / static_cast<double>(iter_us.size() - 1)));
}

// A function with fewer per-iteration values than its rank has iterations (a window's torch trace
// records only its first few: base/window_defaults.h kTorchProfilerIterations) has a noisier
// mean than the rank's own figures: its spread is scaled by sqrt(the rank's count / its own), so
// that the peer comparison, which divides a spread by the rank's iteration count
// (diagnose/peer_table.h NoiseZ), gets the standard error of the function's own mean. Unscaled, a
// clean 4-rank job's rank 0 was named a straggler at 6.1 standard errors in aten::mm, whose 4
// values (its torch trace's) held a few calls the shared host's scheduler had paused. Scaled
// here rather than a count kept beside it: CompactFunction has no room left in its 40 bytes.
void SpreadOverRankIterations(std::span<const FunctionView> fns, size_t rank_iterations,
                              CompactFunction* out) {
  for (size_t k = 0; k < fns.size(); ++k) {
    const size_t n = fns[k].iter_us.size();
    if (n >= 2 && n < rank_iterations)
      out[k].iter_sd_us *= static_cast<float>(
          std::sqrt(static_cast<double>(rank_iterations) / static_cast<double>(n)));
  }
}

// The per-iteration times of C's collectives (C->collectives, filled): kept only where every
// one of them has the same count of iterations (the window's steady ones).
void KeepCollectiveIterations(std::span<const FunctionView> fns, CompactRank* c) {
  c->iterations = 0;
  c->collective_iter_us.clear();
  if (c->collectives.empty()) return;
  const size_t n = fns[c->collectives.front().index].iter_us.size();
  if (n == 0) return;
  for (const CompactCollective& k : c->collectives)
    if (fns[k.index].iter_us.size() != n) return;
  c->collective_iter_us.reserve(n * c->collectives.size());
  for (const CompactCollective& k : c->collectives) {
    const std::span<const float> v = fns[k.index].iter_us;
    c->collective_iter_us.insert(c->collective_iter_us.end(), v.begin(), v.end());
  }
  c->iterations = static_cast<uint32_t>(n);
}

// IterationSd of every function into OUT, kChains at a time where as many in a row have as
// many iterations: each sum still adds its own values in order (the same bits as one at a
// time), but the chains of dependent additions overlap instead of waiting on each other.
void IterationSds(std::span<const FunctionView> fns, CompactFunction* out) {
  constexpr size_t kChains = 4;
  size_t k = 0;
  for (; k + kChains <= fns.size(); k += kChains) {
    const size_t n = fns[k].iter_us.size();
    bool same = n >= 2;
    for (size_t j = 1; j < kChains; ++j) same &= fns[k + j].iter_us.size() == n;
    if (!same) {
      for (size_t j = k; j < k + kChains; ++j) out[j].iter_sd_us = IterationSd(fns[j].iter_us);
      continue;
    }
    const float* v[kChains];
    for (size_t j = 0; j < kChains; ++j) v[j] = fns[k + j].iter_us.data();
    double sum[kChains] = {}, sq[kChains] = {}, mean[kChains];
    // Unrolled, so that the chains live in registers.
    for (size_t i = 0; i < n; ++i) {
#pragma GCC unroll 4
      for (size_t j = 0; j < kChains; ++j) sum[j] += v[j][i];
    }
    const double count = static_cast<double>(n);
    for (size_t j = 0; j < kChains; ++j) mean[j] = sum[j] / count;
    for (size_t i = 0; i < n; ++i) {
#pragma GCC unroll 4
      for (size_t j = 0; j < kChains; ++j) sq[j] += (v[j][i] - mean[j]) * (v[j][i] - mean[j]);
    }
    const double dof = static_cast<double>(n - 1);
    for (size_t j = 0; j < kChains; ++j) {
      out[k + j].iter_sd_us = static_cast<float>(std::sqrt(sq[j] / dof));
    }
  }
  for (; k < fns.size(); ++k) out[k].iter_sd_us = IterationSd(fns[k].iter_us);
}

}  // namespace

const FunctionInfo* CompactJob::FindFunction(std::string_view key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &infos_[it->second];
}

const std::string& CompactJob::Group(uint32_t id) const {
  static const std::string kNone;
  return id < groups_.size() ? groups_[id] : kNone;
}

const FunctionInfo* CompactJob::NewInfo(const FunctionView& f, std::string key) {
  const uint32_t id = static_cast<uint32_t>(infos_.size());
  FunctionInfo& info = infos_.emplace_back();
  info.id = id;
  info.key = std::move(key);
  info.name = f.name;
  info.kind = f.kind;
  info.fclass = f.fclass;
  info.stack = f.stack;
  by_key_.emplace(info.key, id);
  return &info;
}

const FunctionInfo* CompactJob::InternKeyed(const FunctionView& f, bool add) {
  std::string key = KeyOf(f);
  auto it = by_key_.find(std::string_view(key));
  if (it != by_key_.end()) return &infos_[it->second];
  return add ? NewInfo(f, std::move(key)) : nullptr;
}

uint32_t CompactJob::InternString(std::string_view s, uint64_t hash, bool add) {
  if (!string_slots_.empty()) {
    const size_t mask = string_slots_.size() - 1;
    for (size_t i = hash & mask; string_slots_[i].id != kFree; i = (i + 1) & mask) {
      const StringSlot& slot = string_slots_[i];
      if (slot.hash == hash && strings_[slot.id] == s) return slot.id;
    }
  }
  if (!add) return kFree;
  if ((strings_used_ + 1) * 2 > string_slots_.size()) {
    Regrow(&string_slots_, [](const StringSlot& slot) { return slot.hash; });
  }
  const uint32_t id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  Place(&string_slots_, StringSlot{hash, id}, hash);
  ++strings_used_;
  return id;
}

const FunctionInfo* CompactJob::InternIdentity(const FunctionView& f, uint32_t name, uint32_t stack,
                                               uint64_t hash, bool add) {
  if (!identity_slots_.empty()) {
    const size_t mask = identity_slots_.size() - 1;
    for (size_t i = hash & mask; identity_slots_[i].id != kFree; i = (i + 1) & mask) {
      const IdentitySlot& slot = identity_slots_[i];
      if (slot.name == name && slot.stack == stack && slot.kind == f.kind) {
        return &infos_[slot.id];
      }
    }
  }
  if (!add) return nullptr;
  if ((identities_used_ + 1) * 2 > identity_slots_.size()) {
    Regrow(&identity_slots_, [](const IdentitySlot& slot) {
      return IdentitySlotHash(slot.name, slot.stack, slot.kind);
    });
  }
  const FunctionInfo* info = NewInfo(f, KeyOf(f));
  Place(&identity_slots_, IdentitySlot{name, stack, info->id, f.kind}, hash);
  ++identities_used_;
  return info;
}

std::optional<uint32_t> CompactJob::InternGroup(std::string_view g, bool add) {
  if (g.empty()) return CompactFunction::kNoGroup;
  auto it = group_ids_.find(g);
  if (it != group_ids_.end()) return it->second;
  if (!add) return std::nullopt;
  const uint32_t id = static_cast<uint32_t>(groups_.size());
  groups_.emplace_back(g);
  group_ids_.emplace(g, id);
  return id;
}

void CompactJob::ProcessGroupKey(const trace::ProcessGroup& pg, std::string* key) {
  // Members of one group report it alike; name, description and the member list identify it.
  // The list as its runs (one for most groups): a data-parallel group of 5,000 ranks was keyed
  // by its 20 KB list, copied, hashed and compared once per rank (with the summaries' runs,
  // pattern/rank_runs.h: adding 100,000 ranks at tp=4,pp=5 took 7.1-7.5 -> 6.0 thread-seconds).
  key->assign(pg.name);
  key->push_back('\x1f');
  key->append(pg.desc);
  key->push_back('\x1f');
  key->append(pg.backend);
  key->push_back('\x1f');
  ForEachRankRun(pg.ranks, [&](const RankRun& run) {
    for (const int64_t v : {run.start, run.stride, static_cast<int64_t>(run.length)})
      key->append(reinterpret_cast<const char*>(&v), sizeof(v));
  });
}

const trace::ProcessGroup* CompactJob::InternProcessGroup(trace::ProcessGroup* pg,
                                                          std::string_view key, bool add) {
  auto it = pg_index_.find(key);
  if (it != pg_index_.end()) return it->second;
  if (!add) return nullptr;
  const trace::ProcessGroup* p = &pgs_.emplace_back(std::move(*pg));
  pg_index_.emplace(std::string(key), p);
  return p;
}

void CompactJob::Reserve(size_t n) {
  std::lock_guard<std::mutex> lock(*ranks_mu_);
  ranks_.reserve(n);
}

void CompactJob::Add(const RankSummary& r) {
  RankSummary copy = r;
  Add(std::move(copy));
}

void CompactJob::Add(RankSummary&& r) {
  std::vector<FunctionView> views;
  views.reserve(r.functions.size());
  for (const FunctionPattern& f : r.functions) views.push_back(FunctionView::Of(f));
  Add(std::move(r), views);  // reads the views (into r.functions) before dropping those
}

// A rank's names and stacks, each once (LocalString), and where its functions' are.
struct CompactJob::Prepared {
  struct LocalString {
    std::string_view s;
    uint64_t hash = 0;
    bool separator = false;  // holds Key()'s '\x1f'
  };
  std::vector<LocalString> strings;
  std::vector<uint32_t> local_of_ref;  // the summary's table index -> strings; kFree: not yet
  std::vector<uint32_t> name, stack;   // per function, in strings
  std::vector<std::string> pg_keys;    // ProcessGroupKey of each process group
  // What Resolve finds: per string its id in strings_, per process group the job's copy; and
  // per function its IdentitySlotHash.
  std::vector<uint32_t> ids;
  std::vector<uint64_t> identity_hashes;
  std::vector<const trace::ProcessGroup*> pgs;

  void Prepare(std::span<const FunctionView> fns, std::span<const std::string_view> table,
               const std::vector<trace::ProcessGroup>& groups) {
    strings.clear();
    local_of_ref.assign(table.size(), kFree);
    name.resize(fns.size());
    stack.resize(fns.size());
    for (size_t k = 0; k < fns.size(); ++k) {
      name[k] = Local(fns[k].name, fns[k].name_ref, table);
      stack[k] = Local(fns[k].stack, fns[k].stack_ref, table);
    }
    ids.resize(strings.size());
    // The process groups' keys too (a data-parallel group lists thousands of ranks).
    if (pg_keys.size() < groups.size()) pg_keys.resize(groups.size());
    for (size_t k = 0; k < groups.size(); ++k) ProcessGroupKey(groups[k], &pg_keys[k]);
    pgs.resize(groups.size());
  }

 private:
  uint32_t Local(std::string_view s, uint32_t ref, std::span<const std::string_view> table) {
    // The table's string itself (a view of its bytes), not only one equal to it.
    const bool in_table =
        ref < table.size() && table[ref].data() == s.data() && table[ref].size() == s.size();
    if (in_table && local_of_ref[ref] != kFree) return local_of_ref[ref];
    const uint32_t l = static_cast<uint32_t>(strings.size());
    strings.push_back({s, HashBytesWide(s), s.find('\x1f') != std::string_view::npos});
    if (in_table) local_of_ref[ref] = l;
    return l;
  }
};

void CompactJob::Add(RankSummary&& r, std::span<const FunctionView> functions,
                     std::span<const std::string_view> strings) {
  // Everything but finding the strings, identities and groups in the job's tables happens
  // outside its lock, the strings' hashes included.
  CompactRank c;
  c.compact.resize(functions.size());
  double gpu_us = 0;
  for (size_t k = 0; k < functions.size(); ++k) {
    const FunctionView& f = functions[k];
    CompactFunction& cf = c.compact[k];
    if (trace::IsGpuKind(f.kind) && f.device >= 0 && f.per_iter_us > gpu_us)
      c.gpu = f.device, gpu_us = f.per_iter_us;
    cf.per_iter_us = static_cast<float>(f.per_iter_us);
    cf.self_per_iter_us = static_cast<float>(f.self_per_iter_us);
    cf.calls_per_iter = static_cast<float>(f.calls_per_iter);
    cf.mean_us = static_cast<float>(f.mean_us);
    cf.cv = static_cast<float>(f.cv);
    cf.main_thread = f.main_thread;
    cf.top_level = f.top_level;
    cf.in_python = f.in_python;
    if (f.fclass == FunctionClass::kCollective) {
      c.collectives.push_back({static_cast<uint32_t>(k), static_cast<float>(f.coll_msg_bytes),
                               static_cast<float>(f.coll_busbw_gbps)});
    }
    c.has_self |= f.self_per_iter_us > 0;
    c.any_main |= f.main_thread;
    if (f.input_elements > 0 && c.shapes.size() < kMaxShapedFunctions)
      c.shapes.push_back({static_cast<uint32_t>(k), static_cast<float>(f.input_elements),
                          std::string(f.input_dims)});
  }
  IterationSds(functions, c.compact.data());
  SpreadOverRankIterations(functions, r.iteration_ms.size(), c.compact.data());
  KeepCollectiveIterations(functions, &c);
  c.role = PipelineStage(r);
  thread_local Prepared p;
  p.Prepare(functions, strings, r.process_groups);
  // Once a job has seen a few ranks, their strings, identities and groups are all known: each
  // rank finds them under the shared lock, so that loading threads do not wait on each other,
  // and only a rank that brings something new takes the lock alone.
  bool found;
  {
    std::shared_lock<std::shared_mutex> lock(*mu_);
    found = Resolve(functions, &r.process_groups, &p, c.compact, false);
  }
  if (!found) {
    std::unique_lock<std::shared_mutex> lock(*mu_);
    Resolve(functions, &r.process_groups, &p, c.compact, true);
  }
  c.groups = p.pgs;
  r.process_groups.clear();
  r.functions.clear();
  r.functions.shrink_to_fit();
  static_cast<RankSummary&>(c) = std::move(r);
  std::lock_guard<std::mutex> lock(*ranks_mu_);
  ranks_.push_back(std::move(c));
}

bool CompactJob::Resolve(std::span<const FunctionView> views,
                         std::vector<trace::ProcessGroup>* groups, Prepared* p,
                         std::span<CompactFunction> fns, bool add) {
  // The slots a rank will probe, asked for all at once: the probes then wait on memory once,
  // not once each.
  if (!string_slots_.empty()) {
    for (const Prepared::LocalString& s : p->strings) {
      __builtin_prefetch(&string_slots_[s.hash & (string_slots_.size() - 1)]);
    }
  }
  // Ids of the strings a key compares part by part; one holding the separator is left out
  // (its function is matched on its whole key).
  for (size_t l = 0; l < p->strings.size(); ++l) {
    const Prepared::LocalString& s = p->strings[l];
    if (s.separator) {
      p->ids[l] = kFree;
      continue;
    }
    p->ids[l] = InternString(s.s, s.hash, add);
    if (p->ids[l] == kFree) return false;
  }
  p->identity_hashes.resize(views.size());
  for (size_t k = 0; k < views.size(); ++k) {
    const uint32_t name = p->ids[p->name[k]], stack = p->ids[p->stack[k]];
    p->identity_hashes[k] = IdentitySlotHash(name, stack, views[k].kind);
    if (!identity_slots_.empty()) {
      __builtin_prefetch(&identity_slots_[p->identity_hashes[k] & (identity_slots_.size() - 1)]);
    }
  }
  for (size_t k = 0; k < views.size(); ++k) {
    const FunctionView& f = views[k];
    const uint32_t name = p->ids[p->name[k]], stack = p->ids[p->stack[k]];
    // Key() joins kind, name and stack with '\x1f'. Without one in name or stack, equal keys
    // mean equal parts, so those are matched part by part; a name or stack holding one could
    // make two different triples one key, so those are matched on the key itself.
    fns[k].info = name == kFree || stack == kFree
                      ? InternKeyed(f, add)
                      : InternIdentity(f, name, stack, p->identity_hashes[k], add);
    if (fns[k].info == nullptr) return false;
    if (f.fclass == FunctionClass::kCollective) {
      const std::optional<uint32_t> group = InternGroup(f.coll_group, add);
      if (!group) return false;
      fns[k].group = *group;
    }
  }
  for (size_t k = 0; k < groups->size(); ++k) {
    p->pgs[k] = InternProcessGroup(&(*groups)[k], p->pg_keys[k], add);
    if (p->pgs[k] == nullptr) return false;
  }
  return true;
}

namespace {

// Where F is among RANK's collectives, or -1.
ptrdiff_t CollectivePosition(const CompactRank& rank, const CompactFunction& f) {
  const std::less<const CompactFunction*> before;  // a total order, whichever arrays
  if (f.fclass() != FunctionClass::kCollective || before(&f, rank.compact.data()) ||
      !before(&f, rank.compact.data() + rank.compact.size())) {
    return -1;
  }
  const auto index = static_cast<uint32_t>(&f - rank.compact.data());
  auto it = std::lower_bound(rank.collectives.begin(), rank.collectives.end(), index,
                             [](const CompactCollective& c, uint32_t i) { return c.index < i; });
  return it != rank.collectives.end() && it->index == index ? it - rank.collectives.begin() : -1;
}

}  // namespace

CompactCollective CompactRank::CollectiveOf(const CompactFunction& f) const {
  const ptrdiff_t at = CollectivePosition(*this, f);
  return at < 0 ? CompactCollective{} : collectives[static_cast<size_t>(at)];
}

std::span<const float> CompactRank::CollectiveIterations(const CompactFunction& f) const {
  const ptrdiff_t at = CollectivePosition(*this, f);
  if (at < 0 || iterations == 0) return {};
  return {collective_iter_us.data() + static_cast<size_t>(at) * iterations, iterations};
}

void CompactJob::SortByRank() {
  std::sort(ranks_.begin(), ranks_.end(), [](const CompactRank& a, const CompactRank& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.source < b.source;
  });
}

}  // namespace perftracker::pattern
