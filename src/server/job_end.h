// What the ranks' collectives say about how a job stopped: the rings of collectives and torch
// Flight Recorder dumps the workers leave in REPORT_DIR/collectives (at exit, on a hang, on a
// fatal signal; python/perftracker/collectives.py) compared by sequence number
// (diagnose/collective_sequence.h), and the launcher's first failure (diagnose/rank_crash.h).
// Used for a hang's diagnosis (the sequence view beside the stacks) and for the job's final one.
#ifndef PERFTRACKER_SERVER_JOB_END_H_
#define PERFTRACKER_SERVER_JOB_END_H_

#include <optional>
#include <string>

#include "diagnose/finding.h"
#include "diagnose/rank_crash.h"

namespace perftracker::server {

// REPORT_DIR's folder of the ranks' collectives.
std::string CollectivesDir(const std::string& report_dir);

// The sequence findings of DIR's dumps (none, without dumps) and, given FIRST, the rank_crash
// finding, put before D's findings; the dumps' notes join D's. STALLED_SECONDS: the findings'
// impact (0 at the job's end). Returns how many findings were added.
size_t AddCollectiveFindings(const std::string& dir, const std::optional<diagnose::RankExit>& first,
                             double stalled_seconds, diagnose::Diagnosis* d);

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_JOB_END_H_
