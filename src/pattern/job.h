// Loads a job: the per-rank summaries of every trace (or summary file) named on the command
// line, summarized in parallel, then checked as a set (every file placed on a rank, no rank
// twice, one world size). This is the "map" half of offline analysis.
#ifndef PERFTRACKER_PATTERN_JOB_H_
#define PERFTRACKER_PATTERN_JOB_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "pattern/compact_job.h"
#include "pattern/pattern.h"

namespace perftracker::pattern {

struct LoadOptions {
  int threads = 0;  // 0 = hardware concurrency
};

struct LoadStats {
  size_t files = 0;
  uint64_t json_bytes = 0;  // uncompressed trace bytes read
  uint64_t events = 0;
  uint64_t skipped = 0;  // malformed + unknown events, summed over files
  // Thread-seconds of LoadCompactJob's parts over summary files (--stats): the files' bytes,
  // their decoding, and their addition to the compact job.
  double read_s = 0, decode_s = 0, add_s = 0;
};

// PATHs are trace files, summary files, or folders of either. Ranks come back sorted.
StatusOr<std::vector<RankSummary>> LoadJob(const std::vector<std::string>& paths,
                                           const LoadOptions& options = {},
                                           LoadStats* stats = nullptr);

// The same, streamed into the compact job form: summaries are added as they are read and
// dropped, so memory holds one compact job, not every summary.
StatusOr<CompactJob> LoadCompactJob(const std::vector<std::string>& paths,
                                    const LoadOptions& options = {}, LoadStats* stats = nullptr);

// Checks a set of summaries: unplaced files, duplicate ranks, mixed world sizes.
Status ValidateJob(const std::vector<RankSummary>& ranks);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_JOB_H_
