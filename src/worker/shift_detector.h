// The slowdown trigger: decides, from a rank's iteration times alone, that the job runs
// slower than it did, against the job's own measured noise. It knows nothing about Python.
//
// After the iteration is learned it skips a warm-up, then measures a reference over a number
// of iterations: their median (the reference time), their spread (1.4826 x MAD) and their lag-1
// autocorrelation (iteration times on a shared host drift: neighbours are alike; the upper end
// of its estimate is used). When its halves ran at clearly different levels (a slowdown began
// while it was measured), the faster half is the reference. From then on
// it watches the median of the last `recent` iterations; it fires when that median stays above
// the threshold for `sustain` iterations in a row and `sustain_s` seconds of them (a shift of a
// second is over before the window it would open begins). The threshold is the larger of
//   - floor_share x min_ratio x reference: a slowdown of min_ratio (the smallest worth a
//     profiling window) lands clearly above it, not on it, and
//   - z x the standard error of a `recent`-iteration median under the measured noise:
//     1.2533 x sigma / sqrt(n_eff), n_eff = recent x (1 - rho) / (1 + rho).
// So on a quiet host (sigma ~1%) a sustained 5% slowdown fires within about 20 iterations and 2 s,
// while on a noisy one (sigma 15%, neighbours correlated) only a shift well beyond what the job
// does by itself fires. A second, long moving median (`long_recent` iterations) has its own
// threshold from the same noise, about half the short one's margin (never under the floor): a
// small slowdown that a shared host's noise hides from the short median fires there, later
// (measured: 4 ranks on 2 cores put the short margin at +8-13%, and a straggler that really
// added +5-6% opened no window in 3 of 4 runs; replayed on their step times the long median
// fired on 3 of the 4 and on none of 10 clean runs). A median ignores single outliers (a GC pause,
// a checkpoint); a trigger re-arms once the median is back under the threshold, and while it has
// not, a second slowdown on top of the first (the median a further step above the level it fired
// at) fires again: a drift of a few percent that fired first must not hide the straggler that
// begins after it (seen on a CI host: a +3% drift fired, stayed above the threshold, and a +60%
// straggler 30 iterations later never fired). A reference measured while the host was turbulent is
// replaced by a later block of iterations whose threshold is much tighter (Remeasure): the detector
// is never blind for a whole job because its start was noisy.
//
// Not thread-safe (the IterationDetector that owns it is serialized by its caller).
#ifndef PERFTRACKER_WORKER_SHIFT_DETECTOR_H_
#define PERFTRACKER_WORKER_SHIFT_DETECTOR_H_

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/window_defaults.h"

namespace perftracker::worker {

struct ShiftConfig {
  // Iterations after learning before the reference: the first ones pay for warm-up (allocator,
  // caches, lazy initialization) and would make the reference too fast.
  int warmup = 10;
  // Iterations in the reference: enough for a median, a MAD and an autocorrelation.
  int reference = 50;
  // Iterations in the moving median that is compared with the reference: 20 halves its noise
  // against 10 at the cost of ten iterations of delay.
  int recent = 20;
  // Iterations in the long moving median: four times `recent` halves its noise, so a slowdown
  // half the size fires, about 40 iterations later.
  int long_recent = 80;
  // Iterations in a row the moving median must stay above the threshold...
  int sustain = 5;
  // ...and the seconds those iterations must last (window_defaults::kSlowdownSustainSeconds).
  double sustain_s = window_defaults::kSlowdownSustainSeconds;
  // The smallest relative slowdown that fires (on a quiet host): 5% of an iteration.
  double min_ratio = 0.05;
  // The threshold's floor as a share of min_ratio: a shift of exactly min_ratio must fire.
  double floor_share = 0.6;
  // How many standard errors of the moving median the shift must exceed. At 4, a noise-only
  // excursion of the median (1 in 30,000 per independent median for normal noise; the noise
  // estimate from 50 iterations is itself uncertain by ~15%) stays rare over a long run.
  double z = 4.0;

  Status Validate() const;
};

class ShiftDetector {
 public:
  explicit ShiftDetector(const ShiftConfig& config = {});

  // Adds one (clean) iteration's duration; true when the trigger fires on it.
  bool Add(int64_t duration_ns);
  // Forgets everything: a new warm-up and reference follow (the iteration was relearned).
  void Reset();

  bool referenced() const { return referenced_; }
  double reference_ns() const { return reference_ns_; }  // 0 before the reference is complete
  double sigma_ns() const { return sigma_ns_; }
  double rho() const { return rho_; }
  double threshold_ns() const { return threshold_ns_; }  // the moving median's firing level
  double long_threshold_ns() const { return long_threshold_ns_; }  // the long median's
  double recent_ns() const;       // the moving median now; 0 if none
  double long_recent_ns() const;  // the long moving median; 0 if none
  // The moving median that stands above its threshold (the short one first), else the short.
  double firing_ns() const;
  int64_t fired() const { return fired_; }
  // The level the trigger last fired at: the median of the iterations after it fired (see
  // SecondSlowdown); 0 while it is not active or fewer than `recent` iterations followed.
  double fired_level_ns() const { return active_ ? fired_level_ns_ : 0; }
  // The reference's two halves ran at different levels; the faster one was kept.
  bool level_change() const { return level_change_; }
  // Times a later, calmer block of iterations replaced the reference (see Remeasure).
  int64_t remeasured() const { return remeasured_; }

 private:
  void FinishReference();
  void Remeasure();
  bool SecondSlowdown(int64_t duration_ns, double median);
  // Whether a run of ABOVE iterations lasting ABOVE_NS is sustained (`sustain`, `sustain_s`).
  bool Sustained(int above, int64_t above_ns) const;

  ShiftConfig c_;
  int64_t seen_ = 0;
  std::vector<int64_t> ref_;
  bool referenced_ = false;
  bool level_change_ = false;
  double reference_ns_ = 0, sigma_ns_ = 0, rho_ = 0, threshold_ns_ = 0, long_threshold_ns_ = 0;
  std::vector<int64_t> recent_;  // ring of the last `recent` durations
  size_t recent_next_ = 0;
  std::vector<int64_t> long_;  // ring of the last `long_recent` durations
  size_t long_next_ = 0;
  // Whether the short or the long moving median stands above its threshold (a full ring each).
  bool ShortAbove() const;
  bool LongAbove() const;
  // The median of a ring (or of after_), computed in scratch_ (reserved for the longest): it runs
  // once an iteration on the training thread and allocates nothing there.
  double RingMedian(const std::vector<int64_t>& ring) const;
  mutable std::vector<double> scratch_;
  int above_ = 0;               // consecutive iterations with the moving median above the threshold
  int64_t above_ns_ = 0;        // ...and their time
  bool active_ = false;         // fired and not yet back under the threshold
  double fired_level_ns_ = 0;   // the level it last fired at (while active_)
  std::vector<int64_t> after_;  // iterations since it last fired, up to max(reference, recent)
  int above_fired_ = 0;         // consecutive iterations a further step above fired_level_ns_
  int64_t above_fired_ns_ = 0;  // ...and their time
  int64_t fired_ = 0;
  std::vector<int64_t> block_;  // iterations under the threshold since the last (re)measure
  struct Calm {
    double level, sigma, rho, margin, long_margin;
  };
  std::vector<Calm> calm_;  // the last blocks in a row whose margin was clearly tighter
  int64_t remeasured_ = 0;
};

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_SHIFT_DETECTOR_H_
