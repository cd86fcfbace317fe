// What the ranks' collectives say about how a job stopped: the rings of collectives and torch
// Flight Recorder dumps the workers leave in REPORT_DIR/collectives (at exit, on a hang, on a
// fatal signal; python/perftracker/collectives.py) compared by sequence number
// (diagnose/collective_sequence.h), and the launcher's first failure (diagnose/rank_crash.h).
// Used for a hang's diagnosis (the sequence view beside the stacks) and for the job's final one.
#ifndef PERFTRACKER_SERVER_JOB_END_H_
#define PERFTRACKER_SERVER_JOB_END_H_

#include <optional>
#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "diagnose/rank_crash.h"
#include "pattern/collected.h"

namespace perftracker::server {

// REPORT_DIR's folder of the ranks' collectives.
std::string CollectivesDir(const std::string& report_dir);

// DIR's dumps as read (pattern::ReadFlightRecorderDumps: a dump it cannot read is a note): read
// before the server's lock is taken, where the caller can (the job's end).
struct CollectiveDumps {
  std::vector<pattern::CollectiveLog> logs;
  std::vector<std::string> notes;
};
CollectiveDumps ReadCollectiveDumps(const std::string& dir);

// The sequence findings of DUMPS (none, without dumps) and, given FIRST, the rank_crash finding,
// put before D's findings; the dumps' notes join D's. STALLED_SECONDS: the findings' impact (0
// at the job's end). Returns how many findings were added.
size_t AddCollectiveFindings(CollectiveDumps dumps, const std::optional<diagnose::RankExit>& first,
                             double stalled_seconds, diagnose::Diagnosis* d);
// The same with DIR's dumps read now: a hang's diagnosis, under the server's lock (the ranks
// answered the stacks' request with their dumps just now; the set's memory is bounded,
// limits::kMaxFlightRecorderSetExpanded).
size_t AddCollectiveFindings(const std::string& dir, const std::optional<diagnose::RankExit>& first,
                             double stalled_seconds, diagnose::Diagnosis* d);

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_JOB_END_H_
