#include "diagnose/what_if.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "base/median.h"
#include "base/units.h"
#include "diagnose/cost_bound.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"
#include "diagnose/rank_info.h"
#include "pattern/names.h"

namespace perftracker::diagnose {
namespace {

// Transfer time every rank waits through alike: its fix shortens every rank's collectives.
bool CollectiveCost(Category c) {
  return c == Category::kCommunication || c == Category::kLowBandwidth;
}

// The latest arrival of GROUP with the ranks of EARLIER moved sooner by their ms (arrival: -wait).
double LatestArrival(const std::vector<RankArrival>& group, const std::map<int, double>& earlier) {
  double latest = -std::numeric_limits<double>::infinity();
  for (const RankArrival& a : group) {
    if (!a.known) continue;
    auto it = earlier.find(a.rank);
    latest = std::max(latest, -a.wait_ms - (it == earlier.end() ? 0.0 : it->second));
  }
  return latest;
}

// The latest arrival's move when the ranks of EARLIER arrive that much sooner, on one group whose
// noise is already taken out (WithoutNoise).
double GroupSaving(const std::vector<RankArrival>& quiet, const std::map<int, double>& earlier) {
  const double before = LatestArrival(quiet, {});
  const double after = LatestArrival(quiet, earlier);
  if (!std::isfinite(before) || !std::isfinite(after)) return 0;
  return std::max(0.0, before - after);
}

// RANKS split by their peer group: each group's members, in their order in RANKS.
std::map<int, std::vector<RankArrival>> ByGroup(const std::vector<RankArrival>& ranks) {
  std::map<int, std::vector<RankArrival>> out;
  for (const RankArrival& a : ranks) out[a.group].push_back(a);
  return out;
}

// The saving when the ranks of EARLIER arrive that much sooner: each group's latest arrival's
// move, the most of any group that holds one of them (a pipeline: the stage they are in).
double SavingOnQuiet(const std::vector<RankArrival>& quiet, const std::map<int, double>& earlier) {
  double saving = 0;
  for (const auto& [group, members] : ByGroup(quiet)) {
    bool moved = false;
    for (const RankArrival& a : members) moved = moved || earlier.count(a.rank) > 0;
    if (moved) saving = std::max(saving, GroupSaving(members, earlier));
  }
  return saving;
}

// What the replay says of F (ms an iteration), or < 0 where it says nothing. QUIET: the job's
// arrivals WithoutNoise; KNOWN: the ranks whose arrival is known.
double ReplayedSavingMs(const Arrivals& a, const std::vector<RankArrival>& quiet,
                        const std::set<int>& known, const Finding& f) {
  if (CollectiveCost(f.category) || f.finding_class != FindingClass::kSubset || a.single_rank)
    return f.impact_ms;
  if (!a.replayable) return -1;
  std::map<int, double> earlier;
  for (int r : f.ranks)
    if (known.count(r)) earlier[r] = f.impact_ms;
  if (earlier.empty()) return -1;  // none of its ranks' arrivals is known
  return SavingOnQuiet(quiet, earlier);
}

}  // namespace

double CollectiveTimeUs(const pattern::CompactFunction& f, bool has_self) {
  if (f.in_python || f.fclass() != pattern::FunctionClass::kCollective) return 0;
  return trace::IsGpuKind(f.kind()) ? f.per_iter_us : internal::SelfUs(f, has_self);
}

namespace {

// Calls ADD(bucket, us, f) for each of RANK's collectives whose time counts towards its wait
// (us an iteration; GroupWaitMs says which): bucket 0 the GPU's kernels, 1 the training
// thread's, 2 another thread's.
template <typename Add>
void ForEachWait(const pattern::CompactRank& rank, Add add) {
  for (const pattern::CompactCollective& c : rank.collectives) {
    const pattern::CompactFunction& f = rank.compact[c.index];
    const double us = CollectiveTimeUs(f, rank.has_self);
    if (us == 0 || pattern::IsPointToPoint(f.name(), f.info->stack)) continue;
    add(trace::IsGpuKind(f.kind()) ? 0 : f.main_thread ? 1 : 2, us, f);
  }
}

// The wait of the three buckets (ForEachWait): the training thread's wait and gloo's worker are
// the same time, so the larger of the two, plus the GPU's.
using Buckets = std::array<double, 3>;
double Combined(const Buckets& bucket) { return bucket[0] + std::max(bucket[1], bucket[2]); }

// The time a rank waits for the members of its own group (ms an iteration): its collective
// time less its transfers to and from other pipeline stages (pattern::IsPointToPoint). A
// stage's rank that computes more fills its wait for a neighbour stage's activations (the
// schedule's bubble) first: that wait shrinks, and only the rest of the extra work delays its
// group (a simulated tp=8,pp=2 job: counting the transfers, the replay said 44 ms for a rank
// whose removal gave nothing, and 73 for one that gave 39).
// A CPU collective is often seen twice: the training thread waits in Work.wait() while gloo's
// worker thread runs gloo:all_reduce, the same time again; summed, every gap between two ranks
// would read double (a real pipeline: 295 ms for 147). The wait is the longer of the two
// threads' (DDP's gradient all-reduce runs on the worker alone while the training thread is in
// backward), plus the GPU's collective kernels.
double GroupWaitMs(const pattern::CompactRank& rank) {
  Buckets b = {};
  ForEachWait(rank, [&](int k, double us, const pattern::CompactFunction&) { b[k] += us; });
  return UsToMs(Combined(b));
}

// RANK's wait in each iteration of its window (ms), counted as GroupWaitMs counts the mean; empty
// when a collective's per-iteration times are unknown.
std::vector<double> IterationWaitsMs(const pattern::CompactRank& rank) {
  const size_t n = rank.iterations;
  std::vector<Buckets> b(n);
  bool known = n > 0;
  ForEachWait(rank, [&](int k, double us, const pattern::CompactFunction& f) {
    const std::span<const float> v = rank.CollectiveIterations(f);
    if (v.size() != n) {
      known = false;
      return;
    }
    // A CPU collective's exclusive share of each iteration's time, as of its mean.
    const double share = f.per_iter_us > 0 ? us / f.per_iter_us : 0;
    for (size_t i = 0; i < n; ++i) b[i][k] += v[i] * share;
  });
  if (!known) return {};
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = UsToMs(Combined(b[i]));
  return out;
}

// What RANK's collectives would take less at GBPS of bus bandwidth (ms an iteration), counted as
// GroupWaitMs counts their time; SIZED: whether any of them has a known message size.
double BandwidthGapMs(const pattern::CompactRank& rank, double gbps, bool* sized) {
  Buckets b = {};
  ForEachWait(rank, [&](int k, double us, const pattern::CompactFunction& f) {
    const pattern::CompactCollective c = rank.CollectiveOf(f);
    if (!(c.msg_bytes > 0) || !(c.busbw_gbps > 0)) return;
    *sized = true;
    // A small message is latency-bound: a faster link leaves its time as it is.
    if (c.msg_bytes < policy::kLargeMessageBytes || c.busbw_gbps >= gbps) return;
    b[k] += us * (1.0 - c.busbw_gbps / gbps);
  });
  return UsToMs(Combined(b));
}

// Which iteration each of RANK's steady ones is: its ProfilerStep number where the trace has
// them, else its position among all the trace's iterations, the ones left out (cut, warm-up)
// counted; a window's ranks profile the same steps, so either names the same iteration on
// every rank. Empty (unknown) where its collectives' values are not over its steady iterations:
// an online window's torch trace may leave out a warm-up step its Python trace keeps, and
// which one is not kept when the two are merged (pattern/merge.h).
std::vector<int64_t> IterationIds(const pattern::CompactRank& rank) {
  const size_t n = rank.iterations;
  if (n == 0 || n != rank.iteration_ms.size()) return {};
  if (!rank.iteration_steps.empty())
    return rank.iteration_steps.size() == n ? rank.iteration_steps : std::vector<int64_t>{};
  std::set<int64_t> left_out;
  for (const pattern::ExcludedIteration& e : rank.excluded_iterations) left_out.insert(e.index);
  std::vector<int64_t> ids;
  for (int64_t at = 0; ids.size() < n; ++at)
    if (!left_out.count(at)) ids.push_back(at);
  return ids;
}

// One rank's waits in its iterations, and which iterations they are (IterationIds); both
// empty where unknown.
struct RankIterations {
  std::vector<double> waits;
  std::vector<int64_t> ids;
};

RankIterations IterationsOf(const pattern::CompactRank& rank) {
  RankIterations r{IterationWaitsMs(rank), IterationIds(rank)};
  if (r.waits.empty() || r.ids.size() != r.waits.size()) return {};
  return r;
}

// MEMBERS' waits in iteration ID (the positions where each has it), or none when a member
// lacks it.
std::optional<std::vector<double>> WaitsAt(const std::vector<RankIterations>& members, int64_t id) {
  std::vector<double> out;
  for (const RankIterations& m : members) {
    auto at = std::lower_bound(m.ids.begin(), m.ids.end(), id);
    if (at == m.ids.end() || *at != id) return std::nullopt;
    out.push_back(m.waits[static_cast<size_t>(at - m.ids.begin())]);
  }
  return out;
}

// The per-iteration waits of each group of A (the ranks of JOB, in A's order) whose members'
// are all known, on the iterations every member has; a group that never waits is left out.
std::map<int, GroupIterations> IterationsByGroup(const pattern::CompactJob& job,
                                                 const Arrivals& a) {
  const auto& ranks = job.ranks();
  std::map<int, std::vector<size_t>> groups;  // group -> its known ranks, index into RANKS
  for (size_t i = 0; i < a.ranks.size() && i < ranks.size(); ++i)
    if (a.ranks[i].known) groups[a.ranks[i].group].push_back(i);
  std::map<int, GroupIterations> out;
  for (const auto& [group, members] : groups) {
    if (members.size() < 2) continue;
    std::vector<RankIterations> its;
    its.reserve(members.size());
    double total = 0;
    for (size_t i : members) {
      its.push_back(IterationsOf(ranks[i]));
      if (its.back().ids.empty() || !std::is_sorted(its.back().ids.begin(), its.back().ids.end()))
        break;
      for (double ms : its.back().waits) total += ms;
    }
    if (its.size() != members.size() || its.back().ids.empty() || !(total > 0)) continue;
    GroupIterations g;
    g.members = members;
    g.waits.resize(members.size());
    // The iterations every member has (the first member's, where the others have them too).
    for (int64_t id : its.front().ids) {
      const std::optional<std::vector<double>> waits = WaitsAt(its, id);
      if (!waits) continue;
      g.ids.push_back(id);
      for (size_t m = 0; m < members.size(); ++m) g.waits[m].push_back((*waits)[m]);
    }
    if (!g.ids.empty()) out.emplace(group, std::move(g));
  }
  return out;
}

}  // namespace

Arrivals CollectiveArrivals(const pattern::CompactJob& job, const std::vector<int>& peer_group) {
  Arrivals out;
  const auto& ranks = job.ranks();
  out.single_rank = ranks.size() == 1;
  std::set<int> groups;
  double total = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const pattern::CompactRank& r = ranks[i];
    RankArrival a;
    a.rank = r.rank;
    a.group = i < peer_group.size() ? peer_group[i] : 0;
    groups.insert(a.group);
    // A rank without its torch.profiler part has no collectives to go by.
    a.known = r.missing_part.empty() || r.missing_part == "python";
    a.wait_ms = GroupWaitMs(r);
    if (a.known) total += a.wait_ms;
    out.ranks.push_back(a);
  }
  // Ranks that never wait in communication (no collective or transfer seen) say nothing of when
  // they arrive. Several groups (a pipeline's stages) are replayed each on its own, when each of
  // them waits somewhere.
  std::map<int, double> group_wait;
  for (const RankArrival& a : out.ranks)
    if (a.known) group_wait[a.group] += a.wait_ms;
  bool every_group_waits = group_wait.size() == groups.size();
  for (const auto& [group, ms] : group_wait) every_group_waits = every_group_waits && ms > 0;
  out.replayable = ranks.size() > 1 && total > 0 && every_group_waits;
  if (!out.single_rank) out.iterations = IterationsByGroup(job, out);
  return out;
}

namespace {

// One peer group's arrivals with its noise taken out (WithoutNoise's rule within GROUP).
std::vector<RankArrival> GroupWithoutNoise(const std::vector<RankArrival>& group) {
  std::vector<double> waits;
  for (const RankArrival& a : group)
    if (a.known) waits.push_back(a.wait_ms);
  if (waits.size() < 3) return group;  // no spread to tell noise by
  const double median = Median(waits);
  std::vector<double> deviations;
  for (double w : waits) deviations.push_back(std::fabs(w - median));
  const double sigma = kMadToSigma * Median(deviations);
  std::vector<RankArrival> out = group;
  for (RankArrival& a : out)
    if (a.known && std::fabs(a.wait_ms - median) <= policy::kArrivalNoiseSigmas * sigma)
      a.wait_ms = median;
  return out;
}

}  // namespace

std::vector<RankArrival> WithoutNoise(const std::vector<RankArrival>& ranks) {
  // Each group on its own: a pipeline's stages wait differently by their place in the schedule,
  // and that difference is not noise.
  const std::map<int, std::vector<RankArrival>> groups = ByGroup(ranks);
  if (groups.size() <= 1) return GroupWithoutNoise(ranks);
  std::map<int, RankArrival> quiet;  // by rank
  for (const auto& [group, members] : groups)
    for (const RankArrival& a : GroupWithoutNoise(members)) quiet[a.rank] = a;
  std::vector<RankArrival> out = ranks;
  for (RankArrival& a : out) a = quiet[a.rank];
  return out;
}

double ArrivalSavingMs(const std::vector<RankArrival>& raw, const std::map<int, double>& earlier) {
  return SavingOnQuiet(WithoutNoise(raw), earlier);
}

std::map<int, double> SlackMs(const Arrivals& arrivals) {
  std::map<int, double> out;
  if (!arrivals.replayable) return out;
  std::map<int, double> least;  // each group's least wait: its last arrival's
  for (const RankArrival& a : arrivals.ranks)
    if (a.known)
      least[a.group] =
          std::min(least.count(a.group) ? least[a.group] : std::numeric_limits<double>::infinity(),
                   a.wait_ms);
  for (const RankArrival& a : arrivals.ranks)
    if (a.known) out[a.rank] = a.wait_ms - least[a.group];
  return out;
}

std::vector<std::pair<int, double>> LateRanks(const std::map<int, double>& slack) {
  std::vector<RankArrival> group;
  for (const auto& [rank, ms] : slack) group.push_back({rank, 0, ms, true});
  const std::vector<RankArrival> quiet = WithoutNoise(group);
  std::vector<double> waits;
  for (const RankArrival& a : group) waits.push_back(a.wait_ms);
  const double median = Median(waits);
  std::vector<std::pair<int, double>> late;
  for (size_t i = 0; i < group.size(); ++i)
    if (group.size() >= 3 && quiet[i].wait_ms < median)  // beyond the noise, and early: waits less
      late.push_back({group[i].rank, median - group[i].wait_ms});
  std::sort(late.begin(), late.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return late;
}

namespace {

// In how many of CRITICAL's iterations one of RANKS was the last to arrive.
int IterationsLedBy(const std::vector<int>& ranks, const std::vector<CriticalIteration>& critical) {
  const std::set<int> mine(ranks.begin(), ranks.end());
  int n = 0;
  for (const CriticalIteration& it : critical) {
    n += std::any_of(it.ranks.begin(), it.ranks.end(),
                     [&](const CriticalRank& c) { return mine.count(c.rank) > 0; });
  }
  return n;
}

}  // namespace

void AddWhatIf(const Arrivals& arrivals, Diagnosis* d) {
  d->job.slack_ms_per_rank = SlackMs(arrivals);
  const double iteration = d->job.iteration_ms_median;
  // Once for every finding: the group without its noise, and which ranks it knows.
  const std::vector<RankArrival> quiet = WithoutNoise(arrivals.ranks);
  std::set<int> known;
  for (const RankArrival& a : arrivals.ranks)
    if (a.known) known.insert(a.rank);
  for (Finding& f : d->findings) {
    f.what_if_ms = f.what_if_iteration_ms = -1;
    f.evidence_text.erase("what_if");
    // Whether its ranks hold the others, iteration by iteration: a rank late on average may be
    // last in a few iterations only (an intermittent fault) or in every one.
    f.evidence.erase("critical_iterations");
    if (f.finding_class == FindingClass::kSubset && !f.ranks.empty() &&
        !d->job.critical_path.empty())
      f.evidence["critical_iterations"] = IterationsLedBy(f.ranks, d->job.critical_path);
    if (!IsTimeCost(f.category) || f.impact_ms <= 0) continue;
    double saving = ReplayedSavingMs(arrivals, quiet, known, f);
    if (saving < 0) continue;
    if (iteration > 0) saving = std::min(saving, iteration);
    f.what_if_ms = saving;
    if (iteration > 0) f.what_if_iteration_ms = iteration - saving;
    if (f.impact_ms > policy::kWhatIfOverclaim * saving)
      f.evidence_text["what_if"] = fmt::format(
          "its rule's figure, {:.1f} ms an iteration, is {} the replay's {:.1f} ms: the others "
          "arrive at their collectives no more than that before this rank does, so fixing it "
          "gives no more",
          f.impact_ms,
          saving > 0 ? fmt::format("{:.1f}x", f.impact_ms / saving) : std::string("beyond"),
          saving);
  }
}

StatusOr<std::map<int, double>> RankAtPeersMedian(const Arrivals& arrivals, int rank) {
  const RankArrival* self = nullptr;
  for (const RankArrival& a : arrivals.ranks)
    if (a.rank == rank) self = &a;
  if (self == nullptr) return InvalidArgument(fmt::format("rank {}: not in the job", rank));
  if (!arrivals.replayable || !self->known)
    return InvalidArgument(fmt::format(
        "rank {}: no arrival at collectives to replay (one rank, no collectives, its collectives "
        "not recorded, or a pipeline stage that never waits)",
        rank));
  std::vector<double> peers;
  for (const RankArrival& a : arrivals.ranks)
    if (a.known && a.rank != rank && a.group == self->group) peers.push_back(a.wait_ms);
  if (peers.empty()) return InvalidArgument(fmt::format("rank {}: no peers to compare with", rank));
  return std::map<int, double>{{rank, std::max(0.0, internal::Median(peers) - self->wait_ms)}};
}

namespace {

// Whether function INFO is NAME: its whole name, or a Python frame's function part.
bool NameIs(const std::string& full, std::string_view name) {
  if (full == name) return true;
  const size_t at = full.rfind("): ");
  return at != std::string::npos && std::string_view(full).substr(at + 3) == name;
}

// Whether a caller in STACK ("a;b;c") is NAME too: then this call is inside an outer one.
bool CalledFromItself(const std::string& stack, std::string_view name) {
  size_t start = 0;
  while (start <= stack.size()) {
    size_t end = stack.find(';', start);
    if (end == std::string::npos) end = stack.size();
    if (end > start && NameIs(stack.substr(start, end - start), name)) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

StatusOr<std::map<int, double>> FunctionAtPeersMedian(const pattern::CompactJob& job,
                                                      const Arrivals& arrivals,
                                                      std::string_view name, bool zero) {
  // Each rank's time in NAME's outermost calls, ms an iteration.
  std::map<int, double> time_of;
  bool seen = false;
  for (const pattern::CompactRank& r : job.ranks()) {
    double us = 0;
    for (const pattern::CompactFunction& f : r.compact) {
      if (!NameIs(f.name(), name) || CalledFromItself(f.info->stack, name)) continue;
      if (f.fclass() == pattern::FunctionClass::kCollective)
        return InvalidArgument(fmt::format(
            "{}: a collective (its time is every rank's wait too): the replay moves compute",
            name));
      us += f.per_iter_us;
      seen = true;
    }
    time_of[r.rank] = UsToMs(us);
  }
  if (!seen) return InvalidArgument(fmt::format("{}: no rank runs such a function", name));
  if (!arrivals.replayable && !arrivals.single_rank)
    return InvalidArgument(fmt::format(
        "{}: no arrivals at collectives to replay (no collectives, or a pipeline stage that never "
        "waits)",
        name));
  std::map<int, std::vector<double>> by_group;
  for (const RankArrival& a : arrivals.ranks) by_group[a.group].push_back(time_of[a.rank]);
  std::map<int, double> earlier;
  for (const RankArrival& a : arrivals.ranks) {
    const double t = time_of[a.rank];
    const double d = zero ? t : t - internal::Median(by_group[a.group]);
    if (d > 0) earlier[a.rank] = d;
  }
  return earlier;
}

StatusOr<double> BusBandwidthSavingMs(const pattern::CompactJob& job, const Arrivals& arrivals,
                                      double gbps) {
  if (!(gbps > 0)) return InvalidArgument(fmt::format("a bus bandwidth of {} GB/s", gbps));
  const auto& ranks = job.ranks();
  // Each group's critical rank: the known one that waits least (index into RANKS).
  std::map<int, size_t> critical;
  for (size_t i = 0; i < arrivals.ranks.size() && i < ranks.size(); ++i) {
    const RankArrival& a = arrivals.ranks[i];
    if (!a.known) continue;
    auto [it, added] = critical.emplace(a.group, i);
    if (!added && a.wait_ms < arrivals.ranks[it->second].wait_ms) it->second = i;
  }
  bool sized = false;
  double saving = 0;
  for (const auto& [group, i] : critical)
    saving = std::max(saving, BandwidthGapMs(ranks[i], gbps, &sized));
  if (!sized) {
    return NotFound(
        "no collective of known message size to re-time (a trace without collectives' sizes, "
        "or no rank whose collectives were recorded)");
  }
  return saving;
}

std::vector<CriticalIteration> CriticalPath(const Arrivals& arrivals) {
  std::map<int64_t, CriticalIteration> by_id;
  for (const auto& [group, g] : arrivals.iterations) {
    for (size_t it = 0; it < g.ids.size(); ++it) {
      size_t least = 0;
      double second = std::numeric_limits<double>::infinity();
      for (size_t m = 1; m < g.members.size(); ++m) {
        if (g.waits[m][it] < g.waits[least][it]) {
          second = g.waits[least][it];
          least = m;
        } else {
          second = std::min(second, g.waits[m][it]);
        }
      }
      CriticalIteration& out = by_id[g.ids[it]];
      out.iteration = static_cast<int>(g.ids[it]);
      out.ranks.push_back(
          {group, arrivals.ranks[g.members[least]].rank, second - g.waits[least][it]});
    }
  }
  std::vector<CriticalIteration> out;
  for (auto& [id, it] : by_id) out.push_back(std::move(it));
  return out;
}

std::vector<std::pair<int, int>> CriticalRankCounts(
    const std::vector<CriticalIteration>& critical) {
  std::map<int, int> count;
  for (const CriticalIteration& it : critical)
    for (const CriticalRank& c : it.ranks) ++count[c.rank];
  std::vector<std::pair<int, int>> out(count.begin(), count.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::string CriticalPathPhrase(const std::vector<CriticalIteration>& critical) {
  const std::vector<std::pair<int, int>> counts = CriticalRankCounts(critical);
  if (counts.empty()) return "";
  std::vector<std::string> parts;
  for (size_t i = 0; i < counts.size() && i < 5; ++i)
    parts.push_back(fmt::format("rank {} in {}", counts[i].first, counts[i].second));
  return fmt::format("{}{} of {} iterations", fmt::join(parts, ", "),
                     counts.size() > 5 ? fmt::format(" and {} more", counts.size() - 5) : "",
                     critical.size());
}

}  // namespace perftracker::diagnose
