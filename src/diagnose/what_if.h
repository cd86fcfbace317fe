// What fixing a finding gives: a replay of the window's iterations with the problem removed,
// beside the figure its rule states (impact.ms_per_iteration). A rule measures the problem where
// it is (a rank's excess over its peers' median, a function's time); the job gains only what the
// problem delays the others by. Ranks that meet in collectives wait there for the last one to
// arrive, so the time a rank spends in its collectives tells when it arrived: the rank that
// waits least arrives last and holds everyone (the critical rank; each rank's slack is how much
// longer it waits than that one). Removing a rank's problem makes it arrive that much sooner;
// the iteration shortens by how much sooner the last arrival then comes, which is at most the
// gap to the next-latest rank: a rank that is not last gains the job nothing.
//
// The model (the arrival replay): within each peer group (ranks of one role, meeting in the same
// collectives: diagnose/peer_groups.h) a rank arrives at -wait (its collective time per
// iteration, means over the window's iterations); a change moves some ranks' arrivals earlier
// by their problem's time; the saving is the latest arrival's move. A problem on every rank
// moves every arrival by its time: the saving is that time. A slower collective (a slow link, a
// low bus bandwidth) is transfer time every rank waits through: the saving is its time too.
// A pipeline's stages are several groups, each replayed on its own: a rank's fix moves its own
// stage's latest arrival (its stage's replicas and, through the stage's transfers, the stages
// beside it wait for that one). Another stage busier still would hold the iteration, but the
// stages' waits differ by their place in the schedule (the first stage waits for gradients,
// the last for activations), so one stage's waits say little of another's arrival; each
// stage's noise is taken out on its own. A rank's arrival is its wait in its own group's
// collectives, not its transfers to and from the stages beside it (pattern::IsPointToPoint):
// extra work first fills the rank's wait for its neighbour (the schedule's bubble), and only
// the rest delays its group. Measured on a real 2-stage pipeline: bench/what_if_accuracy.py. A
// stage that never waits in a collective says nothing of when it arrives: no replay then.
//
// Beside the replay: each iteration's critical path (which rank each group waited for, iteration
// by iteration, from the collectives' per-iteration times) and the re-timing of collectives at a
// bus bandwidth a person names (`perftracker whatif --busbw`).
//
// Owns the arrivals (per rank, from the job's summaries, and per iteration where known), the
// replay of findings over them, the critical path and the bus-bandwidth re-timing.
#ifndef PERFTRACKER_DIAGNOSE_WHAT_IF_H_
#define PERFTRACKER_DIAGNOSE_WHAT_IF_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "diagnose/finding.h"
#include "pattern/compact_job.h"

namespace perftracker::diagnose {

// RankArrival and Arrivals, the replay's input, are part of the Diagnosis (diagnose/finding.h).

// The time a rank spends in its collectives per iteration (us), as the peer comparison counts
// it (diagnose/subset.cc): the collectives' exclusive time on the CPU, their kernels' time on a
// GPU, none inside a Python frame (online, the op under a frame: counted by the frame's own row).
double CollectiveTimeUs(const pattern::CompactFunction& f, bool has_self);

// The arrivals of JOB's ranks, grouped as PEER_GROUP says (index into job.ranks()): each rank's
// wait is its collective time as CollectiveTimeUs counts it, less its transfers to other stages,
// a wait seen on two threads counted once (the training thread's and the backend's, the longer).
Arrivals CollectiveArrivals(const pattern::CompactJob& job, const std::vector<int>& peer_group);

// RANKS with each rank whose wait is within policy::kArrivalNoiseSigmas robust standard
// deviations of its group's median set to that median (each peer group on its own): the
// earliest of many ranks' noisy waits is early by the noise alone, and the replay would take it
// for the next rank to hold everyone (16 simulated ranks: a fault's saving read 17% short). A
// rank beyond it arrives as it did.
std::vector<RankArrival> WithoutNoise(const std::vector<RankArrival>& ranks);

// How much sooner the latest of GROUP's ranks arrives when the ranks in EARLIER arrive that many
// ms sooner (rank -> ms), their waits taken WithoutNoise: the iteration's saving under the
// arrival replay (>= 0).
double ArrivalSavingMs(const std::vector<RankArrival>& group, const std::map<int, double>& earlier);

// Each rank's slack (ms an iteration): how much longer it waits in its collectives than its
// group's last arrival (its stage's, in a pipeline); 0 for the critical rank(s). Ranks without a
// known arrival are left out.
std::map<int, double> SlackMs(const Arrivals& arrivals);

// The ranks that arrive at their collectives late beyond the group's noise (WithoutNoise's
// rule on SLACK, JobInfo::slack_ms_per_rank), the latest first, with how much longer the
// group's median rank waits for each (ms an iteration); empty when every rank arrives with the
// group. What the reports say of who the others wait for.
std::vector<std::pair<int, double>> LateRanks(const std::map<int, double>& slack);

// Each iteration's critical path through the ranks: per peer group, the rank that waited least
// in its collectives in that iteration (arrived last: the others waited for it) and its lead
// over the group's next rank, from ARRIVALS.iterations. CollectiveArrivals fills those for each
// group that waits somewhere and whose members' collectives all have per-iteration times
// (pattern::CompactRank::collective_iter_us), on the iterations every member has: matched by
// ProfilerStep number, else by position among the trace's iterations (the ones left out
// counted), as a window's ranks profile the same steps. Each rank's wait in an iteration is
// counted as the arrivals count the window's mean (a CPU collective's exclusive share of that
// iteration's time). Empty for one rank.
std::vector<CriticalIteration> CriticalPath(const Arrivals& arrivals);

// The ranks on CRITICAL's path, with in how many iterations each was there, most first.
std::vector<std::pair<int, int>> CriticalRankCounts(const std::vector<CriticalIteration>& critical);
// The same as the reports say it: "rank 2 in 5, rank 0 in 3 of 10 iterations" (the first five
// ranks, then "and N more"); empty for no path.
std::string CriticalPathPhrase(const std::vector<CriticalIteration>& critical);

// Sets what_if_ms and what_if_iteration_ms on every finding of D with a time cost that the
// replay covers (ITERATION_MS: the window's median iteration), notes a rule's figure beyond
// policy::kWhatIfOverclaim times the replay's in its evidence, and fills d->job.slack_ms_per_rank.
// A finding on some ranks gets evidence critical_iterations: in how many of d->job.critical_path's
// iterations one of them arrived last.
void AddWhatIf(const Arrivals& arrivals, Diagnosis* d);

// Changes a person names (perftracker whatif), each as how much sooner each rank arrives.
// Rank RANK computing no more than its group's median: it arrives when its peers' median does
// (earlier by how much less it waits than they do; none when it waits more). An error naming
// the rank when the job has no such rank or no arrival of it to go by.
StatusOr<std::map<int, double>> RankAtPeersMedian(const Arrivals& arrivals, int rank);
// Function NAME (a function's name as reports give it, or a Python frame's function part: "step"
// for "train.py(40): step"; its outermost calls where it calls itself) at its group's median on
// every rank, or removed (ZERO): how much sooner each rank arrives. An error when no rank runs
// it, or when it is a collective (its time is the others' too: the replay moves compute).
StatusOr<std::map<int, double>> FunctionAtPeersMedian(const pattern::CompactJob& job,
                                                      const Arrivals& arrivals,
                                                      std::string_view name, bool zero);

// Every collective whose messages moved below GBPS of bus bandwidth re-timed at GBPS: how much
// sooner the iteration ends (ms, >= 0). A collective's time on its group's critical rank (the
// one that waits least, so arrives last) is its transfer alone; on the others it also holds
// their wait for that rank, which a faster link does not shorten. Each group's saving is its
// critical rank's collectives re-timed (time x (1 - measured / GBPS), a wait seen on two threads
// counted once, as the arrivals count it); the job's, the most of any group's. Messages under
// policy::kLargeMessageBytes are latency-bound and transfers between pipeline stages are no
// arrival of the replay's: both keep their time. An error when no critical rank has a
// collective of known message size.
StatusOr<double> BusBandwidthSavingMs(const pattern::CompactJob& job, const Arrivals& arrivals,
                                      double gbps);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_WHAT_IF_H_
