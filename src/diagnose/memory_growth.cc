#include "diagnose/memory_growth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string Bytes(double b) {
  return std::abs(b) >= 1024 * kMiB ? fmt::format("{:.1f} GiB", b / (1024 * kMiB))
                                    : fmt::format("{:.1f} MiB", b / kMiB);
}

}  // namespace

void MemorySeries::Add(int64_t step, double bytes) {
  if (!std::isfinite(bytes) || bytes < 0) return;
  if (!samples_.empty() && step <= samples_.back().step) {
    if (step == samples_.back().step) {
      samples_.back().bytes = bytes;  // the newer reading of the same iteration
      return;
    }
    samples_.clear();  // a restarted process: its memory starts again
    stride_ = 1;
  }
  if (!samples_.empty() && step - samples_.back().step < stride_) return;
  if (samples_.size() >= kMaxSamples) {
    // Every other sample goes (the first stays: the warm-up is measured from it).
    size_t out = 1;
    for (size_t i = 2; i < samples_.size(); i += 2) samples_[out++] = samples_[i];
    samples_.resize(out);
    stride_ *= 2;
    if (step - samples_.back().step < stride_) return;
  }
  samples_.push_back({step, bytes});
}

std::optional<MemoryGrowth> FindMemoryGrowth(const MemorySeries& series) {
  const std::vector<MemorySeries::Sample>& all = series.samples();
  if (all.size() < 3) return std::nullopt;
  const int64_t start = all.front().step + static_cast<int64_t>(policy::kMemoryWarmupIterations);
  std::vector<MemorySeries::Sample> s;
  for (const auto& x : all)
    if (x.step >= start) s.push_back(x);
  if (s.size() < 3) return std::nullopt;
  MemoryGrowth g;
  g.first_step = s.front().step;
  g.last_step = s.back().step;
  g.first_bytes = s.front().bytes;
  g.last_bytes = s.back().bytes;
  const double span = static_cast<double>(g.last_step - g.first_step);
  if (span < policy::kMemoryMinIterations) return std::nullopt;
  // Least squares of bytes on iterations.
  double mx = 0, my = 0;
  for (const auto& x : s) {
    mx += static_cast<double>(x.step);
    my += x.bytes;
  }
  mx /= static_cast<double>(s.size());
  my /= static_cast<double>(s.size());
  double sxy = 0, sxx = 0;
  for (const auto& x : s) {
    const double dx = static_cast<double>(x.step) - mx;
    sxy += dx * (x.bytes - my);
    sxx += dx * dx;
  }
  if (sxx <= 0) return std::nullopt;
  g.bytes_per_iteration = sxy / sxx;
  g.grown_bytes = g.bytes_per_iteration * span;
  if (g.grown_bytes < policy::kMemoryMinGrowthBytes ||
      g.last_bytes - g.first_bytes < policy::kMemoryMinGrowthBytes / 2)
    return std::nullopt;
  // A leak grows alike throughout; a warm-up ramp or a profiling window's buffers (measured: a
  // healthy rank's RSS steps up 27 MiB in its baseline window and then creeps by a MiB) grow in
  // one part. Each half of the span must grow at a good share of the overall rate.
  const int64_t mid = g.first_step + (g.last_step - g.first_step) / 2;
  auto half_rate = [&](bool first) {
    const MemorySeries::Sample* a = nullptr;
    const MemorySeries::Sample* z = nullptr;
    for (const auto& x : s) {
      if (first ? x.step > mid : x.step < mid) continue;
      if (a == nullptr) a = &x;
      z = &x;
    }
    if (a == nullptr || z == a) return 0.0;
    return (z->bytes - a->bytes) / static_cast<double>(z->step - a->step);
  };
  const double floor = g.bytes_per_iteration * policy::kMemoryHalvesShare;
  if (half_rate(true) < floor || half_rate(false) < floor) return std::nullopt;
  // Rises of a good part of what the rate gives the interval; a page more is no rise.
  int up = 0;
  for (size_t i = 1; i < s.size(); ++i) {
    const double expected = g.bytes_per_iteration * static_cast<double>(s[i].step - s[i - 1].step);
    if (s[i].bytes - s[i - 1].bytes >= expected * policy::kMemoryRiseOfExpected) ++up;
  }
  g.rising_share = static_cast<double>(up) / static_cast<double>(s.size() - 1);
  if (g.rising_share < policy::kMemoryRisingShare) return std::nullopt;
  return g;
}

std::vector<Finding> MemoryGrowthFindings(const std::vector<RankMemory>& ranks,
                                          const std::map<std::string, HostMemoryState>& hosts,
                                          double iteration_ms) {
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
  std::string tightest;
  for (const auto& [host, rate] : host_rate) {
    auto h = hosts.find(host);
    if (h == hosts.end() || h->second.available_bytes < 0 || rate <= 0) continue;
    const double n = h->second.available_bytes / rate;
    if (n < left) {
      left = n;
      tightest = host;
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
  f.evidence["rss_bytes"] = first.growth.last_bytes;
  // No time lost per iteration yet: what it costs is the run itself, when the host runs out.
  f.impact_ms = 0;
  f.confidence = policy::kConfidenceOsEvidence;
  std::string left_text;
  if (std::isfinite(left)) {
    f.evidence["iterations_left"] = left;
    f.evidence["host_available_bytes"] = hosts.at(tightest).available_bytes;
    const std::string when = iteration_ms > 0
                                 ? fmt::format(" (~{:.0f} min at {:.0f} ms an iteration)",
                                               left * iteration_ms / 60000, iteration_ms)
                                 : "";
    left_text = fmt::format("; host {}'s {} available run out in ~{:.0f} iterations{}", tightest,
                            Bytes(hosts.at(tightest).available_bytes), left, when);
  }
  const std::string who =
      f.finding_class == FindingClass::kAll
          ? "every rank's"
          : fmt::format("rank{} {}'s", f.ranks.size() > 1 ? "s" : "", RankList(f.ranks));
  f.summary = fmt::format(
      "{} memory grows every iteration: +{} per iteration ({} from iteration {} to {}, rising "
      "between {:.0f}% of the samples){}",
      who, Bytes(rate), Bytes(internal::Median(grown)), first.growth.first_step,
      first.growth.last_step, first.growth.rising_share * 100, left_text);
  f.evidence_text["reasoning"] = fmt::format(
      "resident memory (RSS) sampled with the iteration reports rises steadily after the warm-up "
      "({} at iteration {}, {} at {}): something keeps memory every iteration",
      Bytes(first.growth.first_bytes), first.growth.first_step, Bytes(first.growth.last_bytes),
      first.growth.last_step);
  f.suggestion =
      "find what the training loop keeps each iteration: tensors appended to a list (losses or "
      "outputs kept with their graphs: store loss.item() or .detach()), caches without a bound, "
      "growing histories or metrics; tracemalloc or torch.cuda.memory_snapshot() show where";
  return {f};
}

}  // namespace perftracker::diagnose
