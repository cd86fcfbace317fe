// Design notes.
//
// Learning is incremental so that it costs O(max_period) per event and no allocation: for each
// candidate period P, run_[P] counts how many events in a row equalled the event P positions
// earlier. The last M*P events are M identical repeats exactly when run_[P] >= (M-1)*P, and the
// smallest such P that holds both event kinds is adopted (a smaller true period always reaches
// its run length before any multiple of it does).
//
// The adopted window is rotated so that the iteration starts at a DataLoader next() that follows
// an optimizer step() -- PerfTracker's "first next() to last step()". With several such points
// (e.g. D O D O O) the first one in the observed window wins; any fixed choice gives the same
// iteration length, which is what the triggers use.
//
// After learning, each event either is the next expected one or is skipped as unmatched. An
// iteration with skipped events is still reported (marked not clean) but does not feed the
// slowdown statistics: it may contain an evaluation pass or a checkpoint. Unmatched events are
// counted since the last clean iteration, so sporadic noise never accumulates to a re-learn,
// while a changed sequence (no clean iteration any more) does after relearn_after events.
//
// Slowdown: ShiftDetector (worker/shift_detector.h) compares a moving median of the clean
// iterations with a reference measured after learning, against the job's own noise. It fires
// once per sustained shift and re-arms once the median is back under its threshold.
#include "worker/iteration_detector.h"

#include <algorithm>

namespace perftracker::worker {

Status DetectorConfig::Validate() const {
  if (learn_repeats < 2 || learn_repeats > 1000)
    return InvalidArgument("learn_repeats not in [2, 1000]");
  if (window < 1 || window > 100000) return InvalidArgument("window not in [1, 100000]");
  PT_RETURN_IF_ERROR(Shift().Validate());
  if (!(hang_factor > 1) || hang_factor > 1e6)
    return InvalidArgument("hang_factor not in (1, 1e6]");
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
  // The iteration index is not reset: it keeps counting across a relearn (Learn adds the
  // iterations the learning took), so it stays near the job's step count. A window starts at
  // an index the server picks from every rank's latest; a rank whose index restarted at 0 would
  // wait for it for the rest of the job.
  durations_.clear();
  dur_next_ = 0;
  dur_sum_ = 0;
  shift_.Reset();
}

std::string IterationDetector::PatternString() const {
  std::string s;
  for (EventKind k : pattern_) s += k == EventKind::kLoaderNext ? 'D' : 'O';
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
  if (learned_) {
    Track(kind, ts_ns, &up);
  } else {
    Learn(kind, ts_ns, &up);
  }
  return up;
}

void IterationDetector::Learn(EventKind kind, int64_t ts_ns, DetectorUpdate* up) {
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
  for (int p = 2; p <= config_.max_period; ++p) {  // P = 1 cannot hold both kinds
    if (run_[p] < static_cast<int64_t>(config_.learn_repeats - 1) * p) continue;
    // The last p events, oldest first.
    std::vector<EventKind> win(p);
    for (int i = 0; i < p; ++i) win[i] = history_[(seen_ - p + i) % cap];
    int rot = -1;
    for (int r = 0; r < p; ++r) {
      if (win[r] == EventKind::kLoaderNext && win[(r + p - 1) % p] == EventKind::kOptimizerStep) {
        rot = r;
        break;
      }
    }
    if (rot < 0) continue;  // one kind only: not an iteration
    pattern_.resize(p);
    for (int i = 0; i < p; ++i) pattern_[i] = win[(rot + i) % p];
    learned_ = true;
    // After a relearn: the iterations that went by while learning (every p events one).
    if (relearns_ > 0) iterations_ += seen_ / p;
    up->learned = true;
    // The newest event is win[p-1]; the next expected one is win[0], i.e. pattern index p-rot.
    pos_ = static_cast<size_t>((p - rot) % p);
    cur_valid_ = false;  // the start of a partly seen iteration is unknown: skip it
    cur_clean_ = true;
    unmatched_since_clean_ = 0;
    (void)ts_ns;
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
      Learn(kind, ts_ns, up);
    }
    return;
  }
  if (pos_ == 0) {
    cur_start_ns_ = ts_ns;
    cur_valid_ = true;
    cur_clean_ = true;
  }
  if (++pos_ < pattern_.size()) return;
  pos_ = 0;
  if (!cur_valid_) return;
  Iteration it;
  it.index = iterations_;
  it.start_ns = cur_start_ns_;
  it.end_ns = ts_ns;
  it.clean = cur_clean_;
  Record(it, up);
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
    up->window_mean_ns = shift_.recent_ns();
    up->best_mean_ns = shift_.reference_ns();
  }
}

bool IterationDetector::CheckHang(int64_t now_ns, double slack) {
  if (!learned_ || durations_.empty() || hang_reported_) return false;
  if (static_cast<double>(now_ns - last_event_ns_) < slack * config_.hang_factor * mean_ns())
    return false;
  hang_reported_ = true;
  ++hangs_;
  return true;
}

}  // namespace perftracker::worker
