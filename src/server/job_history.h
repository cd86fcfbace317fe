// The job's unprofiled iteration history, for its healthy rate (diagnose/healthy_rate.h): each
// step's mean iteration time over the ranks that reported it, without the warm-up, the
// profiling windows' iterations and the few after each window that wait for its export
// (policy kHealthyWarmupIterations, kHealthyAfterWindow). Bounded however long the run: the
// newest kMaxSteps steps one by one, older ones folded into bucket means (at most kMaxOld), and
// Points gives at most kMaxPoints points (adjacent steps averaged) for the O(n^2) fit.
//
// Owns nothing but the numbers; the server feeds it from the iteration reports and the windows
// it opens, and starts it anew with each attempt (iterations are numbered from 0 again).
#ifndef PERFTRACKER_SERVER_JOB_HISTORY_H_
#define PERFTRACKER_SERVER_JOB_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "diagnose/healthy_rate.h"

namespace perftracker::server {

class JobHistory {
 public:
  static constexpr size_t kMaxSteps = 4096;
  static constexpr size_t kMaxOld = 1024;
  static constexpr size_t kMaxPoints = 512;

  // One rank's iteration STEP took MS.
  void Add(int64_t step, double ms);
  // A window profiles ITERATIONS from START: they, and the few after, are no measure of the rate.
  void ExcludeWindow(int64_t start, int iterations);
  // The unprofiled points before step UNTIL (exclusive; -1: all), in step order.
  std::vector<diagnose::IterationPoint> Points(int64_t until = -1) const;
  // The last N unprofiled steps before UNTIL (exclusive; -1: all), one by one (never bucket
  // means: a long run's Points are, and would blur a change of the last few dozen steps), in
  // step order; fewer when the steps kept one by one hold fewer.
  std::vector<diagnose::IterationPoint> Latest(int64_t until, size_t n) const;
  // A new attempt: its steps count from 0 again.
  void Reset();
  size_t steps() const { return steps_.size(); }

 private:
  struct Acc {
    double sum = 0;
    int n = 0;
  };
  bool Excluded(int64_t step) const;
  void FoldOldest();

  int64_t first_step_ = -1;  // the first step reported: the warm-up counts from it
  std::map<int64_t, Acc> steps_;
  std::vector<diagnose::IterationPoint> old_;  // folded bucket means, in step order
  std::vector<std::pair<int64_t, int64_t>> windows_;  // [first, last] excluded
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_JOB_HISTORY_H_
