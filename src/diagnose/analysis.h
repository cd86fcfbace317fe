// Internal to the diagnosis engine: robust statistics, effect thresholds and the small helpers
// shared by the peer comparison (subset.cc), the expected-pattern rules (rules.cc) and the run
// diff (diff.cc). Not part of the public interface.
#ifndef PERFTRACKER_DIAGNOSE_ANALYSIS_H_
#define PERFTRACKER_DIAGNOSE_ANALYSIS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "base/median.h"
#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "pattern/compact_job.h"
#include "pattern/pattern.h"

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

// Functions whose time is mostly waiting for someone else (peers, the GPU, a full launch queue):
// they grow on the victims of a slowdown, not on its cause.
bool IsWaitClass(pattern::FunctionClass c);

// True when the summary carries exclusive times (older summaries leave self_per_iter_us 0).
bool HasSelfTimes(const pattern::RankSummary& r);
double SelfUs(const pattern::FunctionPattern& f, bool has_self);
inline double SelfUs(const pattern::CompactFunction& f, bool has_self) {
  return has_self ? f.self_per_iter_us : f.per_iter_us;
}

std::vector<std::string> SplitStack(const std::string& stack);
FunctionRef MakeFunctionRef(const std::string& name, trace::EventKind kind,
                            const std::string& stack);
inline FunctionRef MakeFunctionRef(const pattern::FunctionPattern& f) {
  return MakeFunctionRef(f.name, f.kind, f.stack);
}
inline FunctionRef MakeFunctionRef(const pattern::FunctionInfo& f) {
  return MakeFunctionRef(f.name, f.kind, f.stack);
}

// Microseconds as a short millisecond string: "41.2 ms".
std::string Ms(double us);
std::string Percent(double fraction);

std::vector<std::string> HostsOf(const std::vector<const pattern::RankSummary*>& ranks);
double IterationUs(const pattern::RankSummary& r);  // mean iteration, microseconds

// The missing_rank finding first; then regressions and problems, confident ones
// (policy::kConfident) before the others, each by impact; improvements (negative impact) after,
// biggest first.
void SortFindings(std::vector<Finding>* findings);

// How many standard errors EXCESS is, when a rank's value over N_RANK iterations with spread
// SD_RANK is compared with PEERS peers' over N_PEERS iterations with spread SD_PEERS (spreads
// across iterations). Infinity when no spread was measured (one iteration, old summaries).
double NoiseZ(double excess, double sd_rank, double n_rank, double sd_peers, double n_peers,
              size_t peers);

JobInfo BuildJobInfo(const std::vector<const pattern::RankSummary*>& ranks);
// The summaries of RANKS (RankSummary or CompactRank), for what needs only their metadata.
template <typename R>
std::vector<const pattern::RankSummary*> Pointers(const std::vector<R>& ranks) {
  std::vector<const pattern::RankSummary*> out;
  out.reserve(ranks.size());
  for (const auto& r : ranks) out.push_back(&r);
  return out;
}

// The peer comparison (subset problems) and the expected-pattern rules (all-rank problems).
void FindSubsetProblems(const pattern::CompactJob& cj, const JobInfo& job, const DiagnoseOptions& o,
                        std::vector<Finding>* out);
void FindAllRankProblems(const pattern::CompactJob& cj, const JobInfo& job,
                         const DiagnoseOptions& o, std::vector<Finding>* out);

// What the collective-group instances say about ranks, beyond the link findings.
struct CollectiveEvidence {
  std::set<int> covered;    // member of a group instance that had others of its kind to compare
  std::set<int> explained;  // member of a group slowed by a link that a finding names
  std::set<int> late;       // the member a slowed group waited for
  std::set<int> waiting;    // the other members of such a group: victims, not causes
};
// Slow links localized from collective-group instances (topology.cc): NVLink of a node, NIC of
// a node, or a switch. OWN_CAUSE: ranks the peer comparison found late for a reason of their own
// (their groups' waiting is not a link's doing). EV says whose collective outliers are explained,
// so that the per-rank comparison does not also blame them.
void FindLinkProblems(const pattern::CompactJob& cj, const JobInfo& job, const DiagnoseOptions& o,
                      const std::set<int>& own_cause, std::vector<Finding>* out,
                      CollectiveEvidence* ev);
// Node-level findings of the same kind on every node of a switch become one switch finding.
void FoldBySwitch(const std::vector<pattern::CompactRank>& ranks, std::vector<Finding>* findings);

}  // namespace perftracker::diagnose::internal

#endif  // PERFTRACKER_DIAGNOSE_ANALYSIS_H_
