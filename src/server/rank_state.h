// One rank's iteration times over the whole run (RankState): count, mean, extremes and a
// bounded sample for percentiles, and a bounded series of bucket means for the report's chart.
// Fed by the agents' iteration reports; memory stays flat however long the run.
#ifndef PERFTRACKER_SERVER_RANK_STATE_H_
#define PERFTRACKER_SERVER_RANK_STATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "diagnose/diagnose.h"
#include "report/html.h"

namespace perftracker::server {

struct RankState {
  std::string host;
  int attempt = 0;  // the job's attempt of its latest report (server/attempts.h)
  int64_t last_step = -1;  // the furthest step of the current attempt
  int64_t attempt_iterations = 0;  // iterations reported in the current attempt
  double last_ms = 0;
  double sum_ms = 0;
  int64_t count = 0;
  double min_ms = 0, max_ms = 0;
  // Every iteration time up to a bound (percentiles at job end); beyond it a reservoir sample
  // keeps memory flat on long runs.
  std::vector<float> samples;
  uint64_t rng = 0x9e3779b97f4a7c15ull;

  static constexpr size_t kMaxSamples = 1 << 18;
  // The run's iteration times for the report's chart: bucket means of `stride` steps, at most
  // kMaxSeriesPoints (when full, neighbouring buckets merge and the stride doubles), so a long
  // run of 10,000 ranks stays near 60 MB.
  static constexpr size_t kMaxSeriesPoints = 512;
  std::vector<int64_t> series_steps;
  std::vector<float> series_ms;
  int64_t stride = 1;
  int64_t bucket_first = -1;  // the open bucket's first step
  double bucket_sum = 0;
  int bucket_n = 0;

  // One iteration STEP of MS milliseconds: into the statistics and the series.
  void AddStep(int64_t step, double ms);
  // Closes the open bucket into the series; merges neighbours when the series is full.
  void CloseBucket();
  // The series so far, with the open bucket.
  report::RunSeries Series(int rank) const;
  // One iteration time into the statistics only (no step known).
  void Add(double ms);
  // Count, mean, extremes and percentiles (from the sample) of the times added.
  diagnose::IterationStats Stats() const;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_RANK_STATE_H_
