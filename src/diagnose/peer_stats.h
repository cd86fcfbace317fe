// Internal to the diagnosis engine: the robust statistics of the peer comparison. A rank's value
// against its peers' (median and a MAD-based scale, leave-one-out in small groups), the effect
// and impact thresholds, and how many standard errors a difference is. Used by the peer
// comparison (subset.cc), the expected-pattern rules (rules.cc), the run diff (diff.cc) and the
// OS-evidence rules (causes.cc).
#ifndef PERFTRACKER_DIAGNOSE_PEER_STATS_H_
#define PERFTRACKER_DIAGNOSE_PEER_STATS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/median.h"
#include "diagnose/diagnose.h"

namespace perftracker::diagnose::internal {

using ::perftracker::kMadToSigma;  // base/median.h
using ::perftracker::Median;

// The work the peer comparison does, counted on the thread that does it (one group's analysis
// runs on one thread), so that a test can check how it grows with a group's size: timing would
// be fooled by a noisy machine. Counting costs an add per reference or scan, not per element.
struct PeerWork {
  uint64_t elements = 0;    // values read to build references and medians, and to scan peers
  uint64_t references = 0;  // robust references built
};
PeerWork& ThreadPeerWork();

// The robust reference of a set of per-rank values: median and a MAD-based scale floored at
// max(1.4826*MAD, 2% of the median, 20 us), so that identical peers (MAD 0) do not turn
// microsecond noise into infinite z-scores. NaN values (unknown) take no part.
struct Reference {
  double median = 0;
  double scale = 0;
};
Reference RobustReference(const std::vector<double>& values);

// What every rank's comparison on one row of per-rank values shares, built once per (group,
// function): how many ranks have a value (NaN: unknown) and the robust reference of those values.
// Without it each rank's comparison would count and rebuild them: O(n^2) per row.
struct PeerReference {
  size_t known = 0;
  Reference ref;
};
PeerReference MakePeerReference(const std::vector<double>& values);

// The known values of a row, sorted once, for "everyone but rank i" in O(log n): the median,
// the smallest and the largest of the others, exactly as over the others themselves.
//   SortedSample s({4, 1, NaN, 3});  s.MedianWithout(3) == 2.5;  s.MedianWithout(NaN) == 3
class SortedSample {
 public:
  explicit SortedSample(const std::vector<double>& values);
  // V is the left-out rank's value (one instance of it is left out); NaN leaves out nothing.
  double MedianWithout(double v) const;
  double MinWithout(double v) const;  // +inf when nothing is left
  double MaxWithout(double v) const;  // -inf when nothing is left
  size_t size() const { return sorted_.size(); }

 private:
  // The index in sorted_ of the instance of V that is left out; size() when none is.
  size_t Removed(double v) const;
  std::vector<double> sorted_;
};

// The smallest excess (us per iteration) worth reporting for a value whose reference is `ref_us`.
double EffectThreshold(double ref_us, double iteration_us, const DiagnoseOptions& o);
// The smallest impact (us per iteration) a finding needs to be emitted.
double MinImpactUs(double iteration_us, const DiagnoseOptions& o);

// Peer comparison of values[i] against the others. With 3+ values: median / MAD; with 2 the
// other value is the reference and the effect must be larger (one of two cannot be voted odd).
struct PeerComparison {
  double reference = 0;  // peers' median (or the other value when there are two)
  double excess = 0;     // value - reference
  bool high = false;     // significantly above
  bool low = false;      // significantly below
};
// Ranks whose value is NaN are left out (compared among the ranks that have the value); `ref`,
// when given, is MakePeerReference(values), built once for all i. With it the comparison costs
// O(1) in groups larger than policy::kLeaveOneOutMax, and O(n) for the known ranks of smaller
// ones (leave-one-out), so a whole row costs O(n) whatever is missing.
PeerComparison ComparePeers(const std::vector<double>& values, size_t i, double iteration_us,
                            const DiagnoseOptions& o, const PeerReference* ref = nullptr);

// How many standard errors EXCESS is, when a rank's value over N_RANK iterations with spread
// SD_RANK is compared with PEERS peers' over N_PEERS iterations with spread SD_PEERS (spreads
// across iterations). Infinity when no spread was measured (one iteration, old summaries).
double NoiseZ(double excess, double sd_rank, double n_rank, double sd_peers, double n_peers,
              size_t peers);

}  // namespace perftracker::diagnose::internal

#endif  // PERFTRACKER_DIAGNOSE_PEER_STATS_H_
