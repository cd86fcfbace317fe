// The job's healthy rate: what an iteration takes when nothing is wrong, from the iterations the
// detector measured unprofiled, before the job slowed down. One baseline window is one sample of
// ten profiled iterations, and a fault that begins before or inside it spoils it; the unprofiled
// history has hundreds of iterations and shows where the job's level changed.
//
// FindHealthyRate fits the history with two levels (the split that leaves the least absolute
// deviation around each side's median) and keeps the change when it stands out of the points'
// own noise (policy kChangeNoiseZ) and is worth explaining (kBaselineSlowdown): the healthy
// level is the faster side, the recent level the last one. A faster level before a slowdown
// counts only if it lasted kHealthyMinSeconds: a shorter one is the host settling after start.
// CheckBaseline says whether the baseline window is of the healthy job: not when the job slowed
// before it, nor when its own iterations step up within it (a change it straddles). The level of
// the job's last iterations before a window (HealthyRate::latest, filled by the server from its
// history) says how much slower than healthy the job ran unprofiled right then
// (UnprofiledRiseMs): a later window's changes since the baseline cost that at most.
//
// Owns: the change-point fit and the baseline's verdict. The server keeps the history
// (server/job_history.h); the comparison uses the verdict (diagnose/since_baseline.h).
#ifndef PERFTRACKER_DIAGNOSE_HEALTHY_RATE_H_
#define PERFTRACKER_DIAGNOSE_HEALTHY_RATE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pattern/pattern.h"

namespace perftracker::diagnose {

// One point of a history: an iteration, or the mean of a bucket of iterations from FIRST_STEP
// on (a long run keeps bucket means).
struct IterationPoint {
  int64_t step = 0;
  double ms = 0;
};

// A stretch of the history at one level.
struct IterationLevel {
  int64_t first_step = 0, last_step = 0;
  double ms = 0;  // the median of its points
  int points = 0;
};

struct HealthyRate {
  IterationLevel healthy;  // before the job slowed down; the whole history when it did not
  IterationLevel recent;   // where the history ends: the job's level now
  // The job's last unprofiled iterations before the window (policy kLatestSteps, one by one,
  // however long the run): what the job ran at right before it (points 0: unknown). The fit's
  // levels need kChangeMinSegment points and 4 standard errors; a window that profiles a
  // slowdown the fit has not yet separated, or one opened on the noise of a shared host, is
  // told apart by this level.
  IterationLevel latest;
  // Whether LATEST holds enough iterations to be a level (kChangeMinSegment).
  bool LatestKnown() const;
  // The first step of the slower level, when the job slowed down (recent is then slower than
  // healthy by kBaselineSlowdown at least and beyond the noise).
  std::optional<int64_t> slowdown_step;

  // How much slower the job runs now than when healthy (1: not at all).
  double Ratio() const { return healthy.ms > 0 ? recent.ms / healthy.ms : 1.0; }
  double RiseMs() const { return recent.ms - healthy.ms; }
  // How much slower than healthy the job ran unprofiled right before the window: the fit's rise
  // when it found a slowdown, else the latest level's (never below 0); nothing when neither is
  // known (too few latest iterations). What fixing a change since the healthy job gives.
  std::optional<double> UnprofiledRiseMs() const;
  // One line for the diagnosis' notes and findings.
  std::string Describe() const;
  // What profiling did to the window's iterations, for the notes: "profiled iterations ran
  // 1.12x the unprofiled ones (47.7 ms against 42.7 ms); figures are of profiled iterations"
  // (WINDOW_MS: the window's median iteration; the unprofiled ones: the latest level where known,
  // else the recent one; empty when either is unknown). The window's times carry the profiler's
  // own cost; the user reads them knowing by how much.
  std::string ProfilingInflation(double window_ms) const;
};

// The median level of POINTS (in step order; empty: a level of 0 points).
IterationLevel MedianLevel(std::span<const IterationPoint> points);

// The healthy rate of HISTORY (points in step order, window iterations already left out), or
// nothing when it holds too few points (policy kHealthyMinPoints).
std::optional<HealthyRate> FindHealthyRate(std::span<const IterationPoint> history);

// Whether a baseline window's profiled iterations step up within it: on kStraddleRanksShare of
// RANKS (the baseline's sampled ranks), the median of its later iterations is kBaselineSlowdown
// above that of its earlier ones, at the best split with three on each side.
bool StraddlesChange(const std::vector<pattern::RankSummary>& ranks);

// The verdict on a baseline window of iterations FIRST..LAST.
struct BaselineCheck {
  bool spoiled = false;
  std::string why;  // for the diagnosis: what spoiled it
};
// RATE: the history up to the window being diagnosed (null: unknown); RANKS: the baseline's
// sampled ranks (their profiled iterations).
BaselineCheck CheckBaseline(const HealthyRate* rate, int64_t first, int64_t last,
                            const std::vector<pattern::RankSummary>& ranks);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_HEALTHY_RATE_H_
