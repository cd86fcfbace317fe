// The diagnosis engine: compares behaviour patterns. Subset problems show as outliers against
// peers of the same role (robust median / MAD with minimum relative and absolute effects; a
// straggler is the rank whose own work is slower while its peers wait in collectives). All-rank
// problems show against expected patterns (GPU idle behind CPU work, sync calls, pageable
// copies, launch-bound kernels, low collective bandwidth, slow data loading).
#ifndef PERFTRACKER_DIAGNOSE_DIAGNOSE_H_
#define PERFTRACKER_DIAGNOSE_DIAGNOSE_H_

#include <cstddef>
#include <vector>

#include "base/phase_times.h"
#include "diagnose/finding.h"
#include "diagnose/missing_ranks.h"
#include "diagnose/peer_groups.h"  // PeerGroups, for reports
#include "diagnose/policy.h"
#include "pattern/compact_job.h"
#include "pattern/pattern.h"

namespace perftracker::diagnose {

// The numbers users may tune per run; defaults and reasons in diagnose/policy.h.
struct DiagnoseOptions {
  double min_relative = policy::kMinRelative;
  double min_abs_ms = policy::kMinAbsMs;
  double min_fraction = policy::kMinFraction;  // --min-impact
  double mad_k = policy::kMadK;
  double expected_busbw_gbps = policy::kExpectedBusbwGbps;  // --expected-busbw
  // Threads the peer comparison analyzes its groups on; 0 = every core (base/parallel_for.h).
  // The findings do not depend on it.
  size_t threads = 0;
  // Where each phase's wall time goes (--stats); null: not timed.
  PhaseTimes* phases = nullptr;
};

// JOB's ranks sorted by rank (CompactJob::SortByRank). The ranks that did not report are one
// missing_rank finding (diagnose/missing_ranks.h), listed first: MISSING where the caller knows
// whom it waited for and why they are silent (the online server), else every rank under the
// traces' world size without a trace.
Diagnosis Diagnose(const pattern::CompactJob& job, const DiagnoseOptions& options = {},
                   const MissingRanks* missing = nullptr);
// The same on full summaries, for small jobs: they are copied into a CompactJob and sorted.
Diagnosis Diagnose(const std::vector<pattern::RankSummary>& ranks,
                   const DiagnoseOptions& options = {});

// How the findings of a diff name its two sides ("slower in TEST: 5 ms vs 2 ms in BASE"); the
// online server compares a window with the job's baseline window under other names.
struct DiffNames {
  std::string base = "BASE";
  std::string test = "TEST";
};

// Regression between two runs: which functions changed and by how much (BASE vs TEST).
Diagnosis Diff(const std::vector<pattern::RankSummary>& base,
               const std::vector<pattern::RankSummary>& test, const DiagnoseOptions& options = {},
               const DiffNames& names = {});

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_DIAGNOSE_H_
