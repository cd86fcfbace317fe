#include "diagnose/what_if.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
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
  double main_us = 0, other_us = 0, gpu_us = 0;
  for (const pattern::CompactFunction& f : rank.compact) {
    const double us = CollectiveTimeUs(f, rank.has_self);
    if (us == 0 || pattern::IsPointToPoint(f.name(), f.info->stack)) continue;
    (trace::IsGpuKind(f.kind()) ? gpu_us : f.main_thread ? main_us : other_us) += us;
  }
  return UsToMs(gpu_us + std::max(main_us, other_us));
}

// What RANK's collectives would take less at GBPS of bus bandwidth (ms an iteration), counted as
// GroupWaitMs counts their time; SIZED: whether any of them has a known message size.
double BandwidthGapMs(const pattern::CompactRank& rank, double gbps, bool* sized) {
  double main_us = 0, other_us = 0, gpu_us = 0;
  for (const pattern::CompactFunction& f : rank.compact) {
    const double us = CollectiveTimeUs(f, rank.has_self);
    if (us == 0 || pattern::IsPointToPoint(f.name(), f.info->stack)) continue;
    const pattern::CompactCollective c = rank.CollectiveOf(f);
    if (!(c.msg_bytes > 0) || !(c.busbw_gbps > 0)) continue;
    *sized = true;
    // A small message is latency-bound: a faster link leaves its time as it is.
    if (c.msg_bytes < policy::kLargeMessageBytes || c.busbw_gbps >= gbps) continue;
    const double gap = us * (1.0 - c.busbw_gbps / gbps);
    (trace::IsGpuKind(f.kind()) ? gpu_us : f.main_thread ? main_us : other_us) += gap;
  }
  // The training thread's wait and gloo's worker are the same time: the larger of the two.
  return UsToMs(gpu_us + std::max(main_us, other_us));
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

}  // namespace perftracker::diagnose
