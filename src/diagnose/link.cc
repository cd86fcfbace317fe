#include "diagnose/link.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

constexpr std::string_view kPrefix = "tcp.sendq.";

struct Conn {
  int rank;
  std::string local, remote;
  double bytes;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

std::optional<Finding> DiagnoseSlowLink(const RankMetrics& metrics,
                                        const std::vector<pattern::CompactRank>& ranks) {
  std::vector<Conn> conns;
  std::map<std::string, int> owner;  // local endpoint -> rank
  for (const auto& [rank, m] : metrics) {
    for (const auto& [key, v] : m) {
      if (key.compare(0, kPrefix.size(), kPrefix) != 0) continue;
      std::string ends = key.substr(kPrefix.size());
      size_t gt = ends.find('>');
      if (gt == std::string::npos) continue;
      conns.push_back({rank, ends.substr(0, gt), ends.substr(gt + 1), v});
      owner[conns.back().local] = rank;
    }
  }
  if (conns.empty()) return std::nullopt;
  double max_bytes = 0;
  for (const Conn& c : conns) max_bytes = std::max(max_bytes, c.bytes);
  const double heavy = std::max(policy::kBackedUpBytes, policy::kBackedUpRelative * max_bytes);
  // Distinct peers each rank has a backed-up connection with (either direction).
  std::map<int, std::set<int>> peers;
  std::map<int, double> own_bytes;
  double total = 0;
  for (const Conn& c : conns) {
    if (c.bytes < heavy) continue;
    auto it = owner.find(c.remote);
    if (it == owner.end() || it->second == c.rank) continue;
    peers[c.rank].insert(it->second);
    peers[it->second].insert(c.rank);
    own_bytes[c.rank] += c.bytes;
    total += c.bytes;
  }
  if (peers.empty()) return std::nullopt;
  std::vector<std::pair<size_t, int>> order;
  for (const auto& [r, p] : peers) order.push_back({p.size(), r});
  std::sort(order.rbegin(), order.rend());
  const auto [n_peers, slow] = order[0];
  size_t second = order.size() > 1 ? order[1].first : 0;
  // Several peers, twice as many as any other rank, and nearly all the queued bytes are on
  // connections that lead to it (a stray backed-up connection elsewhere does not hide it).
  if (n_peers < 2 || n_peers < 2 * second) return std::nullopt;
  double touching = 0;
  for (const Conn& c : conns) {
    if (c.bytes < heavy) continue;
    auto it = owner.find(c.remote);
    if (it == owner.end() || it->second == c.rank) continue;
    if (c.rank == slow || it->second == slow) touching += c.bytes;
  }
  if (touching < policy::kBackedUpShare * total || touching < policy::kBackedUpRankBytes)
    return std::nullopt;

  Finding f;
  f.finding_class = FindingClass::kSubset;
  f.cause = Cause::kHardware;
  f.category = "communication";
  f.confidence = policy::kConfidenceSendQueues;
  f.ranks = {slow};
  std::vector<double> comm, iter;
  for (const auto& r : ranks) {
    double c = 0;
    for (const auto& fn : r.compact)
      if (fn.fclass() == pattern::FunctionClass::kCollective && fn.top_level) c += fn.per_iter_us;
    comm.push_back(c / 1e3);
    iter.push_back(r.MeanIterationMs());
    if (r.rank == slow && !r.host.empty()) f.hosts = {r.host};
    if (r.rank == slow) {
      std::vector<std::pair<double, const pattern::CompactFunction*>> colls;
      for (const auto& fn : r.compact)
        if (fn.fclass() == pattern::FunctionClass::kCollective)
          colls.push_back({fn.per_iter_us, &fn});
      std::sort(colls.begin(), colls.end(),
                [](const auto& a, const auto& b) { return a.first > b.first; });
      for (size_t i = 0; i < colls.size() && i < 3; ++i)
        f.functions.push_back({colls[i].second->name(),
                               std::string(trace::EventKindName(colls[i].second->kind())),
                               {}});
    }
  }
  double median_iter = Median(iter);
  // The collectives' time is what the slow hop stretches on every rank (an upper bound: part of
  // it would remain on a healthy link).
  f.impact_ms = std::min(Median(comm), median_iter);
  f.impact_fraction = median_iter > 0 ? f.impact_ms / median_iter : 0;
  f.evidence["backed_up_peers"] = static_cast<double>(n_peers);
  f.evidence["own_queued_kib"] = own_bytes[slow] / 1024;
  f.evidence["job_queued_kib"] = total / 1024;
  f.evidence["collective_ms_per_iteration"] = Median(comm);
  std::vector<std::string> shown;
  for (const Conn& c : conns)
    if (c.bytes >= heavy && (c.rank == slow || (owner.count(c.remote) && owner[c.remote] == slow)))
      shown.push_back(fmt::format("{}->{} {:.0f} KiB", c.local, c.remote, c.bytes / 1024));
  if (shown.size() > 6) shown.resize(6);
  f.evidence_text["backed_up_connections"] = fmt::format("{}", fmt::join(shown, "; "));
  f.summary = fmt::format(
      "rank {}'s network link is slow: its connections to {} peers back up (mean {:.0f} KiB "
      "queued) while connections between other ranks drain; every rank's collectives wait for "
      "it ({:.1f} ms per iteration)",
      slow, n_peers, own_bytes[slow] / 1024, Median(comm));
  f.suggestion =
      "check that rank's NIC and link (speed negotiated, errors, a rate limit, a congested or "
      "faulty switch port); move the rank off that node if it persists";
  return f;
}

void AddMetricFindings(const RankMetrics& metrics, const std::vector<pattern::CompactRank>& ranks,
                       Diagnosis* d) {
  std::optional<Finding> link = DiagnoseSlowLink(metrics, ranks);
  if (!link) return;
  std::erase_if(d->findings, [](const Finding& f) {
    return f.finding_class == FindingClass::kAll &&
           (f.category == "communication" || f.category == "low_bandwidth");
  });
  d->findings.push_back(std::move(*link));
  std::stable_sort(d->findings.begin(), d->findings.end(),
                   [](const Finding& a, const Finding& b) { return a.impact_ms > b.impact_ms; });
}

}  // namespace perftracker::diagnose
