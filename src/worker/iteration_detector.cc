// Design notes.
//
// Learning is incremental so that it costs O(max_period) per event and no allocation: for each
// candidate period P, run_[P] counts how many events in a row equalled the event P positions
// earlier. The last M*P events are M identical repeats exactly when run_[P] >= (M-1)*P, and the
// smallest adoptable such P is adopted (a smaller true period always reaches its run length
// before any multiple of it does).
//
// Which repeats are an iteration (Adoptable): any period holding two kinds (D O, D D O O, ...);
// optimizer steps alone after M in a row (a pipeline stage without a DataLoader: no training
// loop calls M optimizers in a row within one step); markers alone (the user said so); loader
// batches alone only after the whole history (M * max_period batches) holds nothing else, since
// gradient accumulation gives runs of batches up to max_period long before its step.
//
// The adopted window is rotated so that the iteration starts at the first event after an
// optimizer step -- PerfTracker's "first next() to last step()" -- or anywhere when it holds one
// kind. With several such points (e.g. D O D O O) the first one in the observed window wins; any
// fixed choice gives the same iteration length, which is what the triggers use. An iteration
// lasts from its start event to the next one, so what runs after the step (a checkpoint, a log
// line, an evaluation) is part of it: the hang check scales with the whole iteration and the
// window profiles it.
//
// Numbering: the iteration that starts on an event is numbered by the anchor events (optimizer
// steps, else markers, else batches) seen since the process began, this one included, divided by
// the anchors per iteration. A "DO" rank and an "O" rank of the same job give the iteration
// after step k the number k, whenever each learned; the number goes on across a relearn.
//
// After learning, each event either is the next expected one or is skipped as unmatched. An
// iteration with skipped events is still reported (marked not clean) but does not feed the
// slowdown statistics: it may contain an evaluation pass or a checkpoint. Unmatched events are
// counted since the last clean iteration, so sporadic noise never accumulates to a re-learn,
// while a changed sequence (no clean iteration any more) does after relearn_after events.
//
// Markers: the first perftracker.step() switches the detector to markers for good; loader and
// optimizer events then only prove the thread is alive (the hang check).
//
// Slowdown: ShiftDetector (worker/shift_detector.h) compares a moving median of the clean
// iterations with a reference measured after learning, against the job's own noise. It fires
// once per sustained shift and re-arms once the median is back under its threshold.
#include "worker/iteration_detector.h"

#include <algorithm>

#include "base/units.h"

namespace perftracker::worker {

Status DetectorConfig::Validate() const {
  if (learn_repeats < 2 || learn_repeats > 1000)
    return InvalidArgument("learn_repeats not in [2, 1000]");
  if (window < 1 || window > 100000) return InvalidArgument("window not in [1, 100000]");
  PT_RETURN_IF_ERROR(Shift().Validate());
  if (!(hang_factor > 1) || hang_factor > 1e6)
    return InvalidArgument("hang_factor not in (1, 1e6]");
  if (!(hang_min_s >= 0) || hang_min_s > 86400)
    return InvalidArgument("hang_min_s not in [0, 86400]");
  if (relearn_after < 1 || relearn_after > 10000000)
    return InvalidArgument("relearn_after not in [1, 1e7]");
  if (max_period < 2 || max_period > 4096) return InvalidArgument("max_period not in [2, 4096]");
  if (static_cast<int64_t>(learn_repeats) * max_period > 1 << 20) {
    return InvalidArgument("learn_repeats * max_period too large");
  }
  return Status::Ok();
}

ShiftConfig DetectorConfig::Shift() const {
  ShiftConfig s;
  s.min_ratio = slowdown_ratio;
  s.warmup = warmup_iterations;
  s.reference = reference_iterations;
  return s;
}

IterationDetector::IterationDetector(DetectorConfig config)
    : config_(config), shift_(config.Shift()) {
  history_.assign(static_cast<size_t>(config_.learn_repeats) * config_.max_period,
                  EventKind::kLoaderNext);
  run_.assign(config_.max_period + 1, 0);
  durations_.reserve(config_.window);
}

void IterationDetector::Reset() {
  learned_ = false;
  pattern_.clear();
  pos_ = 0;
  cur_valid_ = false;
  cur_clean_ = true;
  unmatched_since_clean_ = 0;
  seen_ = 0;
  std::fill(run_.begin(), run_.end(), 0);
  std::fill(std::begin(seen_kind_), std::end(seen_kind_), 0);
  // The iteration number is not reset: it counts the job's steps (total_kind_), so that it goes
  // on across a relearn. A window starts at a number the server picks from every rank's latest;
  // a rank whose number restarted at 0 would wait for it for the rest of the job.
  durations_.clear();
  dur_next_ = 0;
  dur_sum_ = 0;
  shift_.Reset();
}

std::string IterationDetector::PatternString() const {
  std::string s;
  for (EventKind k : pattern_) s += "DOM"[static_cast<int>(k)];
  return s;
}

double IterationDetector::mean_ns() const {
  if (durations_.empty()) return 0;
  return static_cast<double>(dur_sum_) / static_cast<double>(durations_.size());
}

DetectorUpdate IterationDetector::OnEvent(EventKind kind, int64_t ts_ns) {
  DetectorUpdate up;
  last_event_ns_ = ts_ns;
  hang_reported_ = false;
  ++total_kind_[static_cast<int>(kind)];
  if (kind == EventKind::kMarker && !marker_mode_) {
    marker_mode_ = true;
    if (learned_) {
      ++relearns_;
      up.relearning = true;
    }
    Reset();
  }
  if (marker_mode_ && kind != EventKind::kMarker) return up;  // alive, nothing more
  if (learned_) {
    Track(kind, ts_ns, &up);
  } else {
    Learn(kind, &up);
  }
  return up;
}

bool IterationDetector::Adoptable(int p) const {
  const auto cap = static_cast<int64_t>(history_.size());
  const EventKind first = history_[(seen_ - p) % cap];
  for (int i = 1; i < p; ++i) {
    if (history_[(seen_ - p + i) % cap] != first) return true;  // two kinds
  }
  switch (first) {
    case EventKind::kOptimizerStep:
    case EventKind::kMarker:
      return true;
    case EventKind::kLoaderNext:
      return run_[1] >= cap - 1;
  }
  return false;
}

void IterationDetector::Learn(EventKind kind, DetectorUpdate* up) {
  const auto cap = static_cast<int64_t>(history_.size());
  for (int p = 1; p <= config_.max_period; ++p) {
    if (seen_ >= p && history_[(seen_ - p) % cap] == kind) {
      ++run_[p];
    } else {
      run_[p] = 0;
    }
  }
  history_[seen_ % cap] = kind;
  ++seen_;
  ++seen_kind_[static_cast<int>(kind)];
  for (int p = 1; p <= config_.max_period; ++p) {
    if (run_[p] < static_cast<int64_t>(config_.learn_repeats - 1) * p) continue;
    if (!Adoptable(p)) continue;
    // The last p events, oldest first.
    std::vector<EventKind> win(p);
    for (int i = 0; i < p; ++i) win[i] = history_[(seen_ - p + i) % cap];
    int rot = 0;
    for (int r = 0; r < p; ++r) {
      if (win[r] != EventKind::kOptimizerStep &&
          win[(r + p - 1) % p] == EventKind::kOptimizerStep) {
        rot = r;
        break;
      }
    }
    pattern_.resize(p);
    for (int i = 0; i < p; ++i) pattern_[i] = win[(rot + i) % p];
    const auto has = [&](EventKind k) {
      return std::find(pattern_.begin(), pattern_.end(), k) != pattern_.end();
    };
    anchor_ = has(EventKind::kOptimizerStep) ? EventKind::kOptimizerStep
              : has(EventKind::kMarker)      ? EventKind::kMarker
                                             : EventKind::kLoaderNext;
    anchors_per_iteration_ = std::count(pattern_.begin(), pattern_.end(), anchor_);
    learned_ = true;
    up->learned = true;
    // The newest event is win[p-1]; the next expected one is win[0], i.e. pattern index p-rot.
    pos_ = static_cast<size_t>((p - rot) % p);
    cur_valid_ = false;  // the start of a partly seen iteration is unknown: skip it
    cur_clean_ = true;
    unmatched_since_clean_ = 0;
    return;
  }
}

void IterationDetector::Track(EventKind kind, int64_t ts_ns, DetectorUpdate* up) {
  if (kind != pattern_[pos_]) {
    ++unmatched_total_;
    cur_clean_ = false;
    if (++unmatched_since_clean_ >= config_.relearn_after) {
      ++relearns_;
      up->relearning = true;
      Reset();
      Learn(kind, up);
    }
    return;
  }
  if (pos_ == 0) Start(ts_ns, up);
  pos_ = (pos_ + 1) % pattern_.size();
}

void IterationDetector::Start(int64_t ts_ns, DetectorUpdate* up) {
  int64_t index = total_kind_[static_cast<int>(anchor_)] / anchors_per_iteration_;
  // The number never stands still nor goes back (extra anchors outside the pattern only move it
  // forward; the switch to markers starts their count afresh).
  if (any_start_ && index <= current_index_) index = current_index_ + 1;
  any_start_ = true;
  if (cur_valid_) {
    Iteration it;
    it.index = current_index_;
    it.start_ns = cur_start_ns_;
    it.end_ns = ts_ns;
    it.clean = cur_clean_;
    Record(it, up);
  }
  cur_start_ns_ = ts_ns;
  cur_valid_ = true;
  cur_clean_ = true;
  current_index_ = index;
  up->started = true;
  up->started_index = index;
}

void IterationDetector::Record(const Iteration& it, DetectorUpdate* up) {
  ++iterations_;
  up->iteration_done = true;
  up->iteration = it;
  if (!it.clean || excluded_) return;
  unmatched_since_clean_ = 0;
  const int64_t d = it.duration_ns();
  if (durations_.size() < static_cast<size_t>(config_.window)) {
    durations_.push_back(d);
  } else {
    dur_sum_ -= durations_[dur_next_];
    durations_[dur_next_] = d;
    dur_next_ = (dur_next_ + 1) % durations_.size();
  }
  dur_sum_ += d;
  if (shift_.Add(d)) {
    ++slowdowns_;
    up->slowdown = true;
    up->window_mean_ns = shift_.firing_ns();
    up->best_mean_ns = shift_.reference_ns();
  }
}

bool IterationDetector::CheckHang(int64_t now_ns, double slack) {
  if (!learned_ || durations_.empty() || hang_reported_) return false;
  const double silent_ns = static_cast<double>(now_ns - last_event_ns_);
  if (silent_ns < slack * config_.hang_factor * mean_ns() || silent_ns < SToNs(config_.hang_min_s))
    return false;
  hang_reported_ = true;
  ++hangs_;
  return true;
}

}  // namespace perftracker::worker
