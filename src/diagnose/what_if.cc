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

// The latest arrival's move when the ranks of EARLIER arrive that much sooner, on a group whose
// noise is already taken out (WithoutNoise).
double SavingOnQuiet(const std::vector<RankArrival>& quiet, const std::map<int, double>& earlier) {
  const double before = LatestArrival(quiet, {});
  const double after = LatestArrival(quiet, earlier);
  if (!std::isfinite(before) || !std::isfinite(after)) return 0;
  return std::max(0.0, before - after);
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
    double us = 0;
    for (const pattern::CompactFunction& f : r.compact) us += CollectiveTimeUs(f, r.has_self);
    a.wait_ms = UsToMs(us);
    if (a.known) total += a.wait_ms;
    out.ranks.push_back(a);
  }
  // One group of ranks meeting in the same collectives; ranks that never wait there (no
  // collective seen) say nothing of when they arrive.
  out.replayable = ranks.size() > 1 && groups.size() == 1 && total > 0;
  return out;
}

std::vector<RankArrival> WithoutNoise(const std::vector<RankArrival>& group) {
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

double ArrivalSavingMs(const std::vector<RankArrival>& raw, const std::map<int, double>& earlier) {
  return SavingOnQuiet(WithoutNoise(raw), earlier);
}

std::map<int, double> SlackMs(const Arrivals& arrivals) {
  std::map<int, double> out;
  if (!arrivals.replayable) return out;
  double least = std::numeric_limits<double>::infinity();
  for (const RankArrival& a : arrivals.ranks)
    if (a.known) least = std::min(least, a.wait_ms);
  for (const RankArrival& a : arrivals.ranks)
    if (a.known) out[a.rank] = a.wait_ms - least;
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
        "not recorded, or a pipeline's stages)",
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
        "{}: no arrivals at collectives to replay (no collectives, or a pipeline's stages)", name));
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

}  // namespace perftracker::diagnose
