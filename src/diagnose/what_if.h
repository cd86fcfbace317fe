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
// Pipeline stages (no single group of collectives) are not replayed yet: no what-if there.
//
// Owns the arrivals (per rank, from the job's summaries) and the replay of findings over them.
#ifndef PERFTRACKER_DIAGNOSE_WHAT_IF_H_
#define PERFTRACKER_DIAGNOSE_WHAT_IF_H_

#include <map>
#include <vector>

#include "diagnose/finding.h"
#include "pattern/compact_job.h"

namespace perftracker::diagnose {

// RankArrival and Arrivals, the replay's input, are part of the Diagnosis (diagnose/finding.h).

// The time a rank spends in its collectives per iteration (us), as the peer comparison counts
// it (diagnose/subset.cc): the collectives' exclusive time on the CPU, their kernels' time on a
// GPU, none inside a Python frame (online, the op under a frame: counted by the frame's own row).
double CollectiveTimeUs(const pattern::CompactFunction& f, bool has_self);

// The arrivals of JOB's ranks, grouped as PEER_GROUP says (index into job.ranks()).
Arrivals CollectiveArrivals(const pattern::CompactJob& job, const std::vector<int>& peer_group);

// How much sooner the latest of GROUP's ranks arrives when the ranks in EARLIER arrive that many
// ms sooner (rank -> ms): the iteration's saving under the arrival replay (>= 0).
double ArrivalSavingMs(const std::vector<RankArrival>& group, const std::map<int, double>& earlier);

// Each rank's slack (ms an iteration): how much longer it waits in its collectives than its
// group's last arrival; 0 for the critical rank(s). Ranks without a known arrival are left out.
std::map<int, double> SlackMs(const Arrivals& arrivals);

// Sets what_if_ms and what_if_iteration_ms on every finding of D with a time cost that the
// replay covers (ITERATION_MS: the window's median iteration), notes a rule's figure beyond
// policy::kWhatIfOverclaim times the replay's in its evidence, and fills d->job.slack_ms_per_rank.
void AddWhatIf(const Arrivals& arrivals, Diagnosis* d);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_WHAT_IF_H_
