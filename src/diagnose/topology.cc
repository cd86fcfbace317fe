// Topology: slow links localized from collective groups, and findings folded to the node or
// switch they share. C4's idea, from summaries alone: every instance of a process group (one
// "tp:8", one "dp:3") is compared with the other instances of its kind running the same
// collective. A slow link makes every member of each group crossing it slow, the member that
// waited least included (its time is nearly its own transfer); a late rank (a straggler) makes
// its peers slow while its own collective stays short, so an instance whose least-waiting member
// is as fast as elsewhere is left to the straggler logic. The slow instances then name the link:
// TP groups live inside a node (its NVLink). Across nodes, explained away greedily: the node
// whose cross-node groups are most clearly slow (all of them, while its partners also belong to
// healthy groups) has the slow NIC, or its switch when the switch's other nodes are slow in
// groups without it; the groups it explains no longer count for or against anyone, and the rest
// are tested again.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "diagnose/analysis.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose::internal {
namespace {

using pattern::CompactRank;
using pattern::FunctionClass;

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

// Faults only slow collectives down and may slow half the groups of a kind (a switch under
// half of the data-parallel replicas): the healthy level is the lower quartile, and the spread
// is measured on the lower half.
Reference HealthyLevel(const std::vector<double>& v) {
  Reference ref;
  ref.median = LowQuartile(v);
  const double mid = Median(v);
  std::vector<double> dev;
  for (double x : v)
    if (x <= mid) dev.push_back(std::fabs(x - ref.median));
  ref.scale = std::max(1.4826 * Median(std::move(dev)), 20.0);
  return ref;
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
    const Reference ref = HealthyLevel(v);
    // The member that waited least in each instance: its time is nearly its own transfer (the
    // others' is that plus waiting for it), so instances compare by it, whatever everyone waits
    // for elsewhere (a healthy rank's collectives include its wait for the job's slowest rank,
    // and the slowest rank waits for nobody).
    std::vector<double> mins;
    for (size_t k : idx) {
      double m = inst[k].value;
      for (const auto& mm : inst[k].m) m = std::min(m, mm.ex);
      mins.push_back(m);
    }
    const Reference own_ref = HealthyLevel(mins);
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
      // The link is judged from transfer time: when even the member that waited least took
      // clearly longer than in other instances, its own transfer was slow, whoever else was
      // late. Every member of a group crossing a slow link is slowed so, late or not.
      const double min_ex = mins[j], own = min_ex - own_ref.median;
      const bool transfer_slow = own >= thr && own >= o.mad_k * own_ref.scale;
      if (c.excess < thr || c.excess < o.mad_k * r.scale) {
        // Its members waited less than usual for someone elsewhere, but it was slow all the same.
        if (transfer_slow) x.slow = true, x.excess = own;
        continue;
      }
      x.excess = c.excess;
      x.slow = transfer_slow;
      // A member that barely waits arrived last: its peers wait for it. Late for a reason of
      // its own (a slow GPU, its data loader, GC: named by the peer comparison) or because its
      // link is slow: a rank whose NIC is slow finishes its sends last, and its peers wait.
      // Several members may be late together (all ranks under a slow switch).
      double barely = c.reference + policy::kLateMemberShare * c.excess;
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
  // NVLink: a node whose intra-node groups are slow, every member alike.
  struct IntraCount {
    int slow = 0, total = 0;
    std::vector<double> excess;
  };
  std::map<std::string, IntraCount> intra;
  for (size_t k = 0; k < inst.size(); ++k) {
    const Instance& x = inst[k];
    if (!counted[k] || x.hosts.size() != 1) continue;
    IntraCount& c = intra[*x.hosts.begin()];
    c.total++;
    if (!x.slow) continue;
    c.slow++;
    c.excess.push_back(x.excess);
  }
  // A node with slow NVLink is late to its cross-node groups: that lateness is its NVLink's.
  std::set<std::string> nvlink_hosts;
  for (const auto& [h, c] : intra)
    if (c.slow > 0 && c.slow >= policy::kNvlinkShare * c.total) nvlink_hosts.insert(h);
  std::vector<std::string> nvlink(nvlink_hosts.begin(), nvlink_hosts.end());
  // Every host at once is no localization: the all-rank rules speak for the whole job.
  if (nvlink.size() == ranks_of_host.size()) nvlink.clear();

  std::map<std::string, std::string> switch_of;
  std::map<std::string, std::set<std::string>> hosts_of_switch;
  for (const auto& r : ranks)
    if (!r.host.empty() && !r.network_switch.empty()) {
      switch_of[r.host] = r.network_switch;
      hosts_of_switch[r.network_switch].insert(r.host);
    }

  // Cross-node instances, each with its hosts and the hosts it counts against (its suspects):
  // all of them when its own transfers were slow; when it only waited for late members, the
  // late members' hosts (a rank whose NIC is slow finishes its sends last), unless a member is
  // late for a reason of its own, because of its NVLink, because it waited for someone
  // elsewhere, or because its transfers in another group were slow (then the lateness is that
  // other group's link; here its own transfer was normal, which speaks for its NIC).
  std::vector<std::string> host_name;
  std::unordered_map<std::string, int> host_id;
  for (const auto& [h, v] : ranks_of_host) {
    host_id.emplace(h, static_cast<int>(host_name.size()));
    host_name.push_back(h);
  }
  const int n_hosts = static_cast<int>(host_name.size());
  struct Cross {
    size_t k;                          // instance
    std::vector<int> hosts, suspects;  // sorted host ids
    bool explained = false;            // by a link already named
  };
  // Ranks in groups whose own transfers were slow: late elsewhere because of that link.
  std::unordered_set<int> slowed;
  for (size_t k = 0; k < inst.size(); ++k)
    if (counted[k] && inst[k].slow)
      for (const auto& m : inst[k].m) slowed.insert(m.r->rank);
  std::vector<Cross> cross;
  std::vector<std::vector<int>> of_host(n_hosts), suspected(n_hosts);  // -> indices into cross
  // Per host: cross-node instances not yet explained, and how many of them suspect it.
  std::vector<int> open_n(n_hosts, 0), bad(n_hosts, 0);
  for (size_t k = 0; k < inst.size(); ++k) {
    const Instance& x = inst[k];
    if (!counted[k] || x.hosts.size() < 2) continue;
    Cross c;
    c.k = k;
    for (const auto& h : x.hosts) c.hosts.push_back(host_id.at(h));
    if (x.slow) {
      c.suspects = c.hosts;
    } else {
      for (const CompactRank* l : x.late)
        if (!l->host.empty() && !nvlink_hosts.count(l->host) && !own_cause.count(l->rank) &&
            !ev->waiting.count(l->rank) && !slowed.count(l->rank))
          c.suspects.push_back(host_id.at(l->host));
    }
    std::sort(c.hosts.begin(), c.hosts.end());
    std::sort(c.suspects.begin(), c.suspects.end());
    c.suspects.erase(std::unique(c.suspects.begin(), c.suspects.end()), c.suspects.end());
    const int i = static_cast<int>(cross.size());
    for (int h : c.hosts) of_host[h].push_back(i), open_n[h]++;
    for (int h : c.suspects) suspected[h].push_back(i), bad[h]++;
    cross.push_back(std::move(c));
  }
  auto share = [&](int h) { return open_n[h] > 0 ? static_cast<double>(bad[h]) / open_n[h] : 0.0; };
  auto suspect = [&](int h) { return bad[h] > 0 && share(h) >= policy::kNicShare; };
  // Naming a link explains every instance suspecting it: they no longer count for or against
  // any of their hosts.
  auto explain = [&](int h, std::vector<size_t>* into) {
    for (int i : suspected[h]) {
      Cross& c = cross[i];
      if (c.explained) continue;
      c.explained = true;
      into->push_back(c.k);
      for (int m : c.hosts) open_n[m]--;
      for (int m : c.suspects) bad[m]--;
    }
  };
  // What a named link explains: its hosts, its switch (or none), the instances.
  struct Named {
    std::vector<std::string> hosts;
    std::string sw;
    std::vector<size_t> instances;
  };
  std::vector<Named> named;
  int suspects = 0;
  for (int h = 0; h < n_hosts; ++h) suspects += suspect(h);
  // Every host at once is no localization (see above). Otherwise explain away, greedily: the
  // node most clearly slow (a slow NIC slows every cross-node group of its node, and the groups
  // it shares with other nodes make those look slow too, but not their groups without it) is
  // named, its groups explained, and the rest tested again. A switch is named instead when its
  // other nodes' groups without that node are slow as well.
  std::vector<bool> done(n_hosts, false);
  while (suspects < n_hosts) {
    int b = -1;
    for (int h = 0; h < n_hosts; ++h) {
      if (done[h] || !suspect(h)) continue;
      if (b < 0 || share(h) > share(b) || (share(h) == share(b) && bad[h] > bad[b])) b = h;
    }
    if (b < 0) break;
    Named n;
    auto sw = switch_of.find(host_name[b]);
    if (sw != switch_of.end() && hosts_of_switch.size() >= 2 &&
        hosts_of_switch[sw->second].size() >= 2) {
      // The switch as a unit: each other node's groups that do not contain b.
      int seen = 0;
      bool healthy = false;
      for (const auto& name : hosts_of_switch[sw->second]) {
        int h = host_id.at(name);
        if (h == b) continue;
        int t = 0, slow = 0;
        for (int i : of_host[h]) {
          const Cross& c = cross[i];
          if (c.explained || std::binary_search(c.hosts.begin(), c.hosts.end(), b)) continue;
          t++;
          slow += std::binary_search(c.suspects.begin(), c.suspects.end(), h);
        }
        if (t == 0) continue;
        seen++;
        healthy |= slow < policy::kNicShare * t;
      }
      if (seen > 0 && !healthy) {
        n.sw = sw->second;
        n.hosts.assign(hosts_of_switch[n.sw].begin(), hosts_of_switch[n.sw].end());
      }
    }
    if (n.sw.empty()) n.hosts = {host_name[b]};
    for (const auto& name : n.hosts) {
      int h = host_id.at(name);
      explain(h, &n.instances);
      done[h] = true;  // a node under a named switch is not named again
    }
    named.push_back(std::move(n));
  }
  // Nodes named one by one that make up every node of a switch are that switch.
  if (hosts_of_switch.size() >= 2) {
    std::map<std::string, std::vector<size_t>> by_switch;
    for (size_t i = 0; i < named.size(); ++i)
      if (named[i].sw.empty() && switch_of.count(named[i].hosts[0]))
        by_switch[switch_of[named[i].hosts[0]]].push_back(i);
    for (const auto& [sw, idx] : by_switch) {
      if (idx.size() < 2 || idx.size() != hosts_of_switch[sw].size()) continue;
      Named& first = named[idx[0]];
      for (size_t j = 1; j < idx.size(); ++j) {
        Named& other = named[idx[j]];
        first.hosts.push_back(other.hosts[0]);
        first.instances.insert(first.instances.end(), other.instances.begin(),
                               other.instances.end());
        other.hosts.clear();
      }
      std::sort(first.hosts.begin(), first.hosts.end());
      first.sw = sw;
    }
    std::erase_if(named, [](const Named& n) { return n.hosts.empty(); });
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
  // EXPLAINED: the cross-node instances a NIC or switch finding explains.
  auto emit = [&](const std::vector<std::string>& hosts, const std::string& link,
                  const std::string& sw, const std::vector<size_t>& explained_inst) {
    Finding f;
    f.finding_class = FindingClass::kSubset;
    f.cause = Cause::kHardware;
    f.category = "communication";
    f.confidence = policy::kConfidenceTimingOnly;
    f.hosts = hosts;
    std::vector<double> excess;
    int slow = 0, total = 0;
    for (const auto& h : hosts) {
      if (link == "nvlink") {
        const IntraCount& c = intra[h];
        excess.insert(excess.end(), c.excess.begin(), c.excess.end());
        slow += c.slow;
        total += c.total;
      }
      for (int r : ranks_of_host[h]) f.ranks.push_back(r);
    }
    if (link != "nvlink") {
      for (size_t k : explained_inst) excess.push_back(inst[k].excess);
      slow = static_cast<int>(explained_inst.size());
      // Cross-node instances with a member on these hosts, each once.
      std::set<int> ids;
      for (const auto& h : hosts) ids.insert(host_id.at(h));
      for (const Cross& c : cross) {
        bool touches = false;
        for (int h : c.hosts) touches |= ids.count(h) > 0;
        total += touches;
      }
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
          "the same kind, by their own transfers or waiting for its ranks to finish theirs, "
          "while the other nodes in those groups also belong to healthy groups (or to groups "
          "explained by another link): the common {} is slow",
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
  for (const auto& h : nvlink) emit({h}, "nvlink", "", {});
  for (const Named& n : named) emit(n.hosts, n.sw.empty() ? "nic" : "switch", n.sw, n.instances);
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
