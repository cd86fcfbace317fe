// Topology: slow links localized from collective groups, and findings folded to the node or
// switch they share. C4's idea, from summaries alone: every instance of a process group (one
// "tp:8", one "dp:3") is compared with the other instances of its kind running the same
// collective. A slow link makes every member of each group crossing it slow alike; a late rank
// (a straggler) makes its peers slow while its own collective stays short, so an instance with
// a member that barely waits is left to the straggler logic. The slow instances then name the
// link: TP groups live inside a node (its NVLink); the node whose every cross-node group is slow
// while its partners also belong to healthy groups is the one with the slow NIC; when all nodes
// of a switch are such nodes, the switch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "diagnose/analysis.h"

namespace perftracker::diagnose::internal {
namespace {

using pattern::CompactRank;
using pattern::FunctionClass;

constexpr double kNicShare = 0.8;     // of a node's cross-node groups that must be slow
constexpr double kNvlinkShare = 0.5;  // of a node's intra-node groups that must be slow

struct Member {
  const CompactRank* r;
  double us;
  int64_t shape;  // calls per iteration and message size: members of one shape are comparable
  int role;
  double ex = 0;  // us minus the median of the same collective on ranks of the same shape
};

// One collective (function) of one group instance.
struct Instance {
  std::string group, kind;
  uint32_t fn = 0;  // function id
  double msg_bytes = 0;
  std::vector<Member> m;
  double value = 0;   // the group's excess: median over members
  double ref_us = 0;  // what the collective takes on healthy ranks of the members' roles
  bool slow = false;  // slowed with every member alike
  std::vector<const CompactRank*> late;  // or slowed waiting for these members
  double excess = 0;
  std::set<std::string> hosts;
};

double LowQuartile(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t k = v.size() / 4;
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

std::string KindOf(const std::string& group) {
  size_t colon = group.find(':');
  return colon == std::string::npos ? std::string() : group.substr(0, colon);
}

}  // namespace

void FindLinkProblems(const pattern::CompactJob& cj, const JobInfo& job, const DiagnoseOptions& o,
                      const std::set<int>& own_cause, std::vector<Finding>* out,
                      CollectiveEvidence* ev) {
  std::set<int>* explained = &ev->explained;
  const double iter_us = job.iteration_ms_median * 1000.0;
  if (iter_us <= 0) return;
  const std::vector<CompactRank>& ranks = cj.ranks();
  std::unordered_map<uint64_t, size_t> index;  // (group id, function id) -> instance
  std::vector<Instance> inst;
  std::map<std::string, std::vector<int>> ranks_of_host;
  for (const auto& r : ranks) {
    if (!r.host.empty()) ranks_of_host[r.host].push_back(r.rank);
    for (const auto& f : r.compact) {
      if (f.fclass() != FunctionClass::kCollective || f.group == f.kNoGroup) continue;
      uint64_t key = static_cast<uint64_t>(f.group) << 32 | f.id();
      auto [it, added] = index.emplace(key, inst.size());
      if (added) {
        inst.emplace_back();
        inst.back().group = cj.Group(f.group);
        inst.back().kind = KindOf(inst.back().group);
        inst.back().fn = f.id();
        inst.back().msg_bytes = f.msg_bytes;
      }
      int64_t shape =
          std::llround(f.calls_per_iter * 10) * 1000003 + std::llround(f.msg_bytes / 1024);
      inst[it->second].m.push_back({&r, f.per_iter_us, shape, r.role});
      if (!r.host.empty()) inst[it->second].hosts.insert(r.host);
    }
  }
  if (ranks_of_host.size() < 2) return;  // one host: nothing to localize between
  // Members of one group may legitimately differ (a pipeline group spans stages with different
  // call counts), so each member is measured against every rank running the same collective
  // as often with the same message size (across stages: a fault confined to one stage's groups
  // must not become that stage's norm), and an instance by the median of its members' excesses.
  // A group whose members have different roles (a pipeline group) does different work on each
  // (first and last stages send one way): there members compare with their own stage.
  for (Instance& x : inst) {
    bool mixed = false;
    for (const auto& m : x.m) mixed |= m.role != x.m[0].role;
    for (auto& m : x.m)
      if (mixed) m.shape = m.shape * 131 + m.role + 1;
  }
  std::map<std::pair<uint32_t, int64_t>, std::vector<double>> role_times;
  for (const Instance& x : inst)
    for (const auto& m : x.m) role_times[{x.fn, m.shape}].push_back(m.us);
  std::map<std::pair<uint32_t, int64_t>, double> role_ref;
  for (auto& [key, v] : role_times) role_ref[key] = LowQuartile(std::move(v));
  role_times.clear();
  // Instances of one kind running the same collective are peers.
  std::map<std::pair<std::string, uint32_t>, std::vector<size_t>> peers;
  for (size_t k = 0; k < inst.size(); ++k) {
    Instance& x = inst[k];
    if (x.m.size() < 2) continue;
    std::vector<double> v, refs;
    for (auto& m : x.m) {
      double ref = role_ref[{x.fn, m.shape}];
      m.ex = m.us - ref;
      v.push_back(m.ex);
      refs.push_back(ref);
    }
    x.value = Median(v);
    x.ref_us = Median(refs);
    peers[{x.kind, x.fn}].push_back(k);
  }
  std::vector<bool> counted(inst.size(), false);
  for (const auto& [key, idx] : peers) {
    if (idx.size() < 3) continue;
    std::vector<double> v;
    for (size_t k : idx) v.push_back(inst[k].value);
    // Faults only slow collectives down and may slow half the groups of a kind (a switch under
    // half of the data-parallel replicas): the healthy level is the lower quartile, and the
    // spread is measured on the lower half.
    Reference ref;
    ref.median = LowQuartile(v);
    {
      double mid = Median(v);
      std::vector<double> dev;
      for (double x : v)
        if (x <= mid) dev.push_back(std::fabs(x - ref.median));
      ref.scale = std::max(1.4826 * Median(std::move(dev)), 20.0);
    }
    for (size_t j = 0; j < idx.size(); ++j) {
      Instance& x = inst[idx[j]];
      counted[idx[j]] = true;
      for (const auto& m : x.m) ev->covered.insert(m.r->rank);
      // The group's median member damps single-rank noise, so an instance needs less than a
      // single function (5% of the step) to count: the node's findings add its instances up.
      const Reference& r = ref;
      PeerComparison c;
      c.reference = r.median;
      c.excess = v[j] - r.median;
      double thr = std::max({0.02 * x.ref_us, 0.01 * iter_us, o.min_abs_ms * 1000});
      if (c.excess < thr || c.excess < o.mad_k * r.scale) continue;
      double min_ex = x.value;
      for (const auto& m : x.m) min_ex = std::min(min_ex, m.ex);
      x.excess = c.excess;
      // A member that barely waits arrived last: its peers wait for it. Late for a reason of
      // its own (a slow GPU, its data loader, GC: named by the peer comparison) or because its
      // link is slow: a rank whose NIC is slow finishes its sends last, and its peers wait.
      // Several members may be late together (all ranks under a slow switch).
      double barely = c.reference + 0.5 * c.excess;
      if (min_ex < barely) {
        for (const auto& m : x.m) {
          if (m.ex >= barely) {
            ev->waiting.insert(m.r->rank);
          } else {
            ev->late.insert(m.r->rank);
            x.late.push_back(m.r);
          }
        }
        continue;
      }
      x.slow = true;
    }
  }
  // Per host: its intra-node and cross-node instances, and how many are slow.
  struct HostCount {
    int intra = 0, intra_slow = 0, inter = 0, inter_slow = 0;
    std::vector<double> intra_excess, inter_excess;
  };
  std::map<std::string, HostCount> hc;
  // A node with slow NVLink is late to its cross-node groups: that lateness is its NVLink's.
  std::set<std::string> nvlink_hosts;
  {
    std::map<std::string, std::pair<int, int>> intra;  // slow, total
    for (size_t k = 0; k < inst.size(); ++k) {
      const Instance& x = inst[k];
      if (!counted[k] || x.hosts.size() != 1) continue;
      auto& c = intra[*x.hosts.begin()];
      c.first += x.slow;
      c.second++;
    }
    for (const auto& [h, c] : intra)
      if (c.first > 0 && c.first >= kNvlinkShare * c.second) nvlink_hosts.insert(h);
  }
  for (size_t k = 0; k < inst.size(); ++k) {
    const Instance& x = inst[k];
    if (!counted[k] || x.hosts.empty()) continue;
    bool intra = x.hosts.size() == 1;
    for (const auto& h : x.hosts) {
      HostCount& c = hc[h];
      (intra ? c.intra : c.inter)++;
      // A cross-node group that waited for a member counts against that member's link only,
      // unless the member is late for a reason of its own.
      bool by_late = false;
      if (!intra && !nvlink_hosts.count(h))
        for (const CompactRank* l : x.late)
          by_late |= l->host == h && !own_cause.count(l->rank) &&
                     // A rank that waits for someone elsewhere arrives late downstream because
                     // of it: the lateness is that other link's.
                     !ev->waiting.count(l->rank);
      if (!x.slow && !by_late) continue;
      (intra ? c.intra_slow : c.inter_slow)++;
      (intra ? c.intra_excess : c.inter_excess).push_back(x.excess);
    }
  }
  std::vector<std::string> nvlink, nic;
  for (const auto& [h, c] : hc) {
    if (c.intra_slow > 0 && c.intra_slow >= kNvlinkShare * c.intra) nvlink.push_back(h);
    if (c.inter_slow > 0 && c.inter_slow >= kNicShare * c.inter) nic.push_back(h);
  }
  // Every host at once is no localization: the all-rank rules speak for the whole job.
  if (nic.size() == ranks_of_host.size()) nic.clear();
  if (nvlink.size() == ranks_of_host.size()) nvlink.clear();

  std::map<std::string, std::string> switch_of;
  std::map<std::string, std::set<std::string>> hosts_of_switch;
  for (const auto& r : ranks)
    if (!r.host.empty() && !r.network_switch.empty()) {
      switch_of[r.host] = r.network_switch;
      hosts_of_switch[r.network_switch].insert(r.host);
    }

  auto function_refs = [&](const std::vector<std::string>& hosts, bool intra) {
    std::vector<FunctionRef> refs;
    std::set<uint32_t> seen;
    for (const Instance& x : inst) {
      if (!(x.slow || !x.late.empty()) || (x.hosts.size() == 1) != intra) continue;
      bool touches = false;
      for (const auto& h : hosts) touches |= x.hosts.count(h) > 0;
      if (!touches || !seen.insert(x.fn).second) continue;
      refs.push_back(MakeFunctionRef(cj.function(x.fn)));
      if (refs.size() >= 3) break;
    }
    return refs;
  };
  auto emit = [&](const std::vector<std::string>& hosts, const std::string& link,
                  const std::string& sw) {
    Finding f;
    f.finding_class = FindingClass::kSubset;
    f.cause = Cause::kHardware;
    f.category = "communication";
    f.hosts = hosts;
    std::vector<double> excess;
    int slow = 0, total = 0;
    for (const auto& h : hosts) {
      const HostCount& c = hc[h];
      const auto& e = link == "nvlink" ? c.intra_excess : c.inter_excess;
      excess.insert(excess.end(), e.begin(), e.end());
      slow += link == "nvlink" ? c.intra_slow : c.inter_slow;
      total += link == "nvlink" ? c.intra : c.inter;
      for (int r : ranks_of_host[h]) f.ranks.push_back(r);
    }
    std::sort(f.ranks.begin(), f.ranks.end());
    for (int r : f.ranks) explained->insert(r);
    // Every member of a slowed group waits on the link; the ranks under it also lose each slowed
    // collective they run, so the median excess is the per-iteration loss.
    double impact = Median(excess);
    std::set<std::string> here(hosts.begin(), hosts.end());
    for (const Instance& x : inst) {
      bool named = x.slow;
      if (link != "nvlink")
        for (const CompactRank* l : x.late) named |= here.count(l->host) > 0;
      if (!named) continue;
      for (const auto& m : x.m) explained->insert(m.r->rank);
      for (const CompactRank* l : x.late) ev->late.erase(l->rank);  // named here, not late alone
    }
    f.impact_ms = impact / 1000.0;
    f.impact_fraction = impact / iter_us;
    f.functions = function_refs(hosts, link == "nvlink");
    f.evidence["groups_slow"] = slow;
    f.evidence["groups_total"] = total;
    f.evidence["collective_excess_ms"] = impact / 1000.0;
    f.evidence_text["link"] = link;
    std::string where = hosts.size() == 1
                            ? "node " + hosts[0]
                            : fmt::format("{} nodes ({})", hosts.size(), fmt::join(hosts, ", "));
    if (!sw.empty()) {
      f.evidence_text["switch"] = sw;
      where = fmt::format("switch {} ({})", sw, fmt::join(hosts, ", "));
    }
    if (link == "nvlink") {
      f.evidence_text["reasoning"] = fmt::format(
          "{} of {} process groups inside {} are slower than the same collective in other nodes' "
          "groups, with every member slow alike (nobody late): the NVLink inside the node",
          slow, total, hosts[0]);
      f.summary = fmt::format(
          "{}'s NVLink is slow: its intra-node collectives take {} longer per iteration than "
          "other nodes' (ranks {}); the job loses {}/iter ({})",
          where, Ms(impact), RankList(f.ranks), Ms(impact), Percent(f.impact_fraction));
      f.suggestion = fmt::format(
          "Check NVLink on {}: nvidia-smi nvlink -s / -e (link errors, lanes down), nvidia-smi "
          "topo -m, NVSwitch / fabric manager status; drain the node if it persists.",
          hosts[0]);
    } else {
      f.evidence_text["reasoning"] = fmt::format(
          "{} of {} cross-node process groups with ranks on {} are slower than other groups of "
          "the same kind, every member alike (nobody late), while the other nodes in those groups "
          "also belong to healthy groups: the common {} is slow",
          slow, total, where, sw.empty() ? "node's network link" : "switch");
      f.summary = fmt::format(
          "{}'s {} is slow: cross-node collectives of every group it is in take {} longer "
          "(ranks {}); the job loses {}/iter ({})",
          where, sw.empty() ? "NIC" : "network", Ms(impact), RankList(f.ranks), Ms(impact),
          Percent(f.impact_fraction));
      f.suggestion = sw.empty()
                         ? fmt::format(
                               "Check {}'s NIC and cable: ibstat / ethtool (speed negotiated, "
                               "errors), a rate limit, the switch port; drain the node if it "
                               "persists.",
                               hosts[0])
                         : fmt::format(
                               "Check switch {}: port errors and congestion, uplinks, firmware; "
                               "move the job off it if it persists.",
                               sw);
    }
    out->push_back(std::move(f));
  };
  for (const auto& h : nvlink) emit({h}, "nvlink", "");
  // Nodes whose NICs look slow and that make up every node of a switch are that switch.
  std::set<std::string> folded;
  if (nic.size() >= 2) {
    std::map<std::string, std::vector<std::string>> by_switch;
    for (const auto& h : nic)
      if (switch_of.count(h)) by_switch[switch_of[h]].push_back(h);
    for (const auto& [sw, hosts] : by_switch) {
      if (hosts.size() < 2 || hosts.size() != hosts_of_switch[sw].size()) continue;
      if (hosts_of_switch.size() < 2) continue;  // one switch: the job's whole network
      emit(hosts, "switch", sw);
      folded.insert(hosts.begin(), hosts.end());
    }
  }
  for (const auto& h : nic)
    if (!folded.count(h)) emit({h}, "nic", "");
}

// Several ranks of one host with the same problem are one node-level finding; several nodes
// under one switch with the same problem, covering all of the switch's nodes, one switch-level
// finding.
void FoldBySwitch(const std::vector<CompactRank>& ranks, std::vector<Finding>* findings) {
  std::map<std::string, std::string> switch_of;
  std::map<std::string, std::set<std::string>> hosts_of_switch;
  for (const auto& r : ranks)
    if (!r.host.empty() && !r.network_switch.empty()) {
      switch_of[r.host] = r.network_switch;
      hosts_of_switch[r.network_switch].insert(r.host);
    }
  if (hosts_of_switch.size() < 2) return;
  std::map<std::tuple<std::string, std::string, int, std::string>, std::vector<size_t>> by;
  for (size_t k = 0; k < findings->size(); ++k) {
    const Finding& f = (*findings)[k];
    if (f.finding_class != FindingClass::kSubset || f.hosts.size() != 1) continue;
    auto it = switch_of.find(f.hosts[0]);
    if (it == switch_of.end()) continue;
    auto link = f.evidence_text.find("link");
    by[{it->second, f.category, static_cast<int>(f.cause),
        link == f.evidence_text.end() ? "" : link->second}]
        .push_back(k);
  }
  std::vector<bool> drop(findings->size(), false);
  for (auto& [key, idx] : by) {
    const std::string& sw = std::get<0>(key);
    std::set<std::string> hosts;
    for (size_t k : idx) hosts.insert((*findings)[k].hosts[0]);
    if (hosts.size() < 2 || hosts != hosts_of_switch[sw]) continue;
    Finding& first = (*findings)[idx[0]];
    for (size_t j = 1; j < idx.size(); ++j) {
      Finding& other = (*findings)[idx[j]];
      first.ranks.insert(first.ranks.end(), other.ranks.begin(), other.ranks.end());
      first.impact_ms = std::max(first.impact_ms, other.impact_ms);
      first.impact_fraction = std::max(first.impact_fraction, other.impact_fraction);
      drop[idx[j]] = true;
    }
    std::sort(first.ranks.begin(), first.ranks.end());
    first.hosts.assign(hosts.begin(), hosts.end());
    first.evidence_text["switch"] = sw;
    first.summary = fmt::format("all nodes under switch {} ({}): {}", sw,
                                fmt::join(first.hosts, ", "), first.summary);
  }
  std::vector<Finding> kept;
  for (size_t k = 0; k < findings->size(); ++k)
    if (!drop[k]) kept.push_back(std::move((*findings)[k]));
  *findings = std::move(kept);
}

}  // namespace perftracker::diagnose::internal
