#include "diagnose/memory_growth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <span>

#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

std::string MemoryBytes(double b) {
  return std::abs(b) >= 1024 * kMiB ? fmt::format("{:.1f} GiB", b / (1024 * kMiB))
                                    : fmt::format("{:.1f} MiB", b / kMiB);
}

std::string MemoryGrowthSuggestion(bool gpu) {
  return gpu ? "find which CUDA tensors the training loop keeps each iteration (outputs or losses "
               "kept with their graphs: store loss.item() or .detach(); caches of activations): "
               "torch.cuda.memory._record_memory_history() then torch.cuda.memory._snapshot() "
               "name the allocations that stay, with their stacks"
             : "find what the training loop keeps each iteration: tensors appended to a list "
               "(losses or outputs kept with their graphs: store loss.item() or .detach()), "
               "caches without a bound, growing histories or metrics; tracemalloc or "
               "torch.cuda.memory_snapshot() show where";
}

void MemorySeries::Profiled(int64_t first, int64_t last) {
  if (last < first) return;
  if (profiled_.size() >= kMaxProfiled) profiled_.erase(profiled_.begin());
  profiled_.emplace_back(first, last);
}

bool MemorySeries::InProfiledSpan(int64_t step) const {
  const auto settle = static_cast<int64_t>(policy::kMemoryProfileSettleIterations);
  return std::any_of(profiled_.begin(), profiled_.end(),
                     [&](const auto& w) { return step >= w.first && step <= w.second + settle; });
}

bool MemorySeries::WindowSince(int64_t step) const {
  if (samples_.empty()) return false;
  const int64_t back = samples_.back().step;
  return std::any_of(profiled_.begin(), profiled_.end(),
                     [&](const auto& w) { return w.first > back && w.second < step; });
}

namespace {

// The growth rates (bytes per iteration) of the intervals between S[FROM..TO).
std::vector<double> Rates(const std::vector<MemorySeries::Sample>& s, size_t from, size_t to) {
  std::vector<double> rates;
  for (size_t i = from + 1; i < to; ++i)
    rates.push_back((s[i].bytes - s[i - 1].bytes) / static_cast<double>(s[i].step - s[i - 1].step));
  return rates;
}
double MedianRate(const std::vector<MemorySeries::Sample>& s, size_t from, size_t to) {
  std::vector<double> rates = Rates(s, from, to);
  return rates.empty() ? 0.0 : Median(std::move(rates));
}

}  // namespace

MemorySeries::Join MemorySeries::JoinAfterWindow(int64_t step, double bytes) const {
  const Sample& back = samples_.back();
  // The rate before: of the last few kept samples' intervals (a leak's, or a flat rank's zero).
  const size_t from = samples_.size() > kRateIntervals ? samples_.size() - 1 - kRateIntervals : 0;
  Join j;
  j.first_after = step;
  j.gap = step - back.step;
  j.rate_before = std::max(0.0, MedianRate(samples_, from, samples_.size()));
  const double expected = j.rate_before * static_cast<double>(j.gap);
  j.profiler = std::max(0.0, (bytes - offset_ - back.bytes) - expected);
  return j;
}

void MemorySeries::Resettle(bool final) {
  if (!pending_) return;
  Join& j = *pending_;
  const auto first = static_cast<size_t>(
      std::lower_bound(samples_.begin(), samples_.end(), j.first_after,
                       [](const Sample& x, int64_t step) { return x.step < step; }) -
      samples_.begin());
  if (first < samples_.size() && samples_.size() - first > kRateIntervals) {
    // Until it is settled, the least of the intervals after: a leak grows in every one of them,
    // a sawtooth's highs (a cache filled and emptied, sampled by time) fall in some, and a
    // give-back on a median of three of them named such a rank a leak in 3 of 5 runs
    // (bench/memory_detection.py --sawtooth 5). Settled: their median, as a profiler's late
    // creep of a MiB is one interval.
    const std::vector<double> rates = Rates(samples_, first, samples_.size());
    const double rate_after = final ? Median(rates) : *std::min_element(rates.begin(), rates.end());
    // The job's growth through the gap at the rate after, less what the join already counted,
    // and never more than it took off as the profiler's.
    const double target =
        rate_after > j.rate_before
            ? std::min(j.profiler, (rate_after - j.rate_before) * static_cast<double>(j.gap))
            : 0.0;
    const double back = target - j.returned;
    for (size_t i = first; i < samples_.size(); ++i) {
      samples_[i].bytes += back;
      samples_[i].low += static_cast<float>(back);
    }
    offset_ -= back;
    j.returned = target;
  }
  if (final) pending_.reset();
}

void MemorySeries::Add(int64_t step, double bytes, double low) {
  if (!std::isfinite(bytes) || bytes < 0) return;
  if (!std::isfinite(low) || low < 0 || low > bytes) low = bytes;
  if (!samples_.empty() && step <= samples_.back().step) {
    if (step == samples_.back().step) {
      // The newer reading of the same iteration.
      samples_.back().bytes = bytes - offset_;
      samples_.back().rss = static_cast<float>(bytes);
      samples_.back().low =
          std::min(samples_.back().low, static_cast<float>(std::max(0.0, low - offset_)));
      return;
    }
    samples_.clear();  // a restarted process: its memory starts again
    profiled_.clear();
    pending_.reset();
    offset_ = 0;
    stride_ = 1;
  }
  if (InProfiledSpan(step)) return;
  // The first sample after a window joins the levels and is kept whatever the stride: the next
  // one must not count the same window again.
  const bool after_window = WindowSince(step);
  if (after_window) {
    Resettle(true);  // a window before the last one settles with the rate measured so far
    pending_ = JoinAfterWindow(step, bytes);
    offset_ += pending_->profiler;
  }
  const float own_low = static_cast<float>(std::max(0.0, low - offset_));
  if (!after_window && !samples_.empty() && step - samples_.back().step < stride_) {
    // Skipped, its low still counts: the kept sample after it covers its interval.
    skipped_low_ = std::min(skipped_low_, own_low);
    return;
  }
  if (samples_.size() >= kMaxSamples) {
    // Every other sample goes (the first stays: the warm-up is measured from it); a kept
    // sample's low covers the one that went before it.
    size_t out = 1;
    for (size_t i = 2; i < samples_.size(); i += 2) {
      samples_[i].low = std::min(samples_[i].low, samples_[i - 1].low);
      samples_[out++] = samples_[i];
    }
    samples_.resize(out);
    stride_ *= 2;
    if (!after_window && step - samples_.back().step < stride_) {
      skipped_low_ = std::min(skipped_low_, own_low);
      return;
    }
  }
  samples_.push_back({step, bytes - offset_, static_cast<float>(bytes),
                      after_window ? own_low : std::min(own_low, skipped_low_)});
  skipped_low_ = std::numeric_limits<float>::infinity();
  if (pending_) {
    const bool settled =
        samples_.size() > kSettledIntervals &&
        samples_[samples_.size() - 1 - kSettledIntervals].step >= pending_->first_after;
    Resettle(settled);
  }
}

namespace {

using Sample = MemorySeries::Sample;

// Sums of a series for least squares over any head or tail in O(1): the slope of the tail s[i..]
// and how well "flat before i, a line from i" fits the whole (the sum of squared residuals).
// Steps are counted from the first sample and bytes in MiB, so that the sums stay small.
class SplitFit {
 public:
  explicit SplitFit(const std::vector<Sample>& s)
      : s_(s), suffix_(s.size() + 1), prefix_(s.size() + 1) {
    for (size_t i = s.size(); i-- > 0;) suffix_[i] = suffix_[i + 1].Plus(X(i), Y(i));
    for (size_t i = 0; i < s.size(); ++i) prefix_[i + 1] = prefix_[i].Plus(X(i), Y(i));
  }
  // The slope of s[i..] in bytes per iteration (NaN: fewer than two distinct steps).
  double Slope(size_t i) const {
    const Sums& t = suffix_[i];
    const double sxx = t.xx - t.x * t.x / t.n;
    return sxx > 0 ? (t.xy - t.x * t.y / t.n) / sxx * kUnit : std::nan("");
  }
  // Squared residuals of the mean over s[..i) and of the line over s[i..] (MiB^2).
  double SplitResidual(size_t i) const {
    const Sums& h = prefix_[i];
    const Sums& t = suffix_[i];
    const double flat = h.n > 0 ? h.yy - h.y * h.y / h.n : 0;
    const double sxx = t.xx - t.x * t.x / t.n, sxy = t.xy - t.x * t.y / t.n;
    const double line = t.yy - t.y * t.y / t.n - (sxx > 0 ? sxy * sxy / sxx : 0);
    return flat + line;
  }

 private:
  static constexpr double kUnit = 1024.0 * 1024.0;  // bytes in the sums' unit
  struct Sums {
    double n = 0, x = 0, y = 0, xy = 0, xx = 0, yy = 0;
    Sums Plus(double px, double py) const {
      return {n + 1, x + px, y + py, xy + px * py, xx + px * px, yy + py * py};
    }
  };
  double X(size_t i) const { return static_cast<double>(s_[i].step - s_[0].step); }
  double Y(size_t i) const { return s_[i].bytes / kUnit; }
  const std::vector<Sample>& s_;
  std::vector<Sums> suffix_, prefix_;
};

// Whether the tail S[I..] (its slope SLOPE) is a leak by the policy: enough iterations and
// growth, each half growing, most intervals rising, and above every level the rank held before
// the tail by a good share of the range it moved in (PEAK_BEFORE and TROUGH_BEFORE; -1: none).
// Fills G.
bool TailIsLeak(const std::vector<Sample>& s, size_t i, double slope, double peak_before,
                double trough_before, MemoryGrowth* g) {
  // A view, not a copy: the tails of a growing rank are tested one after another.
  const std::span<const Sample> tail(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
  if (tail.size() < 3 || !(slope > 0)) return false;
  g->first_step = tail.front().step;
  g->last_step = tail.back().step;
  g->first_bytes = tail.front().bytes;
  g->last_bytes = tail.back().bytes;
  g->first_rss = static_cast<double>(tail.front().rss);
  g->last_rss = static_cast<double>(tail.back().rss);
  const double span = static_cast<double>(g->last_step - g->first_step);
  if (span < policy::kMemoryMinIterations) return false;
  g->bytes_per_iteration = slope;
  g->grown_bytes = slope * span;
  if (g->grown_bytes < policy::kMemoryMinGrowthBytes ||
      g->last_bytes - g->first_bytes < policy::kMemoryMinGrowthBytes / 2)
    return false;
  // A sawtooth (a cache filled and emptied, an evaluation's buffers freed) climbs back to levels
  // it held before; a leak takes memory the rank never held.
  // Sampled by time, a sawtooth aliases into slow ramps whose highs creep up on its true peak: a
  // leak also leaves the range the rank moved in before the tail well behind.
  if (peak_before >= 0 && g->last_bytes - peak_before < std::max(policy::kMemoryMinGrowthBytes / 2,
                                                                 policy::kMemoryAboveRangeShare *
                                                                     (peak_before - trough_before)))
    return false;
  // A leak outgrows the range the job's memory moves in by itself between two reports (the high
  // of a sample less its low since the one before): a sawtooth's allocator may keep what it
  // frees for a while, and its highs creep up by less than its depth.
  double swing = 0;
  for (size_t k = 1; k < tail.size(); ++k)
    swing = std::max(swing, tail[k].bytes - static_cast<double>(tail[k].low));
  if (g->last_bytes - g->first_bytes < policy::kMemoryOutgrowSwing * swing) return false;
  // A leak grows alike throughout; a warm-up ramp or a profiling window's buffers (measured: a
  // healthy rank's RSS steps up 27 MiB in its baseline window and then creeps by a MiB) grow in
  // one part. Each half of the span must grow at a good share of the overall rate.
  const int64_t mid = g->first_step + (g->last_step - g->first_step) / 2;
  auto half_rate = [&](bool first) {
    const Sample* a = nullptr;
    const Sample* z = nullptr;
    for (const auto& x : tail) {
      if (first ? x.step > mid : x.step < mid) continue;
      if (a == nullptr) a = &x;
      z = &x;
    }
    if (a == nullptr || z == a) return 0.0;
    return (z->bytes - a->bytes) / static_cast<double>(z->step - a->step);
  };
  const double floor = slope * policy::kMemoryHalvesShare;
  if (half_rate(true) < floor || half_rate(false) < floor) return false;
  // Rises of a good part of what the rate gives the interval; a page more is no rise.
  int up = 0;
  for (size_t k = 1; k < tail.size(); ++k) {
    const double expected = slope * static_cast<double>(tail[k].step - tail[k - 1].step);
    if (tail[k].bytes - tail[k - 1].bytes >= expected * policy::kMemoryRiseOfExpected) ++up;
  }
  g->rising_share = static_cast<double>(up) / static_cast<double>(tail.size() - 1);
  return g->rising_share >= policy::kMemoryRisingShare;
}

// What rank R's GPU series may still grow by (bytes; -1: unknown): its GPU's free memory, and
// where the series is PyTorch's allocated bytes (LAST_ALLOCATED the newest), the memory its
// caching allocator reserved and does not use, which it hands out before asking the driver.
double GpuHeadroom(const RankMemory& r, double last_allocated) {
  if (r.gpu_free_bytes < 0) return -1;
  if (r.cuda_reserved_bytes < 0) return r.gpu_free_bytes;
  return r.gpu_free_bytes + std::max(r.cuda_reserved_bytes - last_allocated, 0.0);
}

}  // namespace

std::optional<MemoryGrowth> FindMemoryGrowth(const MemorySeries& series) {
  const std::vector<Sample>& all = series.samples();
  if (all.size() < 3) return std::nullopt;
  const int64_t start = all.front().step + static_cast<int64_t>(policy::kMemoryWarmupIterations);
  std::vector<Sample> s;
  for (const auto& x : all)
    if (x.step >= start) s.push_back(x);
  if (s.size() < 3) return std::nullopt;
  // A leak may begin at any time: every tail of the series (to its last sample) that grows
  // steadily is one. Of those, the one where "flat before, a line after" fits best says where it
  // began and at what rate (the earliest would count a flat stretch before it). A tail's slope
  // costs O(1), and a flat rank's tails fail on their growth before anything else is looked at:
  // O(n) for a healthy rank, O(n^2) (n <= kMaxSamples) only for one whose memory grows.
  const SplitFit fit(s);
  double peak_before = -1, trough_before = -1;
  std::optional<MemoryGrowth> best;
  double best_residual = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i + 2 < s.size(); ++i) {
    if (static_cast<double>(s.back().step - s[i].step) < policy::kMemoryMinIterations) break;
    const double slope = fit.Slope(i);
    MemoryGrowth g;
    if (slope * static_cast<double>(s.back().step - s[i].step) >= policy::kMemoryMinGrowthBytes &&
        TailIsLeak(s, i, slope, peak_before, trough_before, &g)) {
      const double residual = fit.SplitResidual(i);
      if (residual < best_residual) {
        best_residual = residual;
        best = g;
      }
    }
    peak_before = std::max(peak_before, s[i].bytes);
    // The range it moved in: its highs, and its lows between reports where the agent read them.
    const double low = std::min(s[i].bytes, static_cast<double>(s[i].low));
    trough_before = trough_before < 0 ? low : std::min(trough_before, low);
  }
  return best;
}

std::vector<Finding> MemoryGrowthFindings(const std::vector<RankMemory>& ranks,
                                          const std::map<std::string, HostMemoryState>& hosts,
                                          double iteration_ms, MemoryKind kind) {
  const bool gpu = kind == MemoryKind::kGpu;
  struct Growing {
    const RankMemory* rank;
    MemoryGrowth growth;
  };
  std::vector<Growing> growing;
  size_t with_series = 0;
  for (const RankMemory& r : ranks) {
    if (r.series == nullptr || r.series->samples().empty()) continue;
    ++with_series;
    if (auto g = FindMemoryGrowth(*r.series)) growing.push_back({&r, *g});
  }
  if (growing.empty()) return {};
  // Iterations left per host: its available memory over what its growing ranks take together.
  std::map<std::string, double> host_rate;
  for (const Growing& g : growing) host_rate[g.rank->host] += g.growth.bytes_per_iteration;
  double left = std::numeric_limits<double>::infinity();
  std::string limit_text;  // "host a's 1.0 GiB available", "rank 1's cgroup limit of 600 MiB"
  const char* limit_key = "host_available_bytes";  // or cgroup_headroom_bytes
  double limit_bytes = -1;
  for (const auto& [host, rate] : host_rate) {
    if (gpu) break;  // a GPU's memory is its own, whatever its host has
    auto h = hosts.find(host);
    if (h == hosts.end() || h->second.available_bytes < 0 || rate <= 0) continue;
    const double n = h->second.available_bytes / rate;
    if (n < left) {
      left = n;
      limit_bytes = h->second.available_bytes;
      limit_text = fmt::format("host {}'s {} available", host, MemoryBytes(limit_bytes));
    }
  }
  for (const Growing& g : growing) {
    const RankMemory& r = *g.rank;
    const double headroom = gpu ? GpuHeadroom(r, g.growth.last_rss) : r.cgroup_headroom_bytes;
    if (headroom < 0 || g.growth.bytes_per_iteration <= 0) continue;
    const double n = headroom / g.growth.bytes_per_iteration;
    if (n < left) {
      left = n;
      limit_bytes = headroom;
      limit_key = gpu ? "gpu_free_bytes" : "cgroup_headroom_bytes";
      limit_text =
          gpu ? fmt::format("the {} free on rank {}'s GPU{} (of {})", MemoryBytes(headroom), r.rank,
                            r.gpu >= 0 ? fmt::format(" {}", r.gpu) : "",
                            MemoryBytes(r.gpu_total_bytes))
              : fmt::format("the {} left under rank {}'s memory cgroup limit of {}",
                            MemoryBytes(headroom), r.rank, MemoryBytes(r.cgroup_limit_bytes));
    }
  }
  Finding f;
  f.finding_class =
      growing.size() == with_series && with_series > 1 ? FindingClass::kAll : FindingClass::kSubset;
  f.category = Category::kMemoryGrowth;
  f.cause = Cause::kSoftware;
  std::vector<double> rates, grown;
  for (const Growing& g : growing) {
    f.ranks.push_back(g.rank->rank);
    if (!g.rank->host.empty() &&
        std::find(f.hosts.begin(), f.hosts.end(), g.rank->host) == f.hosts.end())
      f.hosts.push_back(g.rank->host);
    rates.push_back(g.growth.bytes_per_iteration);
    grown.push_back(g.growth.last_bytes - g.growth.first_bytes);
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  const Growing& first = *std::min_element(
      growing.begin(), growing.end(),
      [](const Growing& a, const Growing& b) { return a.rank->rank < b.rank->rank; });
  const double rate = internal::Median(rates);
  f.evidence["bytes_per_iteration"] = rate;
  f.evidence["grown_bytes"] = internal::Median(grown);
  f.evidence["rising_share"] = first.growth.rising_share;
  f.evidence["first_iteration"] = static_cast<double>(first.growth.first_step);
  f.evidence["last_iteration"] = static_cast<double>(first.growth.last_step);
  f.evidence[gpu ? "gpu_memory_bytes" : "rss_bytes"] = first.growth.last_rss;
  // No time lost per iteration yet: what it costs is the run itself, when the host runs out.
  f.impact_ms = 0;
  f.confidence = policy::kConfidenceOsEvidence;
  std::string left_text;
  if (std::isfinite(left)) {
    f.evidence["iterations_left"] = left;
    f.evidence[limit_key] = limit_bytes;
    const double left_s = left * iteration_ms / 1000;
    const std::string when =
        iteration_ms <= 0 ? ""
        : left_s < 60
            ? fmt::format(" (~{:.0f} s at {:.0f} ms an iteration)", left_s, iteration_ms)
            : fmt::format(" (~{:.0f} min at {:.0f} ms an iteration)", left_s / 60, iteration_ms);
    left_text = fmt::format("; {} run out in ~{:.0f} iterations{}", limit_text, left, when);
  }
  const std::string who =
      f.finding_class == FindingClass::kAll
          ? "every rank's"
          : fmt::format("rank{} {}'s", f.ranks.size() > 1 ? "s" : "", RankList(f.ranks));
  if (gpu) {
    f.evidence_text["memory"] = "gpu";
    if (first.rank->gpu >= 0) f.evidence["gpu"] = first.rank->gpu;
    if (first.rank->gpu_total_bytes > 0)
      f.evidence["gpu_total_bytes"] = first.rank->gpu_total_bytes;
    if (first.rank->cuda_reserved_bytes >= 0) {
      f.evidence_text["gpu_series"] = "torch.cuda.memory_allocated";
      f.evidence["cuda_reserved_bytes"] = first.rank->cuda_reserved_bytes;
      f.evidence["cuda_peak_allocated_bytes"] = first.rank->cuda_peak_allocated_bytes;
    } else {
      f.evidence_text["gpu_series"] = "NVML per-process used memory";
    }
  }
  f.summary = fmt::format(
      "{} {}memory grows every iteration: +{} per iteration ({} from iteration {} to {}, rising in "
      "{:.0f}% of the intervals between samples){}",
      who, gpu ? "GPU " : "", MemoryBytes(rate), MemoryBytes(internal::Median(grown)),
      first.growth.first_step, first.growth.last_step, first.growth.rising_share * 100, left_text);
  // What profiling windows left in RSS between the two samples is perftracker's, not counted.
  const double ours = (first.growth.last_rss - first.growth.first_rss) -
                      (first.growth.last_bytes - first.growth.first_bytes);
  f.evidence_text["reasoning"] = fmt::format(
      "{} sampled with the iteration reports rises steadily after the warm-up ({} at iteration "
      "{}, {} at {}{}): something keeps memory every iteration",
      gpu ? "the GPU memory its process holds (NVML)" : "resident memory (RSS)",
      MemoryBytes(first.growth.first_rss), first.growth.first_step,
      MemoryBytes(first.growth.last_rss), first.growth.last_step,
      ours >= kMiB ? fmt::format("; {} of it is what perftracker's profiling windows left, not "
                                 "counted",
                                 MemoryBytes(ours))
                   : "");
  f.suggestion = MemoryGrowthSuggestion(gpu);
  return {f};
}

}  // namespace perftracker::diagnose
