#include "diagnose/link_localizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "base/units.h"
#include "diagnose/finding_text.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose::internal {
namespace {

using pattern::CompactRank;
using pattern::FunctionClass;

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
  ref.scale = std::max(kMadToSigma * Median(std::move(dev)), policy::kMinInstanceScaleUs);
  return ref;
}

std::string KindOf(const std::string& group) {
  size_t colon = group.find(':');
  return colon == std::string::npos ? std::string() : group.substr(0, colon);
}

// Calls per iteration (to a tenth) and message size (KiB) as one number.
int64_t ShapeOf(const pattern::CompactFunction& f, double msg_bytes) {
  return std::llround(f.calls_per_iter * 10) * 1000003 + std::llround(msg_bytes / 1024);
}

}  // namespace

HostMap::HostMap(const std::vector<CompactRank>& ranks) {
  for (const auto& r : ranks)
    if (!r.host.empty()) ranks_of_host[r.host].push_back(r.rank);
  for (const auto& [h, v] : ranks_of_host) {
    id.emplace(h, static_cast<int>(name.size()));
    name.push_back(h);
  }
  for (const auto& r : ranks)
    if (!r.host.empty() && !r.network_switch.empty()) {
      switch_of[r.host] = r.network_switch;
      hosts_of_switch[r.network_switch].insert(r.host);
    }
}

std::vector<GroupInstance> BuildInstances(const pattern::CompactJob& cj) {
  std::unordered_map<uint64_t, size_t> index;  // (group id, function id) -> instance
  std::vector<GroupInstance> inst;
  for (const auto& r : cj.ranks()) {
    for (const auto& f : r.compact) {
      if (f.fclass() != FunctionClass::kCollective || f.group == f.kNoGroup) continue;
      uint64_t key = static_cast<uint64_t>(f.group) << 32 | f.id();
      auto [it, added] = index.emplace(key, inst.size());
      const double msg_bytes = r.CollectiveOf(f).msg_bytes;
      if (added) {
        inst.emplace_back();
        inst.back().group = cj.Group(f.group);
        inst.back().kind = KindOf(inst.back().group);
        inst.back().fn = f.id();
        inst.back().msg_bytes = msg_bytes;
      }
      inst[it->second].m.push_back({&r, f.per_iter_us, ShapeOf(f, msg_bytes), r.role});
      if (!r.host.empty()) inst[it->second].hosts.insert(r.host);
    }
  }
  return inst;
}

PeerSets MeasureMembers(std::vector<GroupInstance>* inst) {
  // Members of one group may legitimately differ (a pipeline group spans stages with different
  // call counts), so each member is measured against every rank running the same collective
  // as often with the same message size (across stages: a fault confined to one stage's groups
  // must not become that stage's norm), and an instance by the median of its members' excesses.
  // A group whose members have different roles (a pipeline group) does different work on each
  // (first and last stages send one way): there members compare with their own stage.
  for (GroupInstance& x : *inst) {
    bool mixed = false;
    for (const auto& m : x.m) mixed |= m.role != x.m[0].role;
    for (auto& m : x.m)
      if (mixed) m.shape = m.shape * 131 + m.role + 1;
  }
  std::map<std::pair<uint32_t, int64_t>, std::vector<double>> role_times;
  for (const GroupInstance& x : *inst)
    for (const auto& m : x.m) role_times[{x.fn, m.shape}].push_back(m.us);
  std::map<std::pair<uint32_t, int64_t>, double> role_ref;
  for (auto& [key, v] : role_times) role_ref[key] = LowQuartile(std::move(v));
  role_times.clear();
  // Instances of one kind running the same collective are peers.
  PeerSets peers;
  for (size_t k = 0; k < inst->size(); ++k) {
    GroupInstance& x = (*inst)[k];
    if (x.m.size() < 2) continue;
    std::vector<double> v, refs;
    for (auto& m : x.m) {
      double ref = role_ref.at({x.fn, m.shape});
      m.ex = m.us - ref;
      v.push_back(m.ex);
      refs.push_back(ref);
    }
    x.value = Median(v);
    x.ref_us = Median(refs);
    peers[{x.kind, x.fn}].push_back(k);
  }
  return peers;
}

void JudgeInstances(const PeerSets& peers, double iter_us, const DiagnoseOptions& o,
                    std::vector<GroupInstance>* inst, CollectiveEvidence* ev) {
  for (const auto& [key, idx] : peers) {
    if (static_cast<double>(idx.size()) < policy::kMinPeerInstances) continue;
    std::vector<double> v;
    for (size_t k : idx) v.push_back((*inst)[k].value);
    const Reference ref = HealthyLevel(v);
    // The member that waited least in each instance: its time is nearly its own transfer (the
    // others' is that plus waiting for it), so instances compare by it, whatever everyone waits
    // for elsewhere (a healthy rank's collectives include its wait for the job's slowest rank,
    // and the slowest rank waits for nobody).
    std::vector<double> mins;
    for (size_t k : idx) {
      double m = (*inst)[k].value;
      for (const auto& mm : (*inst)[k].m) m = std::min(m, mm.ex);
      mins.push_back(m);
    }
    const Reference own_ref = HealthyLevel(mins);
    for (size_t j = 0; j < idx.size(); ++j) {
      GroupInstance& x = (*inst)[idx[j]];
      x.counted = true;
      for (const auto& m : x.m) ev->covered.insert(m.r->rank);
      const Reference& r = ref;
      PeerComparison c;
      c.reference = r.median;
      c.excess = v[j] - r.median;
      double thr = std::max({policy::kInstanceShareOfReference * x.ref_us,
                             policy::kInstanceShareOfIteration * iter_us, MsToUs(o.min_abs_ms)});
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
}

NvlinkVerdict FindSlowNvlink(const std::vector<GroupInstance>& inst, size_t n_hosts) {
  NvlinkVerdict out;
  for (const GroupInstance& x : inst) {
    if (!x.counted || x.hosts.size() != 1) continue;
    IntraCount& c = out.intra[*x.hosts.begin()];
    c.total++;
    if (!x.slow) continue;
    c.slow++;
    c.excess.push_back(x.excess);
  }
  // A node with slow NVLink is late to its cross-node groups: that lateness is its NVLink's.
  for (const auto& [h, c] : out.intra)
    if (c.slow > 0 && c.slow >= policy::kNvlinkShare * c.total) out.hosts.insert(h);
  out.named.assign(out.hosts.begin(), out.hosts.end());
  // Every host at once is no localization: the all-rank rules speak for the whole job.
  if (out.named.size() == n_hosts) out.named.clear();
  return out;
}

std::vector<CrossInstance> FindNicSuspects(const std::vector<GroupInstance>& inst,
                                           const HostMap& hosts,
                                           const std::set<std::string>& nvlink_hosts,
                                           const std::set<int>& own_cause,
                                           const std::set<int>& waiting) {
  // Ranks in groups whose own transfers were slow: late elsewhere because of that link (there
  // their own transfer was normal, which speaks for their NIC).
  std::unordered_set<int> slowed;
  for (const GroupInstance& x : inst)
    if (x.counted && x.slow)
      for (const auto& m : x.m) slowed.insert(m.r->rank);
  std::vector<CrossInstance> cross;
  for (size_t k = 0; k < inst.size(); ++k) {
    const GroupInstance& x = inst[k];
    if (!x.counted || x.hosts.size() < 2) continue;
    CrossInstance c;
    c.k = k;
    for (const auto& h : x.hosts) c.hosts.push_back(hosts.id.at(h));
    if (x.slow) {
      c.suspects = c.hosts;
    } else {
      // A rank whose NIC is slow finishes its sends last.
      for (const CompactRank* l : x.late)
        if (!l->host.empty() && !nvlink_hosts.count(l->host) && !own_cause.count(l->rank) &&
            !waiting.count(l->rank) && !slowed.count(l->rank))
          c.suspects.push_back(hosts.id.at(l->host));
    }
    std::sort(c.hosts.begin(), c.hosts.end());
    std::sort(c.suspects.begin(), c.suspects.end());
    c.suspects.erase(std::unique(c.suspects.begin(), c.suspects.end()), c.suspects.end());
    cross.push_back(std::move(c));
  }
  return cross;
}

CrossGroups::CrossGroups(std::vector<CrossInstance> cross, size_t n_hosts)
    : cross_(std::move(cross)),
      of_host_(n_hosts),
      suspected_(n_hosts),
      open_n_(n_hosts, 0),
      bad_(n_hosts, 0) {
  for (int i = 0; i < static_cast<int>(cross_.size()); ++i) {
    for (int h : cross_[i].hosts) of_host_[h].push_back(i), open_n_[h]++;
    for (int h : cross_[i].suspects) suspected_[h].push_back(i), bad_[h]++;
  }
}

double CrossGroups::Share(int h) const {
  return open_n_[h] > 0 ? static_cast<double>(bad_[h]) / open_n_[h] : 0.0;
}

bool CrossGroups::Suspect(int h) const { return bad_[h] > 0 && Share(h) >= policy::kNicShare; }

void CrossGroups::Explain(int h, std::vector<size_t>* into) {
  for (int i : suspected_[h]) {
    CrossInstance& c = cross_[i];
    if (c.explained) continue;
    c.explained = true;
    into->push_back(c.k);
    for (int m : c.hosts) open_n_[m]--;
    for (int m : c.suspects) bad_[m]--;
  }
}

namespace {

// B's switch when it is slow as a unit: each other node of the switch is slow in its open groups
// that do not contain B. Empty when not.
std::string SlowSwitchOf(int b, const HostMap& hosts, const CrossGroups& groups) {
  auto sw = hosts.switch_of.find(hosts.name[b]);
  if (sw == hosts.switch_of.end() || hosts.hosts_of_switch.size() < 2) return "";
  const std::set<std::string>& members = hosts.hosts_of_switch.at(sw->second);
  if (members.size() < 2) return "";
  int seen = 0;
  bool healthy = false;
  for (const auto& name : members) {
    int h = hosts.id.at(name);
    if (h == b) continue;
    int t = 0, slow = 0;
    for (int i : groups.of_host(h)) {
      const CrossInstance& c = groups.cross()[i];
      if (c.explained || std::binary_search(c.hosts.begin(), c.hosts.end(), b)) continue;
      t++;
      slow += std::binary_search(c.suspects.begin(), c.suspects.end(), h);
    }
    if (t == 0) continue;
    seen++;
    healthy |= slow < policy::kNicShare * t;
  }
  return seen > 0 && !healthy ? sw->second : "";
}

}  // namespace

std::vector<NamedLink> ExplainAway(const HostMap& hosts, CrossGroups* groups) {
  const int n_hosts = static_cast<int>(groups->n_hosts());
  std::vector<NamedLink> named;
  int suspects = 0;
  for (int h = 0; h < n_hosts; ++h) suspects += groups->Suspect(h);
  // Every host at once is no localization (see FindSlowNvlink). Otherwise explain away,
  // greedily: the node most clearly slow (a slow NIC slows every cross-node group of its node,
  // and the groups it shares with other nodes make those look slow too, but not their groups
  // without it) is named, its groups explained, and the rest tested again. A switch is named
  // instead when its other nodes' groups without that node are slow as well.
  std::vector<bool> done(n_hosts, false);
  while (suspects < n_hosts) {
    int b = -1;
    for (int h = 0; h < n_hosts; ++h) {
      if (done[h] || !groups->Suspect(h)) continue;
      if (b < 0 || groups->Share(h) > groups->Share(b) ||
          (groups->Share(h) == groups->Share(b) && groups->bad(h) > groups->bad(b)))
        b = h;
    }
    if (b < 0) break;
    NamedLink n;
    n.sw = SlowSwitchOf(b, hosts, *groups);
    if (n.sw.empty()) {
      n.hosts = {hosts.name[b]};
    } else {
      const std::set<std::string>& members = hosts.hosts_of_switch.at(n.sw);
      n.hosts.assign(members.begin(), members.end());
    }
    for (const auto& name : n.hosts) {
      int h = hosts.id.at(name);
      groups->Explain(h, &n.instances);
      done[h] = true;  // a node under a named switch is not named again
    }
    named.push_back(std::move(n));
  }
  return named;
}

void FoldSwitches(const HostMap& hosts, std::vector<NamedLink>* named) {
  if (hosts.hosts_of_switch.size() < 2) return;
  std::map<std::string, std::vector<size_t>> by_switch;
  for (size_t i = 0; i < named->size(); ++i) {
    const NamedLink& n = (*named)[i];
    if (n.sw.empty() && hosts.switch_of.count(n.hosts[0]))
      by_switch[hosts.switch_of.at(n.hosts[0])].push_back(i);
  }
  for (const auto& [sw, idx] : by_switch) {
    if (idx.size() < 2 || idx.size() != hosts.hosts_of_switch.at(sw).size()) continue;
    NamedLink& first = (*named)[idx[0]];
    for (size_t j = 1; j < idx.size(); ++j) {
      NamedLink& other = (*named)[idx[j]];
      first.hosts.push_back(other.hosts[0]);
      first.instances.insert(first.instances.end(), other.instances.begin(), other.instances.end());
      other.hosts.clear();
    }
    std::sort(first.hosts.begin(), first.hosts.end());
    first.sw = sw;
  }
  std::erase_if(*named, [](const NamedLink& n) { return n.hosts.empty(); });
}

LinkFindingWriter::LinkFindingWriter(const pattern::CompactJob& cj,
                                     const std::vector<GroupInstance>& inst, const HostMap& hosts,
                                     const std::map<std::string, IntraCount>& intra,
                                     const std::vector<CrossInstance>& cross, double iter_us,
                                     CollectiveEvidence* ev)
    : cj_(cj),
      inst_(inst),
      hosts_(hosts),
      intra_(intra),
      cross_(cross),
      iter_us_(iter_us),
      ev_(ev) {}

std::vector<FunctionRef> LinkFindingWriter::FunctionRefs(const std::vector<std::string>& hosts,
                                                         bool intra) const {
  std::vector<FunctionRef> refs;
  std::set<uint32_t> seen;
  for (const GroupInstance& x : inst_) {
    if (!(x.slow || !x.late.empty()) || (x.hosts.size() == 1) != intra) continue;
    bool touches = false;
    for (const auto& h : hosts) touches |= x.hosts.count(h) > 0;
    if (!touches || !seen.insert(x.fn).second) continue;
    refs.push_back(MakeFunctionRef(cj_.function(x.fn)));
    if (static_cast<double>(refs.size()) >= policy::kMaxLinkFunctions) break;
  }
  return refs;
}

Finding LinkFindingWriter::Emit(const std::vector<std::string>& hosts, const std::string& link,
                                const std::string& sw, const std::vector<size_t>& explained) const {
  Finding f;
  f.finding_class = FindingClass::kSubset;
  f.cause = Cause::kHardware;
  f.category = Category::kCommunication;
  f.confidence = policy::kConfidenceTimingOnly;
  f.hosts = hosts;
  std::vector<double> excess;
  int slow = 0, total = 0;
  for (const auto& h : hosts) {
    if (link == "nvlink") {
      const IntraCount& c = intra_.at(h);
      excess.insert(excess.end(), c.excess.begin(), c.excess.end());
      slow += c.slow;
      total += c.total;
    }
    for (int r : hosts_.ranks_of_host.at(h)) f.ranks.push_back(r);
  }
  if (link != "nvlink") {
    for (size_t k : explained) excess.push_back(inst_[k].excess);
    slow = static_cast<int>(explained.size());
    // Cross-node instances with a member on these hosts, each once.
    std::set<int> ids;
    for (const auto& h : hosts) ids.insert(hosts_.id.at(h));
    for (const CrossInstance& c : cross_) {
      bool touches = false;
      for (int h : c.hosts) touches |= ids.count(h) > 0;
      total += touches;
    }
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  for (int r : f.ranks) ev_->explained.insert(r);
  // Every member of a slowed group waits on the link; the ranks under it also lose each slowed
  // collective they run, so the median excess is the per-iteration loss.
  double impact = Median(excess);
  std::set<std::string> here(hosts.begin(), hosts.end());
  for (const GroupInstance& x : inst_) {
    bool named = x.slow;
    if (link != "nvlink")
      for (const CompactRank* l : x.late) named |= here.count(l->host) > 0;
    if (!named) continue;
    for (const auto& m : x.m) ev_->explained.insert(m.r->rank);
    for (const CompactRank* l : x.late) ev_->late.erase(l->rank);  // named here, not late alone
  }
  f.impact_ms = UsToMs(impact);
  f.impact_fraction = impact / iter_us_;
  f.functions = FunctionRefs(hosts, link == "nvlink");
  f.evidence["groups_slow"] = slow;
  f.evidence["groups_total"] = total;
  f.evidence["collective_excess_ms"] = UsToMs(impact);
  f.evidence_text["link"] = link;
  Describe(hosts, link, sw, slow, total, impact, &f);
  return f;
}

void LinkFindingWriter::Describe(const std::vector<std::string>& hosts, const std::string& link,
                                 const std::string& sw, int slow, int total, double impact,
                                 Finding* f) const {
  std::string where = hosts.size() == 1
                          ? "node " + hosts[0]
                          : fmt::format("{} nodes ({})", hosts.size(), fmt::join(hosts, ", "));
  if (!sw.empty()) {
    f->evidence_text["switch"] = sw;
    where = fmt::format("switch {} ({})", sw, fmt::join(hosts, ", "));
  }
  if (link == "nvlink") {
    f->evidence_text["reasoning"] = fmt::format(
        "{} of {} process groups inside {} are slower than the same collective in other nodes' "
        "groups, with every member slow alike (nobody late): the NVLink inside the node",
        slow, total, hosts[0]);
    f->summary = fmt::format(
        "{}'s NVLink is slow: its intra-node collectives take {} longer per iteration than "
        "other nodes' (ranks {}); the job loses {}/iter ({})",
        where, Ms(impact), RankList(f->ranks), Ms(impact), Percent(f->impact_fraction));
    f->suggestion = fmt::format(
        "Check NVLink on {}: nvidia-smi nvlink -s / -e (link errors, lanes down), nvidia-smi "
        "topo -m, NVSwitch / fabric manager status; drain the node if it persists.",
        hosts[0]);
    return;
  }
  f->evidence_text["reasoning"] = fmt::format(
      "{} of {} cross-node process groups with ranks on {} are slower than other groups of "
      "the same kind, by their own transfers or waiting for its ranks to finish theirs, "
      "while the other nodes in those groups also belong to healthy groups (or to groups "
      "explained by another link): the common {} is slow",
      slow, total, where, sw.empty() ? "node's network link" : "switch");
  f->summary = fmt::format(
      "{}'s {} is slow: cross-node collectives of every group it is in take {} longer "
      "(ranks {}); the job loses {}/iter ({})",
      where, sw.empty() ? "NIC" : "network", Ms(impact), RankList(f->ranks), Ms(impact),
      Percent(f->impact_fraction));
  f->suggestion = sw.empty() ? fmt::format(
                                   "Check {}'s NIC and cable: ibstat / ethtool (speed "
                                   "negotiated, errors), a rate limit, the switch port; drain the "
                                   "node if it persists.",
                                   hosts[0])
                             : fmt::format(
                                   "Check switch {}: port errors and congestion, uplinks, "
                                   "firmware; move the job off it if it persists.",
                                   sw);
}

LinkLocalizer::LinkLocalizer(const pattern::CompactJob& cj, const JobInfo& job,
                             const DiagnoseOptions& o, const std::set<int>& own_cause,
                             CollectiveEvidence* ev)
    : cj_(cj), o_(o), own_cause_(own_cause), ev_(ev), iter_us_(MsToUs(job.iteration_ms_median)) {}

void LinkLocalizer::Run(std::vector<Finding>* out) {
  if (iter_us_ <= 0) return;
  std::vector<GroupInstance> inst = BuildInstances(cj_);
  const HostMap hosts(cj_.ranks());
  if (hosts.size() < 2) return;  // one host: nothing to localize between
  const PeerSets peers = MeasureMembers(&inst);
  JudgeInstances(peers, iter_us_, o_, &inst, ev_);
  const NvlinkVerdict nvlink = FindSlowNvlink(inst, hosts.size());
  CrossGroups groups(FindNicSuspects(inst, hosts, nvlink.hosts, own_cause_, ev_->waiting),
                     hosts.size());
  std::vector<NamedLink> named = ExplainAway(hosts, &groups);
  FoldSwitches(hosts, &named);
  const LinkFindingWriter writer(cj_, inst, hosts, nvlink.intra, groups.cross(), iter_us_, ev_);
  for (const auto& h : nvlink.named) out->push_back(writer.Emit({h}, "nvlink", "", {}));
  for (const NamedLink& n : named)
    out->push_back(writer.Emit(n.hosts, n.sw.empty() ? "nic" : "switch", n.sw, n.instances));
}

}  // namespace perftracker::diagnose::internal
