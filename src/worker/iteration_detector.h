// Always-on iteration detector for the in-worker collector (PerfTracker's online trigger).
//
// It is fed three kinds of events from the training thread -- a DataLoader iterator's next(),
// an optimizer's step() and the user's optional `perftracker.step()` marker -- and knows nothing
// about Python. It learns the repeating sequence of those events (the iteration), reports each
// completed iteration, and raises two triggers: a slowdown (a sustained shift of the iteration
// time against the job's own measured noise: worker/shift_detector.h) and a hang (no event for
// `hang_factor` times the mean iteration). After `relearn_after` events that do not fit the
// learned sequence it forgets it and learns again.
//
// Every rank learns an iteration whatever its role: a rank with a DataLoader and an optimizer
// ("DO"), a pipeline stage without a DataLoader ("O": it only steps), an evaluation loop ("D"),
// or any loop that calls the marker ("M": then only markers count). An iteration runs from one
// start event to the next, so work after optimizer.step() (a checkpoint, logging, evaluation)
// belongs to the iteration it follows. Iterations are numbered by the optimizer steps (or
// markers, or loader batches) seen since the process began, so ranks of different roles agree on
// the number of the same step and a profiling window starts at the same step everywhere.
//
// Not thread-safe: the caller serializes OnEvent and CheckHang (the extension holds a mutex).
// Memory is bounded by the config (learning history and the duration window), never by the
// length of the run.
#ifndef PERFTRACKER_WORKER_ITERATION_DETECTOR_H_
#define PERFTRACKER_WORKER_ITERATION_DETECTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/window_defaults.h"
#include "worker/shift_detector.h"

namespace perftracker::worker {

enum class EventKind : uint8_t {
  kLoaderNext = 0,     // D: a DataLoader iterator's next()
  kOptimizerStep = 1,  // O: an optimizer's step() returned
  kMarker = 2,         // M: perftracker.step(), the user's end of an iteration
};
inline constexpr int kEventKinds = 3;

struct DetectorConfig {
  int learn_repeats = 10;  // M: identical repeats before a sequence is adopted
  int window = 50;         // N: iterations in the mean the hang check scales with
  // The slowdown trigger (ShiftConfig): the smallest sustained slowdown that fires on a quiet
  // host, the warm-up skipped after learning, and the reference iterations the job's own noise
  // is measured on.
  double slowdown_ratio = 0.05;
  int warmup_iterations = 10;
  int reference_iterations = 50;
  // Hang when silent for hang_factor x the mean iteration and for hang_min_s at least.
  double hang_factor = window_defaults::kHangFactor;
  double hang_min_s = window_defaults::kHangMinSeconds;
  int relearn_after = 200;  // K: unmatched events before re-learning
  int max_period = 64;      // longest event sequence considered one iteration

  // Checks the numbers are usable (positive, bounded).
  Status Validate() const;
  ShiftConfig Shift() const;
};

struct Iteration {
  int64_t index = 0;     // the optimizer steps (markers, batches) done before it began
  int64_t start_ns = 0;  // its start event (the first event after the last step)
  int64_t end_ns = 0;    // the next iteration's start event
  bool clean = true;     // no unmatched event inside it (only clean ones feed the triggers)
  int64_t duration_ns() const { return end_ns - start_ns; }
};

// What one event changed. Several flags can be set at once.
struct DetectorUpdate {
  bool learned = false;         // the sequence was adopted on this event
  bool started = false;         // this event began iteration `started_index`
  bool relearning = false;      // the sequence was dropped on this event
  bool iteration_done = false;  // `iteration` holds a completed iteration
  bool slowdown = false;        // the slowdown trigger fired on this iteration
  Iteration iteration;
  int64_t started_index = 0;
  double window_mean_ns = 0;  // with slowdown: the moving median that fired
  double best_mean_ns = 0;    // with slowdown: the reference it was compared with
};

class IterationDetector {
 public:
  explicit IterationDetector(DetectorConfig config = {});

  DetectorUpdate OnEvent(EventKind kind, int64_t ts_ns);

  // True once per silent gap: the sequence is learned and nothing arrived for
  // slack x hang_factor x the mean iteration (mean of the last `window` iterations), and for
  // hang_min_s at least. SLACK > 1
  // while something known slows the thread down (a traced profiling window).
  bool CheckHang(int64_t now_ns, double slack = 1.0);
  // While on, completed iterations are still reported but feed neither the statistics nor the
  // slowdown trigger: a profiling window's tracer slows them down by itself.
  void SetExcluded(bool on) { excluded_ = on; }

  bool learned() const { return learned_; }
  // The learned sequence, rotated to start at the first event after an optimizer step.
  const std::vector<EventKind>& pattern() const { return pattern_; }
  // "DO", "DDOO", "O", "M", ...: the pattern as letters (D = loader next, O = optimizer step,
  // M = marker).
  std::string PatternString() const;
  // The number of the iteration in progress (0 before the first learned start).
  int64_t iterations() const { return current_index_; }
  int64_t unmatched() const { return unmatched_total_; }
  int64_t relearn_count() const { return relearns_; }
  int64_t slowdown_count() const { return slowdowns_; }
  int64_t hang_count() const { return hangs_; }
  double mean_ns() const;  // mean of the last up-to-`window` iterations, 0 before any
  const ShiftDetector& shift() const { return shift_; }
  const DetectorConfig& config() const { return config_; }

 private:
  void Learn(EventKind kind, DetectorUpdate* up);
  // Whether the newest P events, repeated, may be adopted as the iteration.
  bool Adoptable(int p) const;
  void Track(EventKind kind, int64_t ts_ns, DetectorUpdate* up);
  void Start(int64_t ts_ns, DetectorUpdate* up);
  void Record(const Iteration& it, DetectorUpdate* up);
  void Reset();

  DetectorConfig config_;

  // Learning: a bounded history of kinds, and for each candidate period P the length of the
  // current run of events equal to the event P before them.
  std::vector<EventKind> history_;       // ring of the last learn_repeats * max_period kinds
  int64_t seen_ = 0;                     // events since learning started
  std::vector<int64_t> run_;             // run_[P]
  int64_t seen_kind_[kEventKinds] = {};  // events of each kind since learning started
  // Events of each kind since the process began (never reset): the iteration numbers.
  int64_t total_kind_[kEventKinds] = {};
  bool marker_mode_ = false;  // a marker was seen: only markers delimit iterations

  // Tracking the learned sequence.
  bool learned_ = false;
  std::vector<EventKind> pattern_;
  size_t pos_ = 0;                                // next expected index into pattern_
  EventKind anchor_ = EventKind::kOptimizerStep;  // the kind that numbers iterations
  int64_t anchors_per_iteration_ = 1;
  int64_t current_index_ = 0;
  bool any_start_ = false;  // an iteration has started since the process began
  int64_t cur_start_ns_ = 0;
  bool cur_valid_ = false;  // cur_start_ns_ is known
  bool cur_clean_ = true;
  int64_t unmatched_since_clean_ = 0;
  int64_t unmatched_total_ = 0;
  int64_t last_event_ns_ = 0;
  bool hang_reported_ = false;

  // Iteration statistics since (re)learning.
  int64_t iterations_ = 0;          // iterations completed since the process began
  std::vector<int64_t> durations_;  // ring of the last `window` clean iteration durations
  size_t dur_next_ = 0;
  int64_t dur_sum_ = 0;
  ShiftDetector shift_;
  bool excluded_ = false;  // SetExcluded

  int64_t relearns_ = 0;
  int64_t slowdowns_ = 0;
  int64_t hangs_ = 0;
};

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_ITERATION_DETECTOR_H_
