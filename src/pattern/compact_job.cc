#include "pattern/compact_job.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "pattern/string_id_map.h"

namespace perftracker::pattern {
namespace {

// Position in the rank's "pp" group (Megatron order): ranks of different pipeline stages run
// different layers and are never peers, even when their function sets look alike.
int PipelineStage(const RankSummary& r) {
  for (const auto& pg : r.process_groups) {
    if (pg.name != "pp" || pg.ranks.size() < 2) continue;
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

// Standard deviation of a function's time across the window's iterations (0: fewer than two).
float IterationSd(std::span<const float> iter_us) {
  if (iter_us.size() < 2) return 0;
  double sum = 0, sq = 0;
  for (float v : iter_us) sum += v;
  const double mean = sum / static_cast<double>(iter_us.size());
  for (float v : iter_us) sq += (v - mean) * (v - mean);
  return static_cast<float>(std::sqrt(sq / static_cast<double>(iter_us.size() - 1)));
}

// IterationSd of every function into OUT, four at a time where four in a row have as many
// iterations: each sum still adds its own values in order (the same bits as one at a time),
// but four chains of dependent additions overlap instead of waiting on each other.
void IterationSds(std::span<const FunctionView> fns, CompactFunction* out) {
  size_t k = 0;
  for (; k + 4 <= fns.size(); k += 4) {
    const size_t n = fns[k].iter_us.size();
    if (n < 2 || fns[k + 1].iter_us.size() != n || fns[k + 2].iter_us.size() != n ||
        fns[k + 3].iter_us.size() != n) {
      for (size_t j = k; j < k + 4; ++j) out[j].iter_sd_us = IterationSd(fns[j].iter_us);
      continue;
    }
    const float* a = fns[k].iter_us.data();
    const float* b = fns[k + 1].iter_us.data();
    const float* c = fns[k + 2].iter_us.data();
    const float* d = fns[k + 3].iter_us.data();
    double sa = 0, sb = 0, sc = 0, sd = 0;
    for (size_t i = 0; i < n; ++i) {
      sa += a[i];
      sb += b[i];
      sc += c[i];
      sd += d[i];
    }
    const double count = static_cast<double>(n);
    const double ma = sa / count, mb = sb / count, mc = sc / count, md = sd / count;
    double qa = 0, qb = 0, qc = 0, qd = 0;
    for (size_t i = 0; i < n; ++i) {
      qa += (a[i] - ma) * (a[i] - ma);
      qb += (b[i] - mb) * (b[i] - mb);
      qc += (c[i] - mc) * (c[i] - mc);
      qd += (d[i] - md) * (d[i] - md);
    }
    const double dof = static_cast<double>(n - 1);
    out[k].iter_sd_us = static_cast<float>(std::sqrt(qa / dof));
    out[k + 1].iter_sd_us = static_cast<float>(std::sqrt(qb / dof));
    out[k + 2].iter_sd_us = static_cast<float>(std::sqrt(qc / dof));
    out[k + 3].iter_sd_us = static_cast<float>(std::sqrt(qd / dof));
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

uint64_t CompactJob::IdentityHash(const FunctionView& f) {
  // Key() joins kind, name and stack with '\x1f'. Without one in name or stack, equal keys
  // mean equal parts, so those identities are matched part by part; a name or stack that holds
  // one could make two different triples one key, so those are matched on the key itself.
  if (f.name.find('\x1f') != std::string_view::npos ||
      f.stack.find('\x1f') != std::string_view::npos) {
    return kKeyed;
  }
  const uint64_t h = HashMix(HashMix(HashBytesWide(f.name), HashBytesWide(f.stack)),
                             static_cast<uint64_t>(f.kind) + 1);
  return h == kKeyed ? 1 : h;
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

const FunctionInfo* CompactJob::InternKeyed(const FunctionView& f) {
  std::string key = KeyOf(f);
  auto it = by_key_.find(std::string_view(key));
  if (it != by_key_.end()) return &infos_[it->second];
  return NewInfo(f, std::move(key));
}

void CompactJob::GrowSlots() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.hash == kKeyed) continue;
    size_t i = s.hash & mask;
    while (slots_[i].hash != kKeyed) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

const FunctionInfo* CompactJob::Intern(const FunctionView& f, uint64_t hash) {
  if (hash == kKeyed) return InternKeyed(f);
  if (!slots_.empty()) {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask; slots_[i].hash != kKeyed; i = (i + 1) & mask) {
      if (slots_[i].hash != hash) continue;
      const FunctionInfo& info = infos_[slots_[i].id];
      if (info.kind == f.kind && info.name == f.name && info.stack == f.stack) return &info;
    }
  }
  if ((slots_used_ + 1) * 2 > slots_.size()) GrowSlots();
  const FunctionInfo* info = NewInfo(f, KeyOf(f));
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i].hash != kKeyed) i = (i + 1) & mask;
  slots_[i] = {hash, info->id};
  ++slots_used_;
  return info;
}

uint32_t CompactJob::InternGroup(std::string_view g) {
  if (g.empty()) return CompactFunction::kNoGroup;
  auto it = group_ids_.find(g);
  if (it != group_ids_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(groups_.size());
  groups_.emplace_back(g);
  group_ids_.emplace(g, id);
  return id;
}

void CompactJob::ProcessGroupKey(const trace::ProcessGroup& pg, std::string* key) {
  // Members of one group report it alike; name, description and the member list identify it.
  key->assign(pg.name);
  key->push_back('\x1f');
  key->append(pg.desc);
  key->push_back('\x1f');
  key->append(pg.backend);
  key->push_back('\x1f');
  key->append(reinterpret_cast<const char*>(pg.ranks.data()), pg.ranks.size() * sizeof(int));
}

const trace::ProcessGroup* CompactJob::InternProcessGroup(trace::ProcessGroup&& pg,
                                                          std::string_view key) {
  auto it = pg_index_.find(key);
  if (it != pg_index_.end()) return it->second;
  const trace::ProcessGroup* p = &pgs_.emplace_back(std::move(pg));
  pg_index_.emplace(std::string(key), p);
  return p;
}

void CompactJob::Reserve(size_t n) {
  std::lock_guard<std::mutex> lock(*mu_);
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

void CompactJob::Add(RankSummary&& r, std::span<const FunctionView> functions) {
  // Everything but the interning happens outside the lock, the identities' hashes included.
  std::vector<CompactFunction> fns(functions.size());
  thread_local std::vector<uint64_t> hashes;
  hashes.resize(functions.size());
  for (size_t k = 0; k < functions.size(); ++k) {
    const FunctionView& f = functions[k];
    CompactFunction& c = fns[k];
    c.per_iter_us = static_cast<float>(f.per_iter_us);
    c.self_per_iter_us = static_cast<float>(f.self_per_iter_us);
    c.calls_per_iter = static_cast<float>(f.calls_per_iter);
    c.mean_us = static_cast<float>(f.mean_us);
    c.cv = static_cast<float>(f.cv);
    c.main_thread = f.main_thread;
    c.top_level = f.top_level;
    if (f.fclass == FunctionClass::kCollective) {
      c.msg_bytes = static_cast<float>(f.coll_msg_bytes);
      c.busbw_gbps = static_cast<float>(f.coll_busbw_gbps);
    }
    hashes[k] = IdentityHash(f);
  }
  IterationSds(functions, fns.data());
  // The process groups' keys too (a data-parallel group lists thousands of ranks).
  thread_local std::vector<std::string> pg_keys;
  if (pg_keys.size() < r.process_groups.size()) pg_keys.resize(r.process_groups.size());
  for (size_t k = 0; k < r.process_groups.size(); ++k) {
    ProcessGroupKey(r.process_groups[k], &pg_keys[k]);
  }
  std::lock_guard<std::mutex> lock(*mu_);
  AddLocked(std::move(r), functions, hashes, pg_keys, std::move(fns));
}

void CompactJob::AddLocked(RankSummary&& r, std::span<const FunctionView> views,
                           std::span<const uint64_t> hashes,
                           std::span<const std::string> pg_keys,
                           std::vector<CompactFunction>&& fns) {
  CompactRank& c = ranks_.emplace_back();
  for (size_t k = 0; k < views.size(); ++k) {
    const FunctionView& f = views[k];
    fns[k].info = Intern(f, hashes[k]);
    if (f.fclass == FunctionClass::kCollective) fns[k].group = InternGroup(f.coll_group);
    c.has_self |= f.self_per_iter_us > 0;
    c.any_main |= f.main_thread;
  }
  c.role = PipelineStage(r);
  for (size_t k = 0; k < r.process_groups.size(); ++k) {
    c.groups.push_back(InternProcessGroup(std::move(r.process_groups[k]), pg_keys[k]));
  }
  r.process_groups.clear();
  r.functions.clear();
  r.functions.shrink_to_fit();
  static_cast<RankSummary&>(c) = std::move(r);
  c.compact = std::move(fns);
}

void CompactJob::SortByRank() {
  std::sort(ranks_.begin(), ranks_.end(), [](const CompactRank& a, const CompactRank& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.source < b.source;
  });
}

}  // namespace perftracker::pattern
