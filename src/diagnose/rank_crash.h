// rank_crash: how a job that died ended. The launcher knows which rank failed first and how (its
// exit code, or the fatal signal) and the last lines it wrote to stderr; the ranks' rings of
// collectives (pattern::CollectiveLog) say which collective it was in. The finding names that
// rank, the collective (number, group, op, sizes, the user's line) and the error, so that a
// crash reads as one line instead of "rank 1 exited with code 134" and a page of peers' errors.
// When the sequence diagnosis found the ranks out of step (collective_mismatch), that finding is
// the cause and this one the way it ended. A rank the kernel's OOM killer ended (its agent's
// cgroup and host counts) or whose last error is CUDA's out-of-memory (cuda_oom.h) is said to
// have run out of memory, with the limit it hit and the memory growth that led there
// (NameGrowthBeforeOom). Which rank failed first is the one whose error is its own, not a peer's
// lost connection to it (FirstToBlame: the launcher's reaping order is a race).
#ifndef PERFTRACKER_DIAGNOSE_RANK_CRASH_H_
#define PERFTRACKER_DIAGNOSE_RANK_CRASH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "pattern/collected.h"

namespace perftracker::diagnose {

// How one rank's process ended, as its launcher saw it.
struct RankExit {
  int rank = -1;
  int exit_code = 0;                    // as a shell says it: 128 + the signal for a signal
  int signal = 0;                       // the fatal signal; 0 when it exited
  std::vector<std::string> error_tail;  // its last lines on stderr, oldest first (may be empty)
  // Its memory, from its node agent (agent::Agent::MemoryAtEnd): whether its memory cgroup's OOM
  // killer counted a kill since its last report, that cgroup's limit (-1: none or unknown), its
  // resident memory and cgroup usage at its last report (-1: unknown) and that report's
  // iteration.
  bool oom_killed = false;
  double memory_limit_bytes = -1;
  double rss_bytes = -1;
  double cgroup_usage_bytes = -1;
  int64_t last_iteration = -1;
  // The CUDA caching allocator's snapshot its collector saved when an allocation failed
  // (torch.cuda.memory._snapshot(), pickled: PyTorch's memory_viz reads it); empty: none.
  std::string memory_snapshot = {};
};

// Whether a rank's last error lines say it failed because a peer went away (its connection closed
// or reset, its communicator aborted by a peer's error): the echo of another rank's crash.
bool LostAPeer(const std::vector<std::string>& error_tail);

// Which of FAILED, the ranks that failed on their own in the order they ended, to name first: the
// first whose error is its own, not a lost peer; the first of all where each of them lost a peer.
// The order the launcher reaps them in is a race: a rank that raises closes its connections as it
// exits, and a peer blocked in a collective with it can be reaped first (seen on CI, gloo on torch
// 1.13: rank 0 "Connection closed by peer" named over rank 1's own RuntimeError).
size_t FirstToBlame(const std::vector<RankExit>& failed);

// The collective_mismatch of a crash the backend says came from its peers' data of another size
// (gloo's pair: "op.preamble.length <= op.nbytes. 99976 vs 4"; c10d's check under
// TORCH_DISTRIBUTED_DEBUG=DETAIL: "Detected mismatch between collectives"), in a collective
// FIRST's ring shows it in: its peers (RANKS, the job's, but FIRST) were in another collective.
// Where the peers' records hold theirs, the sequence comparison names both (MismatchRule); this
// names the one the crashed rank made where they do not (torch 1.13: the worker's ring records
// the collectives made through torch.distributed's Python API, not DDP's gradient
// all-reduces). Nothing otherwise.
std::optional<Finding> CrashOutOfStepFinding(const RankExit& first,
                                             const std::vector<pattern::CollectiveLog>& logs,
                                             const std::vector<int>& ranks);

// The rank_crash finding of FIRST, the first rank that failed.
Finding RankCrashFinding(const RankExit& first, const std::vector<pattern::CollectiveLog>& logs);

// A crash out of memory (CRASH, RankCrashFinding's: its oom_kill or gpu_oom) on a rank a
// memory_growth finding of FINDINGS names, of the same memory (host for the OOM killer, GPU for
// CUDA's allocator): the growth that led there, in its summary and evidence
// (memory_growth_bytes_per_iteration, memory_growth_first_iteration). Anything else: unchanged.
void NameGrowthBeforeOom(const std::vector<Finding>& findings, Finding* crash);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_RANK_CRASH_H_
