#include "pattern/iteration_breakdown.h"

#include <algorithm>
#include <limits>

#include "pattern/steady_state.h"

namespace perftracker::pattern {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void MergeLanes(IterLanes* d) {
  MergeIntervals(&d->busy);
  MergeIntervals(&d->compute);
  MergeIntervals(&d->comm);
  MergeIntervals(&d->copy);
}

void Append(const std::vector<Interval>& from, std::vector<Interval>* to) {
  to->insert(to->end(), from.begin(), from.end());
}

}  // namespace

void IterLanes::Add(const Interval& iv, FunctionClass fclass) {
  busy.push_back(iv);
  if (fclass == FunctionClass::kCollective) {
    comm.push_back(iv);
  } else if (fclass == FunctionClass::kMemcpy) {
    copy.push_back(iv);
  } else {
    compute.push_back(iv);
  }
}

std::vector<size_t> SplitSteadyIterations(const std::vector<double>& all_ms,
                                          const std::vector<int64_t>& steps, bool whole_window,
                                          bool warmup, RankSummary* s) {
  const size_t n = all_ms.size();
  std::vector<IterationClass> cls(n, IterationClass::kSteady);
  if (!whole_window) cls = ClassifyIterations(all_ms);
  if (!warmup)
    std::replace(cls.begin(), cls.end(), IterationClass::kWarmup, IterationClass::kSteady);
  std::vector<size_t> steady;
  for (size_t i = 0; i < n; ++i) {
    if (cls[i] == IterationClass::kSteady) {
      steady.push_back(i);
      s->iteration_ms.push_back(all_ms[i]);
      if (i < steps.size()) s->iteration_steps.push_back(steps[i]);
      continue;
    }
    ExcludedIteration e;
    e.reason = cls[i] == IterationClass::kWarmup ? ExcludedIteration::kWarmup
                                                 : ExcludedIteration::kPartial;
    e.step = i < steps.size() ? steps[i] : -1;
    e.index = static_cast<int32_t>(i);
    e.ms = all_ms[i];
    s->excluded_iterations.push_back(e);
  }
  return steady;
}

LaneTotals SumDeviceLanes(std::vector<IterLanes>* iterations, const std::vector<size_t>& steady) {
  std::vector<IterLanes>& its = *iterations;
  const size_t n = its.size();
  std::vector<double> first_start(n, kInf), last_end(n, -kInf);
  for (size_t i = 0; i < n; ++i) {
    IterLanes& d = its[i];
    MergeLanes(&d);
    if (!d.busy.empty()) {
      first_start[i] = d.busy.front().begin;
      last_end[i] = d.busy.back().end;
    }
  }
  IterLanes u;
  std::vector<Interval> spans;
  for (size_t i : steady) {
    const IterLanes& d = its[i];
    if (d.busy.empty()) continue;
    double span_end = last_end[i];
    for (size_t j = i + 1; j < n; ++j) {
      if (first_start[j] < kInf) {
        span_end = std::max(last_end[i], first_start[j]);
        break;
      }
    }
    spans.push_back({first_start[i], span_end});
    Append(d.busy, &u.busy);
    Append(d.compute, &u.compute);
    Append(d.comm, &u.comm);
    Append(d.copy, &u.copy);
  }
  MergeIntervals(&spans);
  MergeLanes(&u);
  LaneTotals t;
  t.busy = CoveredIn(u.busy, -kInf, kInf);
  t.idle = std::max(0.0, CoveredIn(spans, -kInf, kInf) - t.busy);
  t.compute = CoveredIn(u.compute, -kInf, kInf);
  t.comm = CoveredIn(u.comm, -kInf, kInf);
  t.copy = CoveredIn(u.copy, -kInf, kInf);
  t.overlap = CoveredIn(IntersectIntervals(u.comm, u.compute), -kInf, kInf);
  t.busy_intervals = std::move(u.busy);
  return t;
}

GpuBreakdown BreakDownGpu(DeviceLanes* lanes, const std::vector<size_t>& steady) {
  double busy = 0, idle = 0, compute = 0, comm = 0, copy = 0, overlap = 0;
  GpuBreakdown out;
  for (auto& [dev, its] : *lanes) {
    const LaneTotals t = SumDeviceLanes(&its, steady);
    busy += t.busy;
    idle += t.idle;
    compute += t.compute;
    comm += t.comm;
    copy += t.copy;
    overlap += t.overlap;
    Append(t.busy_intervals, &out.all_busy);
  }
  const double div = static_cast<double>(steady.size() * lanes->size());
  out.busy_us = busy / div;
  out.idle_us = idle / div;
  out.compute_us = compute / div;
  out.comm_us = comm / div;
  out.memcpy_us = copy / div;
  out.overlap_us = overlap / div;
  MergeIntervals(&out.all_busy);
  return out;
}

double CpuCriticalUs(const std::vector<Interval>& main_top, const std::vector<Interval>& all_busy,
                     const std::vector<size_t>& steady, const std::vector<double>& it_start,
                     const std::vector<double>& it_end) {
  const std::vector<Interval> cpu_and_gpu = IntersectIntervals(main_top, all_busy);
  double critical = 0;
  for (size_t i : steady) {
    critical += CoveredIn(main_top, it_start[i], it_end[i]) -
                CoveredIn(cpu_and_gpu, it_start[i], it_end[i]);
  }
  return std::max(0.0, critical / static_cast<double>(steady.size()));
}

}  // namespace perftracker::pattern
