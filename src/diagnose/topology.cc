// Topology: slow links localized from collective groups (the steps are in link_localizer.h, which
// describes the algorithm), and findings folded to the node or switch they share.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "diagnose/link_localizer.h"
#include "diagnose/problem_finders.h"

namespace perftracker::diagnose::internal {

using pattern::CompactRank;

void FindLinkProblems(const pattern::CompactJob& cj, const JobInfo& job, const DiagnoseOptions& o,
                      const std::set<int>& own_cause, std::vector<Finding>* out,
                      CollectiveEvidence* ev) {
  LinkLocalizer(cj, job, o, own_cause, ev).Run(out);
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
    // By name: the groups keep the order they had when the category was a string.
    by[{it->second, CategoryName(f.category), static_cast<int>(f.cause),
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
