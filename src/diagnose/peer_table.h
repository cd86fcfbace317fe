// A peer group's comparison table (diagnose/subset.cc reads it to write the subset findings):
// each function identity as a row of its values across the group's members (inclusive and
// exclusive time, calls), each member's own-work and collective totals, and each member compared
// with its peers on every row and total (high / low outliers, by how much). Built once per group,
// on one thread; the peer references behind the comparisons (the median without the member, in
// O(log n)) are made once per row and shared by every member's comparison.
#ifndef PERFTRACKER_DIAGNOSE_PEER_TABLE_H_
#define PERFTRACKER_DIAGNOSE_PEER_TABLE_H_

#include <cstddef>
#include <optional>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "diagnose/peer_stats.h"
#include "diagnose/rank_info.h"
#include "pattern/compact_job.h"

namespace perftracker::diagnose::internal {

// Waiting never makes a rank a straggler on its own.
inline bool IsWait(pattern::FunctionClass c) { return IsWaitClass(c); }
// A range around other work (record_function, an optimizer step's annotation), not work: its
// self time is what no op names, Python the tracer counts or a wait (Lightning runs forward and
// backward inside Optimizer.step, whose self time holds the peers' wait for a late rank).
inline bool IsRange(pattern::FunctionClass c) {
  return c == pattern::FunctionClass::kAnnotation || c == pattern::FunctionClass::kOptimizer;
}

// One function identity across the members of a group.
struct Row {
  const pattern::FunctionInfo* proto = nullptr;    // name, kind, class
  std::vector<const pattern::CompactFunction*> f;  // per member, nullptr when absent
  std::vector<double> v, self, calls;              // per member; 0 when absent
  // Built once per row, shared by every member's comparison: ref_v for every row (each member is
  // compared on each), the others when first needed (only straggler candidates need them; a
  // group is analyzed on one thread).
  PeerReference ref_v;
  mutable std::optional<PeerReference> ref_self, ref_calls;

  const PeerReference& RefSelf() const {
    if (!ref_self) ref_self = MakePeerReference(self);
    return *ref_self;
  }
  const PeerReference& RefCalls() const {
    if (!ref_calls) ref_calls = MakePeerReference(calls);
    return *ref_calls;
  }
};

struct Outlier {
  const Row* row = nullptr;
  PeerComparison cmp;
};

struct Member {
  const pattern::CompactRank* r = nullptr;
  std::vector<Outlier> high_own;   // non-wait functions above their peers
  std::vector<Outlier> high_wait;  // sync / launch functions above their peers
  std::vector<Outlier> high_coll;
  std::vector<Outlier> low_coll;
  PeerComparison own_cpu, own_gpu, own_ops, coll;
  double excess = 0;  // own-work excess used to pick among candidates
};

// The table of one group: MEMBERS (indices into the job's ranks) compared with each other.
class PeerTable {
 public:
  PeerTable(const pattern::CompactJob& cj, const std::vector<size_t>& members, const JobInfo& job,
            const DiagnoseOptions& o);

  size_t n() const { return m_.size(); }
  const std::vector<Member>& members() const { return m_; }
  const std::vector<Row>& rows() const { return rows_; }
  // Per member: own CPU work (exclusive), own GPU work, collective time (when it arrived), CPU
  // ops' own time inside Python frames; NaN where the member's window lacks that part.
  const std::vector<double>& own_cpu() const { return own_cpu_; }
  const std::vector<double>& own_gpu() const { return own_gpu_; }
  const std::vector<double>& coll() const { return coll_; }
  const std::vector<double>& own_ops() const { return own_ops_; }

  // Ranks doing more own work than their peers, minus those whose extra time is explained by
  // waiting for another candidate (their collectives are clearly longer than its).
  std::vector<size_t> Candidates() const;
  // How many standard errors of the window's iteration-to-iteration noise EXCESS is, for ROW's
  // value on member I against its peers (policy::kMinSignificance).
  double RowZ(const Row& row, size_t i, double excess) const;
  // The same for member I's total collective time.
  double CollectiveZ(size_t i, double excess) const;

 protected:
  PeerComparison Compare(const std::vector<double>& v, size_t i, const PeerReference& ref) const {
    return ComparePeers(v, i, iter_us_, o_, &ref);
  }
  double Iterations(size_t i) const { return static_cast<double>(m_[i].r->iteration_ms.size()); }

  const DiagnoseOptions& o_;
  double iter_us_;
  size_t functions_;  // in the job: function ids are below
  std::vector<Member> m_;
  std::vector<Row> rows_;
  std::vector<double> own_cpu_, own_gpu_, coll_;
  // Per member: its CPU ops' own time inside Python frames (online; 0 offline): AddOwnWork.
  std::vector<double> own_ops_;
  std::vector<double> coll_sd_;  // per member: its collectives' spreads added as variances
  // Over the members whose collective time is known (coll_ not NaN).
  std::optional<SortedSample> coll_sorted_, coll_sd_sorted_, coll_iters_sorted_;

 private:
  void BuildRows();
  // Each member's collective-time spread and the sorted samples of the collective times, their
  // spreads and iteration counts: built once, so that a member's comparison with "everyone but
  // it" is O(log n), not O(n).
  void BuildCollectiveSamples();
  void CompareMembers();
};

}  // namespace perftracker::diagnose::internal

#endif  // PERFTRACKER_DIAGNOSE_PEER_TABLE_H_
