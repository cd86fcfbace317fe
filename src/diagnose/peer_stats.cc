#include "diagnose/peer_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/units.h"
#include "diagnose/policy.h"

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
  ref.scale =
      std::max({mad * kMadToSigma, policy::kReferenceMinRelativeScale * std::fabs(ref.median),
                policy::kReferenceMinScaleUs});
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
  return std::max(MsToUs(o.min_abs_ms), o.min_fraction * iteration_us);
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

double NoiseZ(double excess, double sd_rank, double n_rank, double sd_peers, double n_peers,
              size_t peers) {
  const double var =
      (n_rank > 0 ? sd_rank * sd_rank / n_rank : 0) +
      (n_peers > 0 && peers > 0 ? sd_peers * sd_peers / (n_peers * static_cast<double>(peers)) : 0);
  if (!(var > 0)) return std::numeric_limits<double>::infinity();  // no noise measured
  return excess / std::sqrt(var);
}

}  // namespace perftracker::diagnose::internal
