// The diagnosis engine: compares behaviour patterns. Subset problems show as outliers against
// peers of the same role (robust median / MAD with minimum relative and absolute effects; a
// straggler is the rank whose own work is slower while its peers wait in collectives). All-rank
// problems show against expected patterns (GPU idle behind CPU work, sync calls, pageable
// copies, launch-bound kernels, low collective bandwidth, slow data loading).
#ifndef PERFTRACKER_DIAGNOSE_DIAGNOSE_H_
#define PERFTRACKER_DIAGNOSE_DIAGNOSE_H_

#include <vector>

#include "diagnose/finding.h"
#include "pattern/compact_job.h"
#include "pattern/pattern.h"

namespace perftracker::diagnose {

struct DiagnoseOptions {
  double min_relative = 0.10;  // an outlier must be this much above its peers' median...
  double min_abs_ms = 0.5;     // ...and cost at least this much per iteration
  // ...and at least this share of the iteration: below 5% a shared host's scheduling noise
  // moves single functions of healthy ranks (seen on 4 ranks sharing 2 cores), and PerfTracker's
  // own trigger is a 5% slowdown.
  double min_fraction = 0.05;
  double mad_k = 5.0;  // robust z-score threshold
  // Bus bandwidth a large collective should reach (NVLink-scale, single node). An assumption:
  // PCIe-only and cross-node jobs should lower it. Used by the low-bandwidth rule only.
  double expected_busbw_gbps = 50.0;
};

// JOB's ranks sorted by rank (CompactJob::SortByRank).
Diagnosis Diagnose(const pattern::CompactJob& job, const DiagnoseOptions& options = {});
// The same on full summaries, for small jobs: they are copied into a CompactJob and sorted.
Diagnosis Diagnose(const std::vector<pattern::RankSummary>& ranks,
                   const DiagnoseOptions& options = {});

// Regression between two runs: which functions changed and by how much (BASE vs TEST).
Diagnosis Diff(const std::vector<pattern::RankSummary>& base,
               const std::vector<pattern::RankSummary>& test, const DiagnoseOptions& options = {});

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_DIAGNOSE_H_
