#include "diagnose/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include "diagnose/policy.h"
#include "pattern/steady_state.h"

namespace perftracker::diagnose::internal {

PeerWork& ThreadPeerWork() {
  thread_local PeerWork work;
  return work;
}

Reference RobustReference(const std::vector<double>& values) {
  PeerWork& work = ThreadPeerWork();
  ++work.references;
  work.elements += values.size();
  Reference ref;
  ref.median = Median(values);
  std::vector<double> dev;
  dev.reserve(values.size());
  for (double v : values)
    if (!std::isnan(v)) dev.push_back(std::fabs(v - ref.median));
  double mad = Median(std::move(dev));
  ref.scale = std::max({mad * kMadToSigma, 0.02 * std::fabs(ref.median), 20.0});
  return ref;
}

PeerReference MakePeerReference(const std::vector<double>& values) {
  PeerReference p;
  p.known = static_cast<size_t>(
      std::count_if(values.begin(), values.end(), [](double x) { return !std::isnan(x); }));
  ThreadPeerWork().elements += values.size();
  p.ref = RobustReference(values);
  return p;
}

SortedSample::SortedSample(const std::vector<double>& values) {
  sorted_.reserve(values.size());
  for (double v : values)
    if (!std::isnan(v)) sorted_.push_back(v);
  std::sort(sorted_.begin(), sorted_.end());
  ThreadPeerWork().elements += values.size();
}

size_t SortedSample::Removed(double v) const {
  if (std::isnan(v)) return sorted_.size();
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), v);
  return it != sorted_.end() && *it == v ? static_cast<size_t>(it - sorted_.begin())
                                         : sorted_.size();
}

double SortedSample::MedianWithout(double v) const {
  const size_t r = Removed(v);
  const size_t k = sorted_.size() - (r < sorted_.size() ? 1 : 0);
  if (k == 0) return 0;  // as Median of nothing
  auto at = [&](size_t j) { return sorted_[j < r ? j : j + 1]; };
  const size_t mid = k / 2;
  const double hi = at(mid);
  if (k % 2 == 1) return hi;
  return (at(mid - 1) + hi) / 2;  // as Median: the lower half's largest, then the middle
}

double SortedSample::MinWithout(double v) const {
  const size_t r = Removed(v);
  const size_t k = sorted_.size() - (r < sorted_.size() ? 1 : 0);
  if (k == 0) return std::numeric_limits<double>::infinity();
  return sorted_[r == 0 ? 1 : 0];
}

double SortedSample::MaxWithout(double v) const {
  const size_t r = Removed(v);
  const size_t k = sorted_.size() - (r < sorted_.size() ? 1 : 0);
  if (k == 0) return -std::numeric_limits<double>::infinity();
  return sorted_[r == sorted_.size() - 1 ? sorted_.size() - 2 : sorted_.size() - 1];
}

double MinImpactUs(double iteration_us, const DiagnoseOptions& o) {
  return std::max(o.min_abs_ms * 1000.0, o.min_fraction * iteration_us);
}

double EffectThreshold(double ref_us, double iteration_us, const DiagnoseOptions& o) {
  return std::max(o.min_relative * std::fabs(ref_us), MinImpactUs(iteration_us, o));
}

PeerComparison ComparePeers(const std::vector<double>& values, size_t i, double iteration_us,
                            const DiagnoseOptions& o, const PeerReference* shared) {
  PeerComparison c;
  if (values.size() < 2 || i >= values.size()) return c;
  const double v = values[i];
  // Unknown for this rank (NaN: a part of its data is missing): nothing to compare.
  if (std::isnan(v)) return c;
  PeerReference local;
  if (shared == nullptr) {
    local = MakePeerReference(values);
    shared = &local;
  }
  // Ranks without the value (NaN) take no part: the comparison is among the KNOWN ranks.
  const size_t known = shared->known;
  if (known < 2) return c;
  if (known == 2) {
    // Two ranks: no majority to vote with, so only a large gap counts.
    ThreadPeerWork().elements += values.size();
    for (size_t j = 0; j < values.size(); ++j)
      if (j != i && !std::isnan(values[j])) c.reference = values[j];
    c.excess = v - c.reference;
    double thr =
        std::max({policy::kTwoRankGap * std::fabs(c.reference), 2 * MinImpactUs(iteration_us, o),
                  EffectThreshold(c.reference, iteration_us, o)});
    c.high = c.excess > thr;
    c.low = -c.excess > thr;
    return c;
  }
  // In small groups the suspect itself drags the median and inflates the MAD (one straggler
  // among four ranks moves both a lot), so it is compared with the others only. In large
  // groups its influence is negligible and the shared reference saves O(n^2) work.
  Reference ref;
  if (known <= policy::kLeaveOneOutMax) {
    std::vector<double> others;
    others.reserve(known - 1);
    for (size_t j = 0; j < values.size(); ++j)
      if (j != i && !std::isnan(values[j])) others.push_back(values[j]);
    ThreadPeerWork().elements += values.size();
    ref = RobustReference(others);
  } else {
    ref = shared->ref;
  }
  c.reference = ref.median;
  c.excess = v - ref.median;
  double thr = EffectThreshold(ref.median, iteration_us, o);
  double z = c.excess / ref.scale;
  c.high = c.excess > thr && z > o.mad_k;
  c.low = -c.excess > thr && -z > o.mad_k;
  return c;
}

bool IsWaitClass(pattern::FunctionClass c) {
  using pattern::FunctionClass;
  return c == FunctionClass::kCollective || c == FunctionClass::kSync ||
         c == FunctionClass::kLaunch;
}

bool HasSelfTimes(const pattern::RankSummary& r) {
  for (const auto& f : r.functions)
    if (f.self_per_iter_us > 0) return true;
  return false;
}

double SelfUs(const pattern::FunctionPattern& f, bool has_self) {
  return has_self ? f.self_per_iter_us : f.per_iter_us;
}

std::vector<std::string> SplitStack(const std::string& stack) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= stack.size()) {
    size_t end = stack.find(';', start);
    if (end == std::string::npos) end = stack.size();
    if (end > start) out.push_back(stack.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

FunctionRef MakeFunctionRef(const std::string& name, trace::EventKind kind,
                            const std::string& stack) {
  return FunctionRef{name, trace::EventKindName(kind), SplitStack(stack)};
}

std::string Ms(double us) {
  double ms = us / 1000.0;
  if (std::fabs(ms) >= 100) return fmt::format("{:.0f} ms", ms);
  if (std::fabs(ms) >= 1) return fmt::format("{:.1f} ms", ms);
  return fmt::format("{:.2f} ms", ms);
}

std::string Percent(double fraction) { return fmt::format("{:.0f}%", fraction * 100); }

std::vector<std::string> HostsOf(const std::vector<const pattern::RankSummary*>& ranks) {
  std::set<std::string> hosts;
  for (const auto* r : ranks)
    if (!r->host.empty()) hosts.insert(r->host);
  return {hosts.begin(), hosts.end()};
}

double IterationUs(const pattern::RankSummary& r) { return r.MeanIterationMs() * 1000.0; }

void SortFindings(std::vector<Finding>* findings) {
  std::stable_sort(findings->begin(), findings->end(), [](const Finding& a, const Finding& b) {
    // Silent ranks first: the diagnosis is incomplete without them, and a silent rank blocks
    // every other in the next collective.
    bool ma = a.category == "missing_rank", mb = b.category == "missing_rank";
    if (ma != mb) return ma;
    // Then memory that grows every iteration: it costs no time yet (impact 0) but ends the job
    // when the host's memory runs out, and what its growth slows now (the allocations) is
    // named beside it.
    bool la = a.category == "memory_growth", lb = b.category == "memory_growth";
    if (la != lb) return la;
    bool ga = a.impact_ms >= 0, gb = b.impact_ms >= 0;
    if (ga != gb) return ga;
    // A low-confidence finding never outranks a confident one, whatever its impact.
    bool ca = a.confidence >= policy::kConfident, cb = b.confidence >= policy::kConfident;
    if (ca != cb) return ca;
    return std::fabs(a.impact_ms) > std::fabs(b.impact_ms);
  });
}

double NoiseZ(double excess, double sd_rank, double n_rank, double sd_peers, double n_peers,
              size_t peers) {
  const double var =
      (n_rank > 0 ? sd_rank * sd_rank / n_rank : 0) +
      (n_peers > 0 && peers > 0 ? sd_peers * sd_peers / (n_peers * static_cast<double>(peers)) : 0);
  if (!(var > 0)) return std::numeric_limits<double>::infinity();  // no noise measured
  return excess / std::sqrt(var);
}

JobInfo BuildJobInfo(const std::vector<const pattern::RankSummary*>& ranks) {
  JobInfo job;
  std::vector<double> iters, medians;
  // Notes of left-out iterations: enough to see what happened without one line per rank.
  constexpr int kMaxSteadyStateNoteRanks = 8;
  int steady_notes = 0;
  std::set<int> seen;
  int max_rank = -1;
  for (const pattern::RankSummary* rp : ranks) {
    const pattern::RankSummary& r = *rp;
    job.ranks.push_back(r.rank);
    job.world_size = std::max(job.world_size, r.world_size);
    max_rank = std::max(max_rank, r.rank);
    if (r.rank >= 0 && !seen.insert(r.rank).second)
      job.notes.push_back(fmt::format("rank {} appears more than once ({})", r.rank, r.source));
    if (r.rank < 0)
      job.notes.push_back(fmt::format("{}: no rank known; compared as an extra rank", r.source));
    iters.push_back(static_cast<double>(r.iteration_ms.size()));
    medians.push_back(r.MedianIterationMs());
    job.iteration_ms_per_rank[r.rank] = r.MeanIterationMs();
    if (r.whole_window)
      job.notes.push_back(fmt::format(
          "rank {}: no ProfilerStep or optimizer markers; the window is one iteration", r.rank));
    if (!r.missing_part.empty())
      job.notes.push_back(
          fmt::format("rank {}: no {} data ({}); compared with its peers only on what it has",
                      r.rank, r.missing_part, r.missing_why));
    // Partial and warm-up iterations, GPU work from before the profiler: a line per rank, and
    // one for the rest when many ranks say the same.
    for (const std::string& line : pattern::SteadyStateNotes(r)) {
      if (++steady_notes <= kMaxSteadyStateNoteRanks) {
        job.notes.push_back(fmt::format("rank {}: {}", r.rank, line));
      }
    }
    if (r.read_stats.malformed_events > 0)
      job.notes.push_back(fmt::format(
          "rank {}: {} malformed event{} skipped in {} (the first at byte {}: expected {})", r.rank,
          r.read_stats.malformed_events, r.read_stats.malformed_events == 1 ? "" : "s", r.source,
          r.read_stats.first_bad_byte,
          r.read_stats.first_bad.empty() ? "another shape" : r.read_stats.first_bad));
  }
  if (steady_notes > kMaxSteadyStateNoteRanks)
    job.notes.push_back(fmt::format("{} more notes of left-out iterations or early GPU work",
                                    steady_notes - kMaxSteadyStateNoteRanks));
  std::sort(job.ranks.begin(), job.ranks.end());
  job.world_size = std::max({job.world_size, max_rank + 1, static_cast<int>(seen.size())});
  job.iterations = static_cast<int>(std::lround(Median(iters)));
  job.iteration_ms_median = Median(medians);
  return job;
}

}  // namespace perftracker::diagnose::internal
