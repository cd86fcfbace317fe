#include "diagnose/peer_table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/units.h"
#include "diagnose/policy.h"
#include "diagnose/what_if.h"

namespace perftracker::diagnose::internal {

using pattern::CompactFunction;
using pattern::CompactRank;
using pattern::FunctionClass;

PeerTable::PeerTable(const pattern::CompactJob& cj, const std::vector<size_t>& members,
                     const JobInfo& job, const DiagnoseOptions& o)
    : o_(o), iter_us_(MsToUs(job.iteration_ms_median)), functions_(cj.function_count()) {
  const auto& ranks = cj.ranks();
  for (size_t i : members) {
    m_.emplace_back();
    m_.back().r = &ranks[i];
  }
  BuildRows();
  CompareMembers();
}

void PeerTable::BuildRows() {
  // Function id -> row; ids are interned once per job, so no key strings are built here.
  std::vector<int32_t> row_of(functions_, -1);
  own_cpu_.assign(n(), 0);
  own_gpu_.assign(n(), 0);
  own_ops_.assign(n(), 0);
  coll_.assign(n(), 0);
  for (size_t i = 0; i < n(); ++i) {
    const CompactRank& r = *m_[i].r;
    bool has_self = r.has_self;
    for (const CompactFunction& f : r.compact) {
      int32_t& slot = row_of[f.id()];
      if (slot < 0) {
        slot = static_cast<int32_t>(rows_.size());
        rows_.emplace_back();
        Row& row = rows_.back();
        row.proto = f.info;
        row.f.assign(n(), nullptr);
        row.v.assign(n(), 0);
        row.self.assign(n(), 0);
        row.calls.assign(n(), 0);
      }
      Row& row = rows_[slot];
      double self = SelfUs(f, has_self);
      // A duplicate key within one rank (should not happen) is summed, not dropped.
      if (!row.f[i]) row.f[i] = &f;
      row.v[i] += f.per_iter_us;
      row.self[i] += self;
      row.calls[i] += f.calls_per_iter;
      bool gpu = trace::IsGpuKind(f.kind());
      // Already inside a Python frame's self time (an online window's torch.profiler op):
      // compared on its own row, not counted twice in the totals. Ranges: see IsRange.
      if (f.in_python) {
        if (!gpu && f.fclass() != FunctionClass::kCollective && !IsWait(f.fclass()) &&
            !IsRange(f.fclass()))
          own_ops_[i] += self;
        continue;
      }
      if (f.fclass() == FunctionClass::kCollective) {
        coll_[i] += CollectiveTimeUs(f, has_self);  // when it arrived: diagnose/what_if.h
      } else if (!IsWait(f.fclass())) {
        (gpu ? own_gpu_ : own_cpu_)[i] += gpu ? f.per_iter_us : self;
      }
    }
  }
  // A rank missing one part of its window (no torch.profiler trace, or no Python tracer file)
  // has no value for that part's functions, nor comparable own-work and collective totals: NaN,
  // which every comparison skips. It is compared only on what it has.
  for (size_t i = 0; i < n(); ++i) {
    const std::string& missing = m_[i].r->missing_part;
    if (missing.empty()) continue;
    const bool python_missing = missing == "python";
    const double unknown = std::numeric_limits<double>::quiet_NaN();
    for (Row& row : rows_) {
      const bool python = row.proto->kind == trace::EventKind::kPythonFunction;
      if (python == python_missing) row.v[i] = row.self[i] = row.calls[i] = unknown;
    }
    own_cpu_[i] = own_gpu_[i] = own_ops_[i] = unknown;
    if (!python_missing) coll_[i] = unknown;
  }
  for (Row& row : rows_) {
    row.ref_v = MakePeerReference(row.v);
  }
  BuildCollectiveSamples();
}

void PeerTable::BuildCollectiveSamples() {
  // Collectives of one rank are summed: their spreads add as independent variances.
  std::vector<double> var(n(), 0.0);
  for (const Row& row : rows_) {
    if (row.proto->fclass != FunctionClass::kCollective) continue;
    ThreadPeerWork().elements += n();
    for (size_t k = 0; k < n(); ++k)
      if (row.f[k]) var[k] += static_cast<double>(row.f[k]->iter_sd_us) * row.f[k]->iter_sd_us;
  }
  const double unknown = std::numeric_limits<double>::quiet_NaN();
  coll_sd_.assign(n(), 0);
  std::vector<double> sd(n()), iters(n());
  for (size_t k = 0; k < n(); ++k) {
    coll_sd_[k] = std::sqrt(var[k]);
    const bool known = !std::isnan(coll_[k]);
    sd[k] = known ? coll_sd_[k] : unknown;
    iters[k] = known ? Iterations(k) : unknown;
  }
  coll_sorted_.emplace(coll_);
  coll_sd_sorted_.emplace(sd);
  coll_iters_sorted_.emplace(iters);
}

void PeerTable::CompareMembers() {
  const PeerReference rc = MakePeerReference(own_cpu_), rg = MakePeerReference(own_gpu_),
                      ro = MakePeerReference(own_ops_), rk = MakePeerReference(coll_);
  for (size_t i = 0; i < n(); ++i) {
    Member& mb = m_[i];
    mb.own_cpu = Compare(own_cpu_, i, rc);
    mb.own_gpu = Compare(own_gpu_, i, rg);
    mb.own_ops = Compare(own_ops_, i, ro);
    mb.coll = Compare(coll_, i, rk);
    for (const Row& row : rows_) {
      PeerComparison c = Compare(row.v, i, row.ref_v);
      FunctionClass fc = row.proto->fclass;
      if (fc == FunctionClass::kCollective) {
        if (c.high) mb.high_coll.push_back({&row, c});
        if (c.low) mb.low_coll.push_back({&row, c});
      } else if (c.high) {
        (IsWait(fc) ? mb.high_wait : mb.high_own).push_back({&row, c});
      }
    }
    double best = 0;
    if (mb.own_cpu.high) best = std::max(best, mb.own_cpu.excess);
    if (mb.own_gpu.high) best = std::max(best, mb.own_gpu.excess);
    for (const auto& x : mb.high_own) {
      PeerComparison s = Compare(x.row->self, i, x.row->RefSelf());
      best = std::max(best, s.excess);
    }
    mb.excess = best;
  }
}

std::vector<size_t> PeerTable::Candidates() const {
  std::vector<size_t> cand;
  double coll_ref = Median(coll_);
  for (size_t i = 0; i < n(); ++i) {
    const Member& mb = m_[i];
    bool own = (!mb.high_own.empty() || mb.own_cpu.high || mb.own_gpu.high) && mb.excess > 0;
    bool sync_only = !own && !mb.high_wait.empty() && coll_[i] <= coll_ref;
    if (own || sync_only) cand.push_back(i);
  }
  bool has_coll = std::any_of(coll_.begin(), coll_.end(), [](double c) { return c > 0; });
  if (!has_coll || cand.size() < 2) return cand;
  double tol = policy::kWaitExplainsShare * EffectThreshold(coll_ref, iter_us_, o_);
  int best = -1;
  for (size_t i : cand)
    if (coll_[i] <= coll_ref + tol && (best < 0 || m_[i].excess > m_[best].excess))
      best = static_cast<int>(i);
  if (best < 0) return cand;
  std::vector<size_t> kept;
  for (size_t i : cand) {
    double waits_more = coll_[i] - coll_[best];
    if (static_cast<int>(i) != best &&
        waits_more > std::max(MinImpactUs(iter_us_, o_), policy::kWaitExplainsShare * m_[i].excess))
      continue;
    kept.push_back(i);
  }
  return kept;
}

double PeerTable::RowZ(const Row& row, size_t i, double excess) const {
  // O(n), once per straggler candidate that reaches its significance test.
  ThreadPeerWork().elements += n();
  std::vector<double> sd, iters;
  for (size_t k = 0; k < n(); ++k) {
    if (k == i || row.f[k] == nullptr || std::isnan(row.v[k])) continue;
    sd.push_back(row.f[k]->iter_sd_us);
    iters.push_back(Iterations(k));
  }
  const double sd_i = row.f[i] ? row.f[i]->iter_sd_us : 0;
  return NoiseZ(excess, sd_i, Iterations(i), Median(sd), Median(iters), sd.size());
}

double PeerTable::CollectiveZ(size_t i, double excess) const {
  // The peers: the members other than I whose collective time is known.
  const bool known = !std::isnan(coll_[i]);
  const size_t peers = coll_sd_sorted_->size() - (known ? 1 : 0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return NoiseZ(excess, coll_sd_[i], Iterations(i),
                coll_sd_sorted_->MedianWithout(known ? coll_sd_[i] : nan),
                coll_iters_sorted_->MedianWithout(known ? Iterations(i) : nan), peers);
}

}  // namespace perftracker::diagnose::internal
