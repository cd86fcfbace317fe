// Peer grouping: which ranks the diagnosis compares with each other. Ranks of one role (the
// pipeline stage, from process-group membership) that run (nearly) the same significant
// functions are peers; the peer comparison (subset.cc) looks for outliers within each group,
// and reports (report/html.cc) colour ranks by their group's median. This unit owns the
// grouping rule and its cost: near-linear in ranks, since identical ranks are bucketed first.
#ifndef PERFTRACKER_DIAGNOSE_PEER_GROUPS_H_
#define PERFTRACKER_DIAGNOSE_PEER_GROUPS_H_

#include <cstddef>
#include <vector>

#include "pattern/compact_job.h"

namespace perftracker::diagnose {

// The groups of ranks the peer comparison compares with each other (the same role, nearly the
// same significant functions): indexes into job.ranks(), each group sorted. For reports.
std::vector<std::vector<size_t>> PeerGroups(const pattern::CompactJob& job);

// Each rank's group number (by index into the ranks GROUPS index, N of them): the peers of a
// rank are the ranks of its number (diagnose/causes.h CauseInput::peer_group).
std::vector<int> PeerGroupOf(const std::vector<std::vector<size_t>>& groups, size_t n);

namespace internal {

// The same on RANKS: indexes into RANKS, each group sorted; every rank is in exactly one group.
// Groups come in order of their first member's first appearance, groups of three or more
// first; a rank that resembles no large group stays in a small one (a singleton if alone).
// Signatures are built on THREADS threads (0: every core); the groups do not depend on it.
std::vector<std::vector<size_t>> PeerGroups(const std::vector<pattern::CompactRank>& ranks,
                                            size_t threads = 0);

// Replica sets: ranks that run a collective (not a point-to-point send or recv) on the same
// process group, or belong to the same process group other than the world, the pipeline's and
// the embedding's (where traces name no group for collectives), hold the same part of the model --
// data-parallel replicas of a stage, the tensor-parallel shards of its layers -- while ranks that
// only exchange point-to-point messages are different pipeline stages. The sets tell the stages of
// a pipeline apart where no process group is named for it (a hand-written pipeline on
// dist.send/recv and dist.new_group). For each rank (index into RANKS) a set number, or empty when
// some rank ran no collective at all in the window (nothing to go by: the sets would split ranks
// for lack of data).
// THREADS: each rank's groups are found on this many threads (0: every core).
std::vector<int> ReplicaSets(const std::vector<pattern::CompactRank>& ranks, size_t threads = 0);

}  // namespace internal
}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_PEER_GROUPS_H_
