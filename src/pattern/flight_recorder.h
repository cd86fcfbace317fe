// Reads the dumps of PyTorch's Flight Recorder (torch.distributed, torch >= 2.2 for NCCL and
// >= 2.8 for gloo too: TORCH_FR_BUFFER_SIZE, formerly TORCH_NCCL_TRACE_BUFFER_SIZE) into a
// rank's CollectiveLog (pattern/collected.h). torch writes one file per rank, named PREFIX<rank>
// (TORCH_FR_DUMP_TEMP_FILE, default /tmp/nccl_trace_rank_), as a pickle
// (_dump_fr_trace) or as JSON (_dump_fr_trace_json); both hold the same dict:
//   {"version": "2.10", "pg_config": {NAME: {"name", "desc", "ranks": "[0, 1]"}},
//    "pg_status": {NAME: {"last_enqueued_collective": 10, ...}},
//    "entries": [{"process_group": ("0", "default_pg"), "collective_seq_id": 10,
//                 "p2p_seq_id": 0, "is_p2p": false, "profiling_name": "gloo:all_reduce",
//                 "input_sizes": [[36]], "input_dtypes": ["Float"], "state": "scheduled",
//                 "time_created_ns": T, "frames": [{"name", "filename", "line"}, ...]}, ...]}
// The pickle is read by trace/pickle.h (plain data only, never executed); a dump over
// limits::kMaxFlightRecorderDump is refused before it is read, and one whose entries would
// become more than limits::kMaxFlightRecorderExpanded once copied out (a memoized value referred
// to from millions of places) while it is read. Entries without a sequence id or
// a name are counted as skipped, not fatal: the ring of a rank is evidence, and most of it is
// better than none.
#ifndef PERFTRACKER_PATTERN_FLIGHT_RECORDER_H_
#define PERFTRACKER_PATTERN_FLIGHT_RECORDER_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "pattern/collected.h"

namespace perftracker::pattern {

// Whether a file's first bytes can be a Flight Recorder dump: a pickle of protocol 2-5, or a
// JSON object whose first key is one the dump has.
bool LooksLikeFlightRecorder(std::string_view head);

// One dump from memory; NAME names it in errors, RANK is the rank it belongs to (the dump itself
// does not say). *SKIPPED, when given, receives the number of entries left out.
StatusOr<CollectiveLog> ParseFlightRecorder(std::string_view bytes, const std::string& name,
                                            int rank, int* skipped = nullptr);

// One dump file; its rank from its name (rank-3, nccl_trace_rank_3: the trailing number).
StatusOr<CollectiveLog> ReadFlightRecorderFile(const std::string& path, int* skipped = nullptr);

// The rank a dump's file name gives, -1 when none does.
int FlightRecorderRank(const std::string& path);

// The files among PATHS (files or folders, not recursed) whose first bytes look like a dump;
// files named directly must be dumps. Sorted.
StatusOr<std::vector<std::string>> FindFlightRecorderDumps(const std::vector<std::string>& paths);

// FROM's calls that INTO lacks (by group and number; INTO's own are kept: torch's dump has what
// the worker's ring has and more) added to INTO, all in the order they were made.
void MergeCollectiveLog(CollectiveLog from, CollectiveLog* into);

// Every dump of FILES (FindFlightRecorderDumps), one log per rank: a rank's files (torch's dump
// and the worker's ring) are merged, the first one read first (sort torch's before the ring's).
// A dump that cannot be read (damaged, hostile, or past what the set's dumps may become once
// read: limits::kMaxFlightRecorderSetExpanded) is left out with a note, the first
// kMaxUnreadNamed of them by name; entries skipped are NOTES too.
inline constexpr size_t kMaxUnreadNamed = 8;
std::vector<CollectiveLog> ReadFlightRecorderDumps(const std::vector<std::string>& files,
                                                   std::vector<std::string>* notes);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_FLIGHT_RECORDER_H_
