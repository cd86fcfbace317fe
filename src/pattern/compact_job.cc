#include "pattern/compact_job.h"

#include <algorithm>
#include <cmath>

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

void KeyInto(const FunctionPattern& f, std::string* out) {
  // The same string as FunctionPattern::Key(), built into a reused buffer.
  out->assign(trace::EventKindName(f.kind));
  out->push_back('\x1f');
  out->append(f.name);
  out->push_back('\x1f');
  out->append(f.stack);
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

const FunctionInfo* CompactJob::Intern(const FunctionPattern& f, std::string* key_buf) {
  KeyInto(f, key_buf);
  auto it = by_key_.find(std::string_view(*key_buf));
  if (it != by_key_.end()) return &infos_[it->second];
  const uint32_t id = static_cast<uint32_t>(infos_.size());
  FunctionInfo& info = infos_.emplace_back();
  info.id = id;
  info.key = *key_buf;
  info.name = f.name;
  info.kind = f.kind;
  info.fclass = f.fclass;
  info.stack = f.stack;
  by_key_.emplace(info.key, id);
  return &info;
}

uint32_t CompactJob::InternGroup(const std::string& g) {
  if (g.empty()) return CompactFunction::kNoGroup;
  auto it = group_ids_.find(std::string_view(g));
  if (it != group_ids_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(groups_.size());
  groups_.push_back(g);
  group_ids_.emplace(g, id);
  return id;
}

const trace::ProcessGroup* CompactJob::InternProcessGroup(trace::ProcessGroup&& pg) {
  // Members of one group report it alike; name, description and the member list identify it.
  std::string key = pg.name + '\x1f' + pg.desc + '\x1f' + pg.backend + '\x1f';
  key.append(reinterpret_cast<const char*>(pg.ranks.data()), pg.ranks.size() * sizeof(int));
  auto it = pg_index_.find(key);
  if (it != pg_index_.end()) return it->second;
  const trace::ProcessGroup* p = &pgs_.emplace_back(std::move(pg));
  pg_index_.emplace(std::move(key), p);
  return p;
}

void CompactJob::Add(const RankSummary& r) {
  RankSummary copy = r;
  Add(std::move(copy));
}

void CompactJob::Add(RankSummary&& r) {
  // Everything but the interning happens outside the lock.
  std::vector<CompactFunction> fns(r.functions.size());
  for (size_t k = 0; k < r.functions.size(); ++k) {
    const FunctionPattern& f = r.functions[k];
    CompactFunction& c = fns[k];
    c.per_iter_us = static_cast<float>(f.per_iter_us);
    c.self_per_iter_us = static_cast<float>(f.self_per_iter_us);
    c.calls_per_iter = static_cast<float>(f.calls_per_iter);
    c.mean_us = static_cast<float>(f.mean_us);
    c.cv = static_cast<float>(f.cv);
    c.main_thread = f.main_thread;
    c.top_level = f.top_level;
    if (f.iter_us.size() >= 2) {
      double sum = 0, sq = 0;
      for (float v : f.iter_us) sum += v;
      const double mean = sum / static_cast<double>(f.iter_us.size());
      for (float v : f.iter_us) sq += (v - mean) * (v - mean);
      c.iter_sd_us = static_cast<float>(std::sqrt(sq / static_cast<double>(f.iter_us.size() - 1)));
    }
    if (f.fclass == FunctionClass::kCollective) {
      c.msg_bytes = static_cast<float>(f.coll.msg_bytes);
      c.busbw_gbps = static_cast<float>(f.coll.busbw_gbps);
    }
  }
  std::lock_guard<std::mutex> lock(*mu_);
  AddLocked(std::move(r), std::move(fns));
}

void CompactJob::AddLocked(RankSummary&& r, std::vector<CompactFunction>&& fns) {
  std::string key_buf;
  for (size_t k = 0; k < r.functions.size(); ++k) {
    const FunctionPattern& f = r.functions[k];
    fns[k].info = Intern(f, &key_buf);
    if (f.fclass == FunctionClass::kCollective) fns[k].group = InternGroup(f.coll.group);
  }
  CompactRank& c = ranks_.emplace_back();
  c.role = PipelineStage(r);
  for (const auto& f : r.functions) {
    c.has_self |= f.self_per_iter_us > 0;
    c.any_main |= f.main_thread;
  }
  for (auto& pg : r.process_groups) c.groups.push_back(InternProcessGroup(std::move(pg)));
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
