// Peer grouping: ranks with identical signatures are bucketed by hash first (near-linear: at
// 100,000 ranks there are a handful of distinct signatures plus the odd ones), then buckets are
// grouped greedily against each group's first member within a role; a rank left in a group too
// small to vote joins the big group of its role it resembles most, if it resembles it enough.
// Buckets only merge identical ranks, so on small jobs the result is the rank-by-rank greedy
// grouping.
#include "diagnose/peer_groups.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "base/parallel_for.h"
#include "diagnose/policy.h"
#include "diagnose/rank_info.h"
#include "pattern/names.h"

namespace perftracker::diagnose {
namespace internal {
namespace {

using pattern::CompactFunction;
using pattern::CompactRank;
using Groups = std::vector<std::vector<size_t>>;

// Size of the intersection of two sorted id lists.
size_t Shared(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  size_t n = 0;
  auto i = a.begin(), j = b.begin();
  while (i != a.end() && j != b.end()) {
    if (*i < *j) {
      ++i;
    } else if (*j < *i) {
      ++j;
    } else {
      ++n, ++i, ++j;
    }
  }
  return n;
}

// What a rank runs, as sorted function ids: the significant ones (>= 1% of its iteration) and
// all of them, apart for the two parts of a window (the Python tracer's functions and the
// profiler's), since a rank may lack one of them (RankSummary::missing_part).
// Roles from replica sets (ReplicaSets) are numbered from here, apart from pipeline stages.
constexpr int kReplicaRoleBase = 1 << 24;

struct Signature {
  static constexpr int kPython = 0, kProfiler = 1;
  int role = -1;  // stage from process-group membership; -1 when unknown
  std::vector<uint32_t> sig[2], all[2];
  bool has[2] = {true, true};
  bool operator==(const Signature& o) const {
    return role == o.role && sig[0] == o.sig[0] && sig[1] == o.sig[1] && all[0] == o.all[0] &&
           all[1] == o.all[1] && has[0] == o.has[0] && has[1] == o.has[1];
  }
};

Signature SignatureOf(const CompactRank& r) {
  Signature s;
  s.role = r.role;
  if (r.missing_part == "python") s.has[Signature::kPython] = false;
  if (r.missing_part == "torch.profiler") s.has[Signature::kProfiler] = false;
  double it = IterationUs(r);
  // One sort per rank instead of four: each function as id << 1 | significant, so that a
  // significant instance of an id sorts after the others and the lists come out in id order.
  std::vector<uint64_t> keys[2];
  for (const CompactFunction& f : r.compact) {
    const int p =
        f.kind() == trace::EventKind::kPythonFunction ? Signature::kPython : Signature::kProfiler;
    const bool significant = it <= 0 || f.per_iter_us >= policy::kSignificantShare * it;
    keys[p].push_back(uint64_t{f.id()} << 1 | (significant ? 1 : 0));
  }
  for (int p = 0; p < 2; ++p) {
    std::sort(keys[p].begin(), keys[p].end());
    for (uint64_t k : keys[p]) {
      const auto id = static_cast<uint32_t>(k >> 1);
      if (s.all[p].empty() || s.all[p].back() != id) s.all[p].push_back(id);
      if ((k & 1) && (s.sig[p].empty() || s.sig[p].back() != id)) s.sig[p].push_back(id);
    }
  }
  return s;
}

uint64_t HashOf(const Signature& s) {
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(s.role + 1);
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (int p = 0; p < 2; ++p) {
    mix(s.has[p] ? 0xfffffffeull : 0xfffffffdull);
    for (uint32_t v : s.sig[p]) mix(v);
    mix(0xffffffffull);
    for (uint32_t v : s.all[p]) mix(v);
  }
  return h;
}

// How much of what matters on each rank the other runs at all: significant functions of A
// found anywhere in B, and of B in A. A function that is significant on one rank and merely
// cheaper on another (a sleeping loader's stack, a Python call path taken more often) is shared
// work, not a different role; only functions the other rank never runs set ranks apart. Only
// the parts both ranks have count.
double Similarity(const Signature& a, const Signature& b) {
  double n = 0, shared = 0;
  for (int p = 0; p < 2; ++p) {
    if (!a.has[p] || !b.has[p]) continue;
    n += static_cast<double>(a.sig[p].size() + b.sig[p].size());
    shared += static_cast<double>(Shared(a.sig[p], b.all[p]) + Shared(b.sig[p], a.all[p]));
  }
  return n <= 0 ? 1.0 : shared / n;
}

// Buckets of identical signatures, in order of first appearance.
Groups BucketIdentical(const std::vector<Signature>& sigs, const std::vector<uint64_t>& hashes) {
  Groups buckets;
  std::unordered_map<uint64_t, std::vector<size_t>> by_hash;  // hash -> bucket indices
  for (size_t i = 0; i < sigs.size(); ++i) {
    auto& cands = by_hash[hashes[i]];
    bool placed = false;
    for (size_t b : cands)
      if (sigs[buckets[b][0]] == sigs[i]) {
        buckets[b].push_back(i);
        placed = true;
        break;
      }
    if (!placed) {
      cands.push_back(buckets.size());
      buckets.push_back({i});
    }
  }
  return buckets;
}

// Similarity of two ranks by index; ranks of different roles are never alike.
class Likeness {
 public:
  explicit Likeness(const std::vector<Signature>& sigs) : sigs_(sigs) {}
  double operator()(size_t a, size_t b) const {
    return sigs_[a].role == sigs_[b].role ? Similarity(sigs_[a], sigs_[b]) : 0.0;
  }

 private:
  const std::vector<Signature>& sigs_;
};

// Each bucket joins the first group whose first member it resembles (policy::kGroupSimilarity),
// or starts a group.
Groups GroupBuckets(Groups buckets, const Likeness& sim) {
  Groups groups;
  for (auto& bucket : buckets) {
    bool placed = false;
    for (auto& g : groups) {
      if (sim(g[0], bucket[0]) >= policy::kGroupSimilarity) {
        g.insert(g.end(), bucket.begin(), bucket.end());
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back(std::move(bucket));
  }
  return groups;
}

// Groups too small to vote (under three ranks) come last; each of their ranks joins the large
// group it resembles most (policy::kMergeSimilarity at least), the rest stay together.
Groups MergeSmallGroups(Groups groups, const Likeness& sim) {
  Groups out;
  Groups small;
  for (auto& g : groups) (g.size() >= 3 ? out : small).push_back(std::move(g));
  for (auto& g : small) {
    std::vector<size_t> stay;
    for (size_t i : g) {
      int best = -1;
      double best_sim = policy::kMergeSimilarity;
      for (size_t k = 0; k < out.size(); ++k) {
        double s = sim(out[k][0], i);
        if (s >= best_sim) best = static_cast<int>(k), best_sim = s;
      }
      if (best >= 0) {
        out[best].push_back(i);
      } else {
        stay.push_back(i);
      }
    }
    if (!stay.empty()) out.push_back(std::move(stay));
  }
  return out;
}

}  // namespace

std::vector<int> ReplicaSets(const std::vector<CompactRank>& ranks, size_t threads) {
  // Each rank's groups, found in parallel: a group (a collective's group id, or a process
  // group's address: CompactJob stores each once) as a key, even for collectives, odd for
  // process groups. Empty: nothing to go by for that rank.
  std::vector<std::vector<uintptr_t>> keys(ranks.size());
  ParallelFor(ranks.size(), threads, [&](size_t i) {
    std::vector<uintptr_t>& k = keys[i];
    for (const CompactFunction& f : ranks[i].compact) {
      if (f.group == CompactFunction::kNoGroup) continue;
      const std::string op = pattern::CollectiveOp(f.name());
      if (op == "send" || op == "recv" || op == "send_recv") continue;  // between stages
      k.push_back(uintptr_t{f.group} << 1);
    }
    // Where collectives carry no group (gloo on CPU in torch 2.x), the process groups the rank
    // belongs to (the trace's pg_config): all but the world, the pipeline's own groups and the
    // embedding groups that tie the first stage to the last.
    for (const trace::ProcessGroup* pg : ranks[i].groups) {
      if (pg->ranks.size() < 2 || static_cast<int>(pg->ranks.size()) >= ranks[i].world_size ||
          pattern::IsPipelineGroup(*pg) || pattern::IsEmbeddingGroup(*pg)) {
        continue;
      }
      k.push_back(reinterpret_cast<uintptr_t>(pg) | 1);
    }
    std::sort(k.begin(), k.end());
    k.erase(std::unique(k.begin(), k.end()), k.end());
  });
  if (std::any_of(keys.begin(), keys.end(), [](const auto& k) { return k.empty(); })) return {};
  // Then the sets, on this thread: a union-find over the ranks, joined by the groups they share.
  std::vector<int> parent(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) parent[i] = static_cast<int>(i);
  const auto find = [&parent](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::unordered_map<uintptr_t, int> first_member;  // a group -> a rank in it
  first_member.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (uintptr_t key : keys[i]) {
      auto [it, fresh] = first_member.emplace(key, static_cast<int>(i));
      if (!fresh) parent[find(static_cast<int>(i))] = find(it->second);
    }
  }
  std::vector<int> set(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) set[i] = find(static_cast<int>(i));
  return set;
}

Groups PeerGroups(const std::vector<CompactRank>& ranks, size_t threads) {
  std::vector<Signature> sigs(ranks.size());
  ParallelFor(ranks.size(), threads, [&](size_t i) { sigs[i] = SignatureOf(ranks[i]); });
  // Without a pipeline group's name the replica sets tell the roles apart (ReplicaSets).
  const std::vector<int> sets = ReplicaSets(ranks, threads);
  std::vector<uint64_t> hashes(ranks.size());
  ParallelFor(ranks.size(), threads, [&](size_t i) {
    if (!sets.empty() && sigs[i].role < 0) sigs[i].role = kReplicaRoleBase + sets[i];
    hashes[i] = HashOf(sigs[i]);
  });
  const Likeness sim(sigs);
  Groups out = MergeSmallGroups(GroupBuckets(BucketIdentical(sigs, hashes), sim), sim);
  for (auto& g : out) std::sort(g.begin(), g.end());
  return out;
}

}  // namespace internal

std::vector<int> PeerGroupOf(const std::vector<std::vector<size_t>>& groups, size_t n) {
  std::vector<int> out(n, -1);
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i : groups[g])
      if (i < n) out[i] = static_cast<int>(g);
  return out;
}

std::vector<std::vector<size_t>> PeerGroups(const pattern::CompactJob& job) {
  return internal::PeerGroups(job.ranks());
}

}  // namespace perftracker::diagnose
