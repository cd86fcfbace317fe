// The one `missing_rank` finding of a diagnosis: which ranks did not report, and why. Offline the
// only reason is that no trace or summary of the rank was given (the world size names more ranks
// than there are traces); online the server says why each rank is silent
// (server/rank_state.h ExplainMissing): its process exited, its node agent is gone, the profile
// command never reached it, or it made no iteration since the command. diagnose::Diagnose builds
// the finding here for both, so a window never has two findings for the same silent ranks.
//
// The reasons are one table, PT_MISSING_REASONS (as Perfetto's storage/stats.h): the enum value,
// the name in the JSON, the words of the summary, how the reason is known (evidence) and what to
// do (suggestion). A new reason is one row.
#ifndef PERFTRACKER_DIAGNOSE_MISSING_RANKS_H_
#define PERFTRACKER_DIAGNOSE_MISSING_RANKS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diagnose/finding.h"

namespace perftracker::diagnose {

// X(enum, name, summary words, how it is known, what to do). Rows in the order the summary lists
// the reasons: the most definite first.
#define PT_MISSING_REASONS(X)                                                                      \
  X(kRankDead, "rank_dead", "dead",                                                                \
    "its node agent saw the worker's connection close and its process end",                        \
    "Look at how the rank's process ended: its exit status and last output in the job's log, "     \
    "the kernel log for the OOM killer (dmesg), a Python exception or a signal.")                  \
  X(kEndedBeforeWindow, "ended_before_window", "ended before the window",                          \
    "its process exited normally (its exit hook ran) before the window's first iteration: the "    \
    "job ended before the window could profile it",                                                \
    "Nothing to do: a window opened in a job's last iterations profiles nothing. Not a finding: "  \
    "the diagnosis notes it.")                                                                     \
  X(kAgentGone, "agent_gone", "agent gone",                                                        \
    "the node agent serving the rank stopped calling the server (no command stream, no call "      \
    "since)",                                                                                      \
    "Check the rank's node: is its `perftracker agent` running (or the launcher that embeds it), " \
    "and can it reach the server (network, token, TLS)? The rank itself may be fine.")             \
  X(kCommandNotDelivered, "command_not_delivered", "command not delivered",                        \
    "the window's profile command did not reach the rank: its agent did not confirm it, or the "   \
    "agent had no connection from the rank's worker, or the worker did not acknowledge it",        \
    "Check that the rank's worker connects to its node agent (PERFTRACKER_AGENT_SOCKET, the "      \
    "agent's log) and that the agent's command stream to the server is up.")                       \
  X(kNoIterationSinceCommand, "no_iteration_since_command", "no iteration since the command",      \
    "its agent relayed the command, but the rank reported no iteration since (or none at all: "    \
    "it never learned an iteration), so it never reached the window's first iteration",            \
    "The rank is stuck or never started its training loop: dump its stacks (py-spy dump --pid "    \
    "PID), look for a collective it waits in (NCCL_DEBUG=INFO), or a loop the iteration "          \
    "detector does not see (call perftracker.step() once per iteration).")                         \
  X(kNoTrace, "no_trace", "no trace or summary",                                                   \
    "the world size names more ranks than there are traces; a rank that crashed, hung or was "     \
    "not profiled writes none, and its problems cannot be seen",                                   \
    "Collect every rank's trace: check the profiler output folder of the missing ranks and "       \
    "whether those processes crashed or hung.")                                                    \
  X(kUnknown, "unknown", "reason unknown",                                                         \
    "nothing the server knows explains the silence (the rank may have profiled and its summary "   \
    "failed to build or upload)",                                                                  \
    "Read the node agent's log (perftracker.log) for the window: a summary that failed to build "  \
    "or upload says so there; check that the rank's process is alive.")

enum class MissingReason {
#define PT_MISSING_REASON_ENUM(e, name, words, how, suggestion) e,
  PT_MISSING_REASONS(PT_MISSING_REASON_ENUM)
#undef PT_MISSING_REASON_ENUM
};

struct MissingReasonInfo {
  MissingReason reason;
  const char* name;        // in the JSON: "rank_dead", ...
  const char* words;       // in the summary: "dead", ...
  const char* how;         // how the reason is known
  const char* suggestion;  // what to do
};

inline constexpr std::array kMissingReasons = {
#define PT_MISSING_REASON_ROW(e, name, words, how, suggestion) \
  MissingReasonInfo{MissingReason::e, name, words, how, suggestion},
    PT_MISSING_REASONS(PT_MISSING_REASON_ROW)
#undef PT_MISSING_REASON_ROW
};

// The table's row of R.
const MissingReasonInfo& Describe(MissingReason r);
// The reason named NAME ("rank_dead"), if any.
std::optional<MissingReason> MissingReasonNamed(std::string_view name);

// One rank that did not report, and why.
struct MissingRank {
  int rank = -1;
  MissingReason reason = MissingReason::kUnknown;
  // What is known of this rank in particular, in words: "process exited at iteration 57",
  // "last iteration 12". Empty: nothing beyond the reason.
  std::string detail;
  int64_t last_iteration = -1;  // the rank's last reported iteration (-1: none or unknown)
};

// The ranks a diagnosis lacks, as a caller that knows whom it waited for says (the online
// server: a window's expected ranks that did not upload, with their reasons). Without it,
// Diagnose takes every rank under the traces' world size without a trace as missing (kNoTrace).
struct MissingRanks {
  std::vector<MissingRank> ranks;
  int64_t window_id = 0;         // 0: not a window (offline)
  int64_t start_iteration = -1;  // the window's first iteration (-1: none)
  double deadline_s = 0;         // the window's profiling time limit (0: none)
  int expected = 0;              // ranks expected in all (0: the job's world size)
};

// Per-rank evidence and details are kept for this many ranks (the lowest): at 10,000 silent
// ranks the finding stays small; the counts and rank lists cover every one.
inline constexpr size_t kMaxDetailedMissingRanks = 16;

// Whether a rank missing for REASON is a problem: a rank whose job ended before the window is not
// (its note says so; it gets no finding).
bool IsProblem(MissingReason reason);

// The one finding for MISSING; REPORTED ranks did report, of EXPECTED in all. Nothing when no
// rank is missing (ranks that are no problem, IsProblem, are left out: callers split them off). The
// summary groups the ranks by reason, most definite first:
//   "ranks 1,3 did not report for window 1: rank 1 dead (process exited at iteration 57); rank 3
//    no iteration since the command (last iteration 12). The diagnosis covers 2 of 4 ranks."
// One reason only: "rank 2 missing: no trace or summary. The diagnosis covers 3 of 4 ranks."
std::optional<Finding> MissingRankFinding(const MissingRanks& missing, int reported, int expected);
// The job note of the same ranks: "rank 2 of 4 missing: no trace or summary".
std::string MissingRankNote(const MissingRanks& missing, int expected);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_MISSING_RANKS_H_
