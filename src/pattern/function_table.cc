#include "pattern/function_table.h"

#include <algorithm>
#include <cmath>

#include "pattern/names.h"

namespace perftracker::pattern {

using trace::Event;
using trace::EventKind;

uint32_t Interner::Intern(std::string_view s) {
  if (const StringIdMap::Entry* e = map_.Find(s)) return e->id;
  strings_.emplace_back(s);
  const auto id = static_cast<uint32_t>(strings_.size() - 1);
  map_.Insert(strings_.back(), id);
  return id;
}

uint32_t FunctionTable::Intern(EventKind kind, uint32_t name_id, uint32_t stack_id) {
  const uint64_t key = static_cast<uint64_t>(kind) | (static_cast<uint64_t>(name_id) << 8) |
                       (static_cast<uint64_t>(stack_id) << 36);
  auto [it, inserted] = fn_index_.try_emplace(key, static_cast<uint32_t>(fns_.size()));
  if (inserted) {
    FnAcc& f = fns_.emplace_back();
    f.name_id = name_id;
    f.stack_id = stack_id;
    f.kind = kind;
    f.fclass = kind == EventKind::kPythonFunction
                   ? ClassifyPythonFunction(names_.Get(name_id), stacks_.Get(stack_id))
                   : ClassifyFunction(kind, names_.Get(name_id));
  }
  return it->second;
}

uint32_t FunctionTable::OfNewRawName(std::string_view name, EventKind kind) {
  LastFn& last = last_fn_[static_cast<size_t>(kind)];
  StringIdMap& map = raw_fns_[static_cast<size_t>(kind)];
  if (const StringIdMap::Entry* e = map.Find(name)) {
    last = {e->key(), e->id, true};
    return e->id;
  }
  const uint32_t fn = Intern(kind, NameId(name, kind), 0);
  if (raw_fn_store_.size() < kMaxRawNames) {
    raw_fn_store_.emplace_back(name);
    map.Insert(raw_fn_store_.back(), fn);
    last = {raw_fn_store_.back(), fn, true};
  }
  return fn;
}

uint32_t FunctionTable::NameId(std::string_view name, EventKind kind) {
  RawNameCache& cache = kind == EventKind::kKernel ? raw_kernel_names_ : raw_other_names_;
  if (const StringIdMap::Entry* e = cache.map.Find(name)) return e->id;
  NormalizeNameInto(name, kind, &norm_buf_);
  const uint32_t id = names_.Intern(norm_buf_);
  if (cache.map.size() < kMaxRawNames) {
    cache.store.emplace_back(name);
    cache.map.Insert(cache.store.back(), id);
  }
  return id;
}

uint32_t FunctionTable::CallStackId(std::string_view raw) {
  const uint32_t rid = raw_call_stacks_.Intern(raw);
  if (rid < raw_call_stack_to_stack_.size()) return raw_call_stack_to_stack_[rid];
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
  raw_call_stack_to_stack_.resize(rid + 1, 0);
  raw_call_stack_to_stack_[rid] = stacks_.Intern(stack);
  return raw_call_stack_to_stack_[rid];
}

uint32_t FunctionTable::ChildStack(uint32_t stack_id, uint32_t name_id) {
  std::string s = stacks_.Get(stack_id);
  if (!s.empty()) s.push_back(';');
  s += names_.Get(name_id);
  return stacks_.Intern(s);
}

uint32_t FunctionTable::OfCommsRecord(EventKind kind, std::string_view collective_name,
                                      uint32_t stack_id) {
  norm_buf_.assign("record_param_comms:");
  norm_buf_ += CollectiveOp(collective_name);
  return Intern(kind, names_.Intern(norm_buf_), stack_id);
}

void FunctionTable::AddCall(uint32_t fn, double dur, int iter, int64_t tid) {
  FnAcc& f = fns_[fn];
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
      f.iter_us.assign(iterations_, 0.0);
      f.iter_calls.assign(iterations_, 0);
    }
    f.iter_us[static_cast<size_t>(iter)] += dur;
    ++f.iter_calls[static_cast<size_t>(iter)];
  }
  if (tid != kNoThread) {
    auto it = std::find_if(f.thread_us.begin(), f.thread_us.end(),
                           [tid](const auto& p) { return p.first == tid; });
    if (it == f.thread_us.end()) {
      f.thread_us.emplace_back(tid, dur);
    } else {
      it->second += dur;
    }
  }
}

void FunctionTable::AddSelf(uint32_t fn, int iter, double self_us) {
  if (iter < 0) return;
  FnAcc& f = fns_[fn];
  if (f.iter_self.empty()) f.iter_self.assign(iterations_, 0.0);
  f.iter_self[static_cast<size_t>(iter)] += self_us;
}

CollArgs FunctionTable::CollArgsOf(const Event& e) {
  CollArgs a;
  const int64_t nelems = std::max(e.in_msg_nelems, e.out_msg_nelems);
  const int dsz = DtypeBytes(e.dtype);
  // max(in, out) is the nccl-tests "size": the full buffer for all_gather / reduce_scatter, the
  // one buffer for the others.
  if (nelems >= 0 && dsz > 0) a.bytes = static_cast<double>(nelems) * dsz;
  a.group_size = e.group_size;
  a.group_id = misc_.Intern(!e.pg_ranks.empty() ? e.pg_ranks : e.pg_name);
  a.dtype_id = misc_.Intern(e.dtype);
  if (!e.collective_name.empty()) a.op_id = misc_.Intern(CollectiveOp(e.collective_name));
  return a;
}

void FunctionTable::AddColl(uint32_t fn, const CollArgs& a) {
  FnAcc& f = fns_[fn];
  if (a.bytes >= 0) {
    f.coll_bytes += a.bytes;
    ++f.coll_bytes_n;
  }
  if (a.group_size > 0) f.group_size = a.group_size;
  if (a.group_id != 0) f.group_id = a.group_id;
  if (a.dtype_id != 0) f.dtype_id = a.dtype_id;
  if (a.op_id != 0 && !misc_.Get(a.op_id).empty()) f.op_id = a.op_id;
}

void FunctionTable::AddShapes(uint32_t fn, std::string_view raw, double dur_us) {
  if (const InputDimsCache::Parsed* d = dims_.Find(raw)) {
    fns_[fn].shapes.Add(d->text, d->elements, dur_us);
  }
}

CollectiveInfo FunctionTable::CollectiveOf(const FnAcc& f, const FunctionPattern& p,
                                           const trace::TraceMeta& meta) const {
  CollectiveInfo c;
  c.op = f.op_id != 0 ? misc_.Get(f.op_id) : CollectiveOp(p.name);
  c.msg_bytes = f.coll_bytes_n ? f.coll_bytes / static_cast<double>(f.coll_bytes_n) : 0;
  c.dtype = misc_.Get(f.dtype_id);
  c.group_size = f.group_size;
  c.group = misc_.Get(f.group_id);
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

// Per-iteration values are means over the steady iterations (mean_iter_us: their mean length).
FunctionPattern FunctionTable::PatternOf(const FnAcc& f, const PatternInput& in) const {
  const std::vector<size_t>& steady = *in.steady;
  const size_t ns = steady.size();
  const double dn = ns ? static_cast<double>(ns) : 1.0;
  FunctionPattern p;
  p.name = names_.Get(f.name_id);
  p.kind = f.kind;
  p.fclass = f.fclass;
  p.stack = stacks_.Get(f.stack_id);
  p.device = f.device;
  p.stream = f.stream;
  const bool gpu_side = IsGpuEventKind(f.kind);
  if (!gpu_side && in.main_tid != kNoThread) {
    for (const auto& [tid, us] : f.thread_us) {
      if (tid == in.main_tid && 2 * us >= f.total) p.main_thread = true;
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
  p.share = in.mean_iter_us > 0 ? p.per_iter_us / in.mean_iter_us : 0;
  p.self_per_iter_us = self / dn;
  if (f.fclass == FunctionClass::kCollective) p.coll = CollectiveOf(f, p, *in.meta);
  if (f.shapes.calls() > 0) {
    p.input_elements = f.shapes.MeanElements();
    p.input_dims = dims_.Text(f.shapes.Costliest());
  }
  return p;
}

std::vector<FunctionPattern> FunctionTable::Patterns(const PatternInput& in) const {
  std::vector<FunctionPattern> out;
  out.reserve(fns_.size());
  for (const FnAcc& f : fns_) {
    if (f.count == 0) continue;
    out.push_back(PatternOf(f, in));
  }
  std::sort(out.begin(), out.end(), [](const FunctionPattern& a, const FunctionPattern& b) {
    if (a.per_iter_us != b.per_iter_us) return a.per_iter_us > b.per_iter_us;
    if (a.total_us != b.total_us) return a.total_us > b.total_us;
    return a.Key() < b.Key();
  });
  return out;
}

}  // namespace perftracker::pattern
