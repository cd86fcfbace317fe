// Internal to the diagnosis engine: the entries of its finders, called by diagnose.cc in order.
// The peer comparison of each group of ranks with the same role (subset.cc), the expected-pattern
// rules on every rank (rules.cc), and the slow links localized from collective-group instances
// (topology.cc, link_localizer.h), with what they say about ranks for the comparisons after them.
#ifndef PERFTRACKER_DIAGNOSE_PROBLEM_FINDERS_H_
#define PERFTRACKER_DIAGNOSE_PROBLEM_FINDERS_H_

#include <set>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "pattern/compact_job.h"

namespace perftracker::diagnose::internal {

// The peer comparison (subset problems) and the expected-pattern rules (all-rank problems).
// GROUPS: the peer groups (PeerGroups of cj's ranks), which the cause rules use too.
void FindSubsetProblems(const pattern::CompactJob& cj, const JobInfo& job, const DiagnoseOptions& o,
                        std::vector<std::vector<size_t>> groups, std::vector<Finding>* out);
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

#endif  // PERFTRACKER_DIAGNOSE_PROBLEM_FINDERS_H_
