// Internal to the diagnosis engine: slow links localized from collective groups (FindLinkProblems
// in analysis.h runs a LinkLocalizer). C4's idea, from summaries alone: every instance of a
// process group (one "tp:8", one "dp:3") is compared with the other instances of its kind running
// the same collective. A slow link makes every member of each group crossing it slow, the member
// that waited least included (its time is nearly its own transfer); a late rank (a straggler)
// makes its peers slow while its own collective stays short, so an instance whose least-waiting
// member is as fast as elsewhere is left to the straggler logic. The slow instances then name the
// link: TP groups live inside a node (its NVLink). Across nodes, explained away greedily: the node
// whose cross-node groups are most clearly slow (all of them, while its partners also belong to
// healthy groups) has the slow NIC, or its switch when the switch's other nodes are slow in
// groups without it; the groups it explains no longer count for or against anyone, and the rest
// are tested again.
//
// The steps, in order, each a function or small class of its own: BuildInstances, MeasureMembers,
// JudgeInstances, FindSlowNvlink, FindNicSuspects (into CrossGroups), ExplainAway, FoldSwitches,
// LinkFindingWriter. LinkLocalizer owns what they hand each other for one job.
#ifndef PERFTRACKER_DIAGNOSE_LINK_LOCALIZER_H_
#define PERFTRACKER_DIAGNOSE_LINK_LOCALIZER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "diagnose/problem_finders.h"
#include "pattern/compact_job.h"

namespace perftracker::diagnose::internal {

// One member of a group instance: its time in the instance's collective.
struct GroupMember {
  const pattern::CompactRank* r;
  double us;
  int64_t shape;  // calls per iteration and message size: members of one shape are comparable
  int role;
  double ex = 0;  // us minus the median of the same collective on ranks of the same shape
};

// One collective (function) of one group instance.
struct GroupInstance {
  std::string group, kind;
  uint32_t fn = 0;  // function id
  double msg_bytes = 0;
  std::vector<GroupMember> m;
  double value = 0;      // the group's excess: median over members
  double ref_us = 0;     // what the collective takes on healthy ranks of the members' roles
  bool counted = false;  // compared with enough other instances of its kind to be judged
  bool slow = false;     // slowed with every member alike
  std::vector<const pattern::CompactRank*> late;  // or slowed waiting for these members
  double excess = 0;
  std::set<std::string> hosts;
};

// The job's hosts (those named), numbered in name order, their ranks and their switches.
struct HostMap {
  explicit HostMap(const std::vector<pattern::CompactRank>& ranks);
  size_t size() const { return name.size(); }

  std::map<std::string, std::vector<int>> ranks_of_host;
  std::vector<std::string> name;  // by id
  std::unordered_map<std::string, int> id;
  std::map<std::string, std::string> switch_of;  // hosts whose ranks name a switch
  std::map<std::string, std::set<std::string>> hosts_of_switch;
};

// Step 1: the instances of each collective of each process group, in order of first appearance
// on the job's ranks (ungrouped collectives and other functions have none).
std::vector<GroupInstance> BuildInstances(const pattern::CompactJob& cj);

// Instances of one kind running the same collective, (kind, function id) -> instance indexes.
using PeerSets = std::map<std::pair<std::string, uint32_t>, std::vector<size_t>>;

// Step 2: each member's excess over the lower quartile of the same collective on ranks of the
// same shape (and role, in a group whose members' roles differ), each instance's value and
// reference (medians over its members); instances of two members or more join their peer set.
PeerSets MeasureMembers(std::vector<GroupInstance>* inst);

// Step 3: each instance compared with its peers (sets of three or more): counted; slow when even
// its least-waiting member took clearly longer than elsewhere; otherwise, when it is slow waiting
// for members that barely waited, those are its late members. EV: covered, late and waiting
// ranks.
void JudgeInstances(const PeerSets& peers, double iter_us, const DiagnoseOptions& o,
                    std::vector<GroupInstance>* inst, CollectiveEvidence* ev);

// A node's intra-node instances: how many were judged, how many slow, and their excesses.
struct IntraCount {
  int slow = 0, total = 0;
  std::vector<double> excess;
};
struct NvlinkVerdict {
  std::map<std::string, IntraCount> intra;  // by host
  std::set<std::string> hosts;              // hosts whose NVLink is slow
  std::vector<std::string> named;           // the same, to be reported: none when it is every host
};

// Step 4: NVLink, a node whose intra-node (single-host) groups are slow, every member alike.
// N_HOSTS: the job's hosts.
NvlinkVerdict FindSlowNvlink(const std::vector<GroupInstance>& inst, size_t n_hosts);

// A counted cross-node instance: its hosts and the hosts it counts against (its suspects).
struct CrossInstance {
  size_t k;                          // instance
  std::vector<int> hosts, suspects;  // sorted host ids
  bool explained = false;            // by a link already named
};

// Step 5: the cross-node instances and their suspects: all of their hosts when their own
// transfers were slow; when they only waited for late members, the late members' hosts, unless a
// member is late for a reason of its own (OWN_CAUSE), because of its NVLINK_HOSTS, because it
// waited for someone elsewhere (WAITING), or because its transfers in another group were slow.
std::vector<CrossInstance> FindNicSuspects(const std::vector<GroupInstance>& inst,
                                           const HostMap& hosts,
                                           const std::set<std::string>& nvlink_hosts,
                                           const std::set<int>& own_cause,
                                           const std::set<int>& waiting);

// The cross-node instances indexed by host, with per host the instances not yet explained and
// how many of them suspect it; naming a link explains instances away.
class CrossGroups {
 public:
  CrossGroups(std::vector<CrossInstance> cross, size_t n_hosts);

  size_t n_hosts() const { return open_n_.size(); }
  const std::vector<CrossInstance>& cross() const { return cross_; }
  const std::vector<int>& of_host(int h) const { return of_host_[h]; }  // indexes into cross()
  int open(int h) const { return open_n_[h]; }
  int bad(int h) const { return bad_[h]; }
  // The share of H's open instances that suspect it.
  double Share(int h) const;
  // Suspected by enough of its open instances (policy::kNicShare) to be a slow NIC.
  bool Suspect(int h) const;
  // Every instance suspecting H is explained: it no longer counts for or against any of its
  // hosts. INTO receives the instances (GroupInstance indexes) newly explained.
  void Explain(int h, std::vector<size_t>* into);

 private:
  std::vector<CrossInstance> cross_;
  std::vector<std::vector<int>> of_host_, suspected_;
  std::vector<int> open_n_, bad_;
};

// What a named link explains: its hosts, its switch (or none), the instances.
struct NamedLink {
  std::vector<std::string> hosts;
  std::string sw;
  std::vector<size_t> instances;
};

// Step 6: explain away, greedily. The node most clearly slow (highest share, then most suspecting
// instances) is named, or its switch when the switch's other nodes are slow in groups without
// it; the instances it explains no longer count, and the rest are tested again. Nothing when
// every host is a suspect at once (no localization).
std::vector<NamedLink> ExplainAway(const HostMap& hosts, CrossGroups* groups);

// Step 7: nodes named one by one that make up every node of a switch are that switch.
void FoldSwitches(const HostMap& hosts, std::vector<NamedLink>* named);

// Step 8: the findings, one per named link; each marks the ranks it explains in EV (and that
// their lateness is the link's).
class LinkFindingWriter {
 public:
  LinkFindingWriter(const pattern::CompactJob& cj, const std::vector<GroupInstance>& inst,
                    const HostMap& hosts, const std::map<std::string, IntraCount>& intra,
                    const std::vector<CrossInstance>& cross, double iter_us,
                    CollectiveEvidence* ev);

  // LINK: "nvlink", "nic" or "switch" (SW then names it). EXPLAINED: the cross-node instances a
  // NIC or switch finding explains.
  Finding Emit(const std::vector<std::string>& hosts, const std::string& link,
               const std::string& sw, const std::vector<size_t>& explained) const;

 private:
  // Up to three functions slowed on HOSTS, intra-node or cross-node ones.
  std::vector<FunctionRef> FunctionRefs(const std::vector<std::string>& hosts, bool intra) const;
  // Summary, reasoning and suggestion; SLOW of TOTAL groups.
  void Describe(const std::vector<std::string>& hosts, const std::string& link,
                const std::string& sw, int slow, int total, double impact, Finding* f) const;

  const pattern::CompactJob& cj_;
  const std::vector<GroupInstance>& inst_;
  const HostMap& hosts_;
  const std::map<std::string, IntraCount>& intra_;
  const std::vector<CrossInstance>& cross_;
  double iter_us_;
  CollectiveEvidence* ev_;
};

// Link localization of one job, the steps above in order.
class LinkLocalizer {
 public:
  // OWN_CAUSE: ranks the peer comparison found late for a reason of their own.
  LinkLocalizer(const pattern::CompactJob& cj, const JobInfo& job, const DiagnoseOptions& o,
                const std::set<int>& own_cause, CollectiveEvidence* ev);
  void Run(std::vector<Finding>* out);

 private:
  const pattern::CompactJob& cj_;
  const DiagnoseOptions& o_;
  const std::set<int>& own_cause_;
  CollectiveEvidence* ev_;
  const double iter_us_;
};

}  // namespace perftracker::diagnose::internal

#endif  // PERFTRACKER_DIAGNOSE_LINK_LOCALIZER_H_
