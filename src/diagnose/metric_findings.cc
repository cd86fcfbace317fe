#include "diagnose/metric_findings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "base/units.h"
#include "diagnose/all_rank_os.h"
#include "diagnose/causes.h"
#include "diagnose/finding_text.h"
#include "diagnose/peer_groups.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

constexpr std::string_view kPrefix = "tcp.sendq.";

struct Conn {
  int rank;
  std::string local, remote;
  double bytes;
};

// The rank that the two most-queued connections between different pairs of ranks share, or -1.
// A slow hop backs up its own rank's sends and its upstream peer's sends to it (their
// acknowledgements queue behind its traffic); the backpressure then spreads around a ring with
// ever smaller queues (measured, 100 Mbit/s cap on rank 2 of 4: 2->1 88 KiB, 3->2 53 KiB,
// 0->3 18 KiB, 1->0 7 KiB). Counting backed-up peers per rank cannot tell rank 2 from rank 3
// there; the two largest queues can.
int SharedEndpoint(const std::vector<Conn>& conns, const std::map<std::string, int>& owner,
                   double heavy) {
  std::vector<std::pair<double, std::pair<int, int>>> pairs;  // bytes, (lower, higher rank)
  for (const Conn& c : conns) {
    if (c.bytes < heavy) continue;
    auto it = owner.find(c.remote);
    if (it == owner.end() || it->second == c.rank) continue;
    pairs.push_back({c.bytes, {std::min(c.rank, it->second), std::max(c.rank, it->second)}});
  }
  std::sort(pairs.begin(), pairs.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 1; k < pairs.size(); ++k) {
    const auto [a, b] = pairs[0].second;
    const auto [c, d] = pairs[k].second;
    if (a == c && b == d) continue;  // another connection of the same pair
    if (a == c || a == d) return a;
    if (b == c || b == d) return b;
    return -1;
  }
  if (pairs.empty()) return -1;
  // One pair backed up, the rest under the bar: the smaller queues still lean toward the slow
  // end (its upstream peer's sends to it wait too), when they clearly do (measured, 100 Mbit/s
  // on rank 2 of 4: 2->1 80 KiB; 3->2 15.4 KiB, 1->0 10.6 KiB, 0->3 13.8 KiB).
  const auto [a, b] = pairs[0].second;
  double lean_a = 0, lean_b = 0;
  for (const Conn& c : conns) {
    auto it = owner.find(c.remote);
    if (c.bytes < policy::kLeanBytes || it == owner.end() || it->second == c.rank) continue;
    const int x = c.rank, y = it->second;
    if ((x == a && y == b) || (x == b && y == a)) continue;
    if (x == a || y == a) lean_a += c.bytes;
    if (x == b || y == b) lean_b += c.bytes;
  }
  if (lean_a >= policy::kLeanMargin * lean_b && lean_a > 0) return a;
  if (lean_b >= policy::kLeanMargin * lean_a && lean_b > 0) return b;
  return -1;
}

// Whether an endpoint ("ip:port", "[ip]:port") is on the loopback interface.
bool Loopback(std::string_view end) {
  return end.substr(0, 4) == "127." || end.substr(0, 5) == "[::1]" || end.substr(0, 4) == "::1:";
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
      // Loopback has no link to be slow: its queues back up only when a receiver is slow to
      // read (a rank starved of CPU on an oversubscribed host, a straggler), which the peer
      // comparison names as what it is.
      if (Loopback(ends.substr(0, gt)) || Loopback(ends.substr(gt + 1))) continue;
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
  const int slow = SharedEndpoint(conns, owner, heavy);
  if (slow < 0) return std::nullopt;
  const size_t n_peers = peers[slow].size();
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
  f.category = Category::kCommunication;
  f.confidence = policy::kConfidenceTimingOnly;
  f.ranks = {slow};
  std::vector<double> comm, iter;
  for (const auto& r : ranks) {
    double c = 0;
    for (const auto& fn : r.compact)
      if (fn.fclass() == pattern::FunctionClass::kCollective && fn.top_level) c += fn.per_iter_us;
    comm.push_back(UsToMs(c));
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
  double median_iter = internal::Median(iter);
  // The collectives' time is what the slow hop stretches on every rank (an upper bound: part of
  // it would remain on a healthy link).
  f.impact_ms = std::min(internal::Median(comm), median_iter);
  f.impact_fraction = median_iter > 0 ? f.impact_ms / median_iter : 0;
  f.evidence["backed_up_peers"] = static_cast<double>(n_peers);
  f.evidence["own_queued_kib"] = own_bytes[slow] / 1024;
  f.evidence["job_queued_kib"] = total / 1024;
  f.evidence["collective_ms_per_iteration"] = internal::Median(comm);
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
      slow, n_peers, own_bytes[slow] / 1024, internal::Median(comm));
  f.suggestion =
      "check that rank's NIC and link (speed negotiated, errors, a rate limit, a congested or "
      "faulty switch port); move the rank off that node if it persists";
  return f;
}

void AddMetricFindings(const RankMetrics& metrics, const std::vector<pattern::CompactRank>& ranks,
                       Diagnosis* d) {
  // The peer groups Diagnose found on these ranks, else (a diagnosis of other ranks) anew.
  if (d->peer_group.size() != ranks.size())
    d->peer_group = PeerGroupOf(internal::PeerGroups(ranks), ranks.size());
  const CauseInput in{metrics, d->job.iteration_ms_median, ranks, d->peer_group};
  for (Finding& f : d->findings) {
    AddOwnCpuTime(in, &f);
    if (!ExplainRankFinding(in, &f)) ExplainLoaderHandOff(in, &f);
  }
  std::map<int, std::string> hosts;
  for (const pattern::CompactRank& r : ranks) hosts[r.rank] = r.host;
  for (Finding& f : FindThrottledRanks(in, hosts, d->findings)) d->findings.push_back(std::move(f));
  for (Finding& f : FindSlowLoaderWorkers(in, hosts, d->findings))
    d->findings.push_back(std::move(f));
  for (Finding& f : FindContendedRanks(in, hosts, d->findings)) d->findings.push_back(std::move(f));
  if (std::optional<Finding> all = AllRanksThrottledRule().Find(metrics, in.iteration_ms, hosts)) {
    // Every rank throttled: the rank findings it explains are its parts, not causes of their own.
    std::erase_if(d->findings, [](const Finding& f) {
      return f.finding_class == FindingClass::kSubset && f.category == Category::kCpuThrottled;
    });
    d->findings.push_back(std::move(*all));
  }
  if (std::optional<Finding> io = AllRanksIoStallRule().Find(metrics, in.iteration_ms, hosts)) {
    // Every rank stalls on storage: a rank's own I/O finding is one part of it.
    std::erase_if(d->findings, [](const Finding& f) {
      return f.finding_class == FindingClass::kSubset && f.category == Category::kIoStall;
    });
    d->findings.push_back(std::move(*io));
  }
  if (std::optional<Finding> link = DiagnoseSlowLink(metrics, ranks)) {
    std::erase_if(d->findings, [](const Finding& f) {
      return f.finding_class == FindingClass::kAll &&
             (f.category == Category::kCommunication || f.category == Category::kLowBandwidth);
    });
    d->findings.push_back(std::move(*link));
  }
  internal::SortFindings(&d->findings);
}

}  // namespace perftracker::diagnose
