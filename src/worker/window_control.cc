#include "worker/window_control.h"

#include <algorithm>
#include <exception>
#include <new>
#include <utility>

#include "base/background.h"
#include "worker/tracer_clock.h"

namespace perftracker::worker {
namespace {

// A window's time limit in nanoseconds, computed as it always was (base/units.h's SToNs goes
// through milliseconds and may differ in the last bit).
constexpr double kNsPerS = 1e9;

}  // namespace

WindowControl::~WindowControl() { StopWatchdog(); }

void WindowControl::Install(const DetectorConfig& config) {
  std::lock_guard<std::mutex> l(mu_);
  det_ = std::make_unique<IterationDetector>(config);
  news_.Clear();
}

void WindowControl::StartWatchdog(const std::atomic<bool>* off) {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_watchdog_ = false;
  }
  watchdog_ = std::thread([this, off] { WatchdogLoop(off); });
}

void WindowControl::StopWatchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_watchdog_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void WindowControl::WatchdogLoop(const std::atomic<bool>* off) {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_watchdog_) {
    cv_.wait_for(l, kWatchdogPeriod);
    if (stop_watchdog_ || off->load() || !det_) continue;
    CheckHangLocked(SteadyNowNs());
  }
}

bool WindowControl::CheckHang(int64_t now) {
  std::lock_guard<std::mutex> l(mu_);
  return CheckHangLocked(now);
}

bool WindowControl::CheckHangLocked(int64_t now) {
  if (!det_) return false;
  // A traced window slows the thread down: a silence must last longer to be a hang.
  if (!det_->CheckHang(now, armed_ ? kArmedHangSlack : 1.0)) return false;
  news_.Push(
      {News::kHang, now, static_cast<int64_t>(det_->mean_ns()), det_->iterations(), true, {}});
  return true;
}

bool WindowControl::Request(const WindowRequest& r) {
  // Beyond what any agent asks (base/window_defaults.h): refused, as a second window is.
  if (r.iterations > window_defaults::kMostIterations ||
      !(r.max_s <= window_defaults::kMostSeconds)) {
    return false;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (armed_ || pending_) return false;  // one window at a time
  pending_ = true;
  request_ = r;
  if (r.start_iteration < 0) request_.start_iteration = det_ ? det_->iterations() : 0;
  stop_requested_ = false;
  return true;
}

void WindowControl::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_ = false;
  }
  stop_requested_ = true;
}

void WindowControl::Hold(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  holds_ = std::max(0, holds_ + (on ? 1 : -1));
  if (det_) det_->SetExcluded(window_excludes_ || holds_ > 0);
}

std::deque<News> WindowControl::TakeNews() {
  std::lock_guard<std::mutex> l(mu_);
  return news_.TakeAll();
}

ControlStats WindowControl::Snapshot() const {
  ControlStats s;
  std::lock_guard<std::mutex> l(mu_);
  if (const IterationDetector* d = det_.get()) {
    s.learned = d->learned();
    s.pattern = d->PatternString();
    s.iterations = d->iterations();
    s.unmatched = d->unmatched();
    s.relearns = d->relearn_count();
    s.slowdowns = d->slowdown_count();
    s.hangs = d->hang_count();
    s.mean_ns = d->mean_ns();
    s.reference_ns = d->shift().reference_ns();
    s.threshold_ns = d->shift().threshold_ns();
    s.recent_ns = d->shift().recent_ns();
  }
  s.excluded = window_excludes_ || holds_ > 0;
  s.holds = holds_;
  s.news_dropped = news_.dropped();
  return s;
}

EventDecision WindowControl::OnEvent(EventKind kind, int64_t now, ThreadId thread,
                                     CallTree* armed_tree) {
  EventDecision out;
  bool arm = false;
  // The previous window's end is reported before a new window arms (one edge per event).
  const bool end_first = end_edge_pending_ && !armed_ && thread == armed_thread_;
  {
    std::lock_guard<std::mutex> l(mu_);
    IterationDetector& d = *det_;
    DetectorUpdate u = d.OnEvent(kind, now);
    if (u.learned) news_.Push({News::kLearned, 0, 0, 0, true, d.PatternString()});
    if (u.relearning) news_.Push({News::kRelearn, 0, 0, 0, true, {}});
    if (u.iteration_done) {
      const Iteration& it = u.iteration;
      news_.Push({News::kIter, it.start_ns, it.end_ns, it.index, it.clean, {}});
      if (armed_) {
        markers_.push_back({it.index, it.start_ns, it.end_ns});
        // The training thread holds the GIL here: the tree is its own.
        if (armed_tree != nullptr) armed_tree->SetIteration(static_cast<int32_t>(markers_.size()));
        out.torch_done =
            armed_tree != nullptr && !armed_sample_heap_ &&
            markers_.size() == static_cast<size_t>(window_defaults::kTorchProfilerIterations);
      }
    }
    if (u.slowdown) {
      news_.Push({News::kSlowdown,
                  static_cast<int64_t>(u.window_mean_ns),
                  static_cast<int64_t>(u.best_mean_ns),
                  u.iteration.index,
                  true,
                  {}});
    }
    out.iteration = d.iterations();
    if (pending_ && !end_first && u.started && out.iteration >= request_.start_iteration) {
      pending_ = false;
      arm = true;
    }
  }
  if (arm && !armed_) {
    out.action = WindowAction::kArm;
  } else if (armed_ && armed_tree != nullptr &&
             (stop_requested_ || now >= deadline_ns_ ||
              out.iteration - armed_at_iter_ >= armed_iterations_)) {
    out.action = WindowAction::kDisarm;
  }
  if (out.action != WindowAction::kNone) out.torch_done = false;  // the end edge stops it
  return out;
}

void WindowControl::PrepareArm(int64_t now, int64_t iteration, ThreadId thread) {
  end_edge_pending_ = false;
  armed_thread_ = thread;
  armed_at_iter_ = iteration;
  armed_ns_ = now;
  stop_requested_ = false;
  std::lock_guard<std::mutex> l(mu_);
  deadline_ns_ = now + static_cast<int64_t>(request_.max_s * kNsPerS);
  armed_iterations_ = request_.iterations;
  armed_sample_heap_ = request_.sample_heap;
  markers_.clear();
  window_excludes_ = true;
  det_->SetExcluded(true);
}

void WindowControl::FinishWindow(int64_t now, PythonWindow* w) {
  armed_ = false;
  end_edge_pending_ = true;  // the armed thread's next event reports the end
  {
    std::lock_guard<std::mutex> l(mu_);
    w->path = request_.path;
    w->markers = std::move(markers_);
    markers_.clear();
    window_excludes_ = false;
    det_->SetExcluded(holds_ > 0);
  }
  w->start_ns = armed_ns_;
  w->end_ns = now;
  ++windows_done_;
}

void WindowControl::StartWriter(std::shared_ptr<PythonWindow> w) {
  // Writing a file is blocking I/O: never on the training thread. Counted, so that the exit
  // hook can wait for it (WaitWriters) instead of cutting the file off.
  {
    std::lock_guard<std::mutex> l(mu_);
    ++writers_;
  }
  std::thread([this, w = std::move(w)] { WriteWindow(w); }).detach();
}

void WindowControl::WriteWindow(const std::shared_ptr<PythonWindow>& w) {
  // Its own thread: at the lowest priority, so that training gets the CPU first
  // (base/background.h). Best effort: a refusal only leaves it at the rank's priority.
  (void)BecomeBackgroundThread("pt-window-file");
  try {
    const Status st = WritePythonWindow(*w);
    News n{st.ok() ? News::kWindowDone : News::kWindowFailed, 0, 0, 0, st.ok(), {}};
    n.text = w->path;
    if (st.ok()) {
      ++files_written_;
    } else {
      ++write_errors_;
    }
    std::lock_guard<std::mutex> l(mu_);
    news_.Push(std::move(n));
  } catch (const std::exception&) {
    ++write_errors_;
  }
  std::lock_guard<std::mutex> l(mu_);
  --writers_;
  cv_.notify_all();
}

bool WindowControl::WaitWriters(double timeout_s) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, std::chrono::duration<double>(std::max(timeout_s, 0.0)),
                      [this] { return writers_ == 0; });
}

void WindowControl::ResetAfterFork() {
  new (&mu_) std::mutex();
  new (&cv_) std::condition_variable();
  new (&watchdog_) std::thread();
  armed_ = false;
  end_edge_pending_ = false;
  pending_ = false;
}

}  // namespace perftracker::worker
