#include "pattern/merge.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "base/units.h"

namespace perftracker::pattern {

namespace {

// A secondary trace spanning less than this part of the primary's window recorded only some of
// its iterations: a window's torch.profiler stops after the first few (base/window_defaults.h
// kTorchProfilerIterations: 4 of 10, about 0.45 of the window with its slower first iteration),
// while one that recorded the whole window spans nearly all of it (it starts and stops at the
// same iteration boundaries as the Python tracer).
constexpr double kPartOfWindow = 0.75;

// The summarizer divides by one iteration when it found none (the whole window); so do we.
double Divisor(size_t iterations) { return iterations ? static_cast<double>(iterations) : 1.0; }

// How many of the primary's iterations the secondary's totals are spread over: all of them when
// it recorded the whole window; its own iterations when it recorded part of it (their means
// stand for the window's); when it found no iterations of its own, as many of the primary's
// as its span covers.
double SecondaryIterations(const RankSummary& p, const RankSummary& s) {
  const double n_primary = Divisor(p.iteration_ms.size());
  if (p.window_ms <= 0 || s.window_ms <= 0 || s.window_ms >= kPartOfWindow * p.window_ms)
    return n_primary;
  if (!s.whole_window && !s.iteration_ms.empty()) return Divisor(s.iteration_ms.size());
  return std::clamp(std::round(n_primary * s.window_ms / p.window_ms), 1.0, n_primary);
}

// Per-iteration figures from totals spread over N of the primary's iterations (there is no clock
// to cut the secondary's time by: SecondaryIterations says how many it covers).
void Rebase(FunctionPattern* f, size_t old_iterations, double n, double mean_iter_us) {
  const double old_per_iter = f->per_iter_us;
  const double old_self = f->self_per_iter_us;
  f->per_iter_us = f->total_us / n;
  f->calls_per_iter = static_cast<double>(f->count) / n;
  // Keep the function's exclusive fraction: self time was only counted inside the secondary's
  // iterations, which need not cover all of total_us.
  if (old_per_iter > 0) {
    f->self_per_iter_us = std::min(f->per_iter_us, old_self * f->per_iter_us / old_per_iter);
  } else {
    f->self_per_iter_us = old_self * Divisor(old_iterations) / n;
  }
  f->share = mean_iter_us > 0 ? f->per_iter_us / mean_iter_us : 0;
  // The per-iteration values stay, over the secondary's own iterations even when their count
  // differs (one trace left a warm-up iteration out, the other not): they are what the
  // diagnosis measures a function's noise with. Cleared, every torch function of an online
  // window had no noise, and a clean rank 6.8% slower in aten::mm for a few iterations passed
  // the significance test as if measured exactly (fresh-machine run of test_7).
}

void SumReadStats(trace::ReadStats* into, const trace::ReadStats& from) {
  into->bytes += from.bytes;
  into->events += from.events;
  into->flow_events += from.flow_events;
  into->metadata_events += from.metadata_events;
  into->unknown_kind += from.unknown_kind;
  into->malformed_events += from.malformed_events;
  for (const auto& [cat, n] : from.unknown_cats) into->unknown_cats[cat] += n;
}

// Where each of P's steady iterations is among S's steady ones, when the two traces split the
// window alike (as many iterations, counted with the ones left out) and S kept every one P
// did; empty otherwise. S's functions' per-iteration values are then P's iterations' too.
std::vector<size_t> SecondaryIndexOfPrimary(const RankSummary& p, const RankSummary& s) {
  const size_t total = p.iteration_ms.size() + p.excluded_iterations.size();
  if (total == 0 || total != s.iteration_ms.size() + s.excluded_iterations.size()) return {};
  auto left_out = [total](const RankSummary& r) {
    std::vector<bool> out(total, false);
    for (const ExcludedIteration& e : r.excluded_iterations) {
      if (e.index < 0 || static_cast<size_t>(e.index) >= total) return std::vector<bool>{};
      out[static_cast<size_t>(e.index)] = true;
    }
    return out;
  };
  const std::vector<bool> p_out = left_out(p), s_out = left_out(s);
  if (p_out.empty() || s_out.empty()) return {};
  std::vector<size_t> index;
  size_t k = 0;  // S's steady iterations so far
  for (size_t at = 0; at < total; ++at) {
    if (!p_out[at]) {
      if (s_out[at]) return {};  // P kept one S left out: its values are not in S's
      index.push_back(k);
    }
    if (!s_out[at]) ++k;
  }
  return index;
}

}  // namespace

void MergeWindowSummary(RankSummary* primary, const RankSummary& secondary) {
  RankSummary& p = *primary;
  if (p.iteration_ms.empty() && !secondary.iteration_ms.empty()) {
    // Nothing to re-base on: the secondary's iterations become the window's, and the primary's
    // own functions (counted against no iteration) are re-based on them below.
    p.iteration_source = secondary.iteration_source;
    p.whole_window = secondary.whole_window;
    p.iteration_ms = secondary.iteration_ms;
    p.iteration_steps = secondary.iteration_steps;
    if (p.window_ms <= 0) p.window_ms = secondary.window_ms;
    const double mean_us = MsToUs(p.MeanIterationMs());
    for (FunctionPattern& f : p.functions) Rebase(&f, 0, Divisor(p.iteration_ms.size()), mean_us);
  }
  const size_t n_secondary = secondary.iteration_ms.size();
  const double spread_over = SecondaryIterations(p, secondary);
  // The secondary's per-iteration values, moved onto the primary's iterations where the two
  // split the window alike (a window's torch trace leaves no warm-up out: summarizer.h).
  const std::vector<size_t> index_in_secondary = SecondaryIndexOfPrimary(p, secondary);
  const double mean_iter_us = MsToUs(p.MeanIterationMs());

  if (p.rank < 0) p.rank = secondary.rank;
  if (p.world_size < 0) p.world_size = secondary.world_size;
  if (p.host.empty()) p.host = secondary.host;
  if (p.devices.empty()) p.devices = secondary.devices;
  if (p.process_groups.empty()) p.process_groups = secondary.process_groups;

  if (!p.has_gpu && secondary.has_gpu) {
    // The secondary's GPU figures are means over its own iterations: back to window totals,
    // then over the primary's.
    const double scale = Divisor(n_secondary) / spread_over;
    p.has_gpu = true;
    p.gpu_busy_us = secondary.gpu_busy_us * scale;
    p.compute_us = secondary.compute_us * scale;
    p.comm_us = secondary.comm_us * scale;
    p.memcpy_us = secondary.memcpy_us * scale;
    p.comm_compute_overlap_us = secondary.comm_compute_overlap_us * scale;
    p.cpu_critical_us = secondary.cpu_critical_us * scale;
    // Idle is defined against the iteration time, which is the primary's now.
    p.gpu_idle_us = mean_iter_us > 0 ? std::max(0.0, mean_iter_us - p.gpu_busy_us)
                                     : secondary.gpu_idle_us * scale;
  }

  // The Python tracer follows the training thread whole: its frames' self times hold every
  // CPU op that thread ran, builtins' C calls included (<built-in method mm> holds aten::mm).
  const bool python_covers_main =
      std::any_of(p.functions.begin(), p.functions.end(), [](const FunctionPattern& f) {
        return f.kind == trace::EventKind::kPythonFunction && f.main_thread;
      });
  std::unordered_set<std::string> keys;
  keys.reserve(p.functions.size());
  for (const FunctionPattern& f : p.functions) keys.insert(f.Key());
  for (const FunctionPattern& f : secondary.functions) {
    // torch.profiler's own Python frames (with_stack, asked for to place kept memory) would
    // count the Python tracer's calls twice.
    if (python_covers_main && f.kind == trace::EventKind::kPythonFunction) continue;
    if (!keys.insert(f.Key()).second) continue;
    FunctionPattern& added = p.functions.emplace_back(f);
    Rebase(&added, n_secondary, spread_over, mean_iter_us);
    if (!index_in_secondary.empty() && f.iter_us.size() == n_secondary) {
      added.iter_us.resize(index_in_secondary.size());
      for (size_t k = 0; k < index_in_secondary.size(); ++k)
        added.iter_us[k] = f.iter_us[index_in_secondary[k]];
    }
    if (python_covers_main && f.main_thread && !trace::IsGpuKind(f.kind) &&
        f.kind != trace::EventKind::kPythonFunction)
      added.in_python = true;
  }

  SumReadStats(&p.read_stats, secondary.read_stats);
  // Memory levels are the torch trace's alone (profile_memory); kept memory may come from both:
  // the torch trace's allocator records and the Python tracer's sampled heap (Python objects).
  if (p.memory.empty()) p.memory = secondary.memory;
  p.memory_sites.insert(p.memory_sites.end(), secondary.memory_sites.begin(),
                        secondary.memory_sites.end());

  // The summarizer's order, so that merged and unmerged summaries compare alike.
  std::sort(p.functions.begin(), p.functions.end(),
            [](const FunctionPattern& a, const FunctionPattern& b) {
              if (a.per_iter_us != b.per_iter_us) return a.per_iter_us > b.per_iter_us;
              if (a.total_us != b.total_us) return a.total_us > b.total_us;
              return a.Key() < b.Key();
            });
}

}  // namespace perftracker::pattern
