// The worker's window control: the always-on iteration detector under its mutex, the news it
// queues for Python, the profiling window a client requests, and when that window arms and ends.
//
// A window is requested from any thread (the agent client's: Request), but the Python tracer
// (PyEval_SetProfile) arms only the calling thread, so the training thread itself arms it at an
// iteration start (worker/iteration_detector.h: a loader next() after a step, a step on a rank
// without a DataLoader, a marker) once the requested iteration is reached: OnEvent says kArm and
// the extension arms its tracer there (PrepareArm, then CommitArm). torch.profiler records the
// window's first iterations only: OnEvent says torch_done when they are done. The window ends at
// the iteration start after its iteration count, or at its time limit, or on Stop: OnEvent says
// kDisarm, or the profile callback sees Expired; the extension then calls FinishWindow, and the
// end is reported once to the thread that armed it (TakeEndEdge), at its next event, before any
// new window arms there, so that Python stops torch.profiler on that same thread.
//
// While a window is armed, and while Python holds the detector (Hold: its torch.profiler export
// competes for the GIL after a window), completed iterations feed neither the detector's
// statistics nor its slowdown trigger: the tracer slows them down itself. The hang watchdog
// (a thread of its own, every kWatchdogPeriod) asks the detector whether the training thread has
// been silent too long, with more slack while a window is armed. Finished windows are written
// by threads of their own (StartWriter), counted so that the exit hook can wait for them.
//
// Threads: the fields the mutex guards (the detector, the news, the request, the markers, the
// exclusion, the writers) are touched by any thread; the armed window's own fields (its thread,
// deadline, iteration, end edge) only by the training thread, under the GIL; `armed` and the stop
// request are atomics every thread may read. No Python here, nothing virtual, and on the event
// path no allocation beyond the detector's, the news queue's and the window markers' own.
#ifndef PERFTRACKER_WORKER_WINDOW_CONTROL_H_
#define PERFTRACKER_WORKER_WINDOW_CONTROL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/window_defaults.h"
#include "worker/call_tree.h"
#include "worker/iteration_detector.h"
#include "worker/news_queue.h"
#include "worker/window_file.h"

namespace perftracker::worker {

// While a window is armed the tracer slows the traced thread down (up to ~2x on call-heavy
// code), so the watchdog waits this many times longer before it calls a silence a hang (the
// floor, hang_min_s, stays as it is).
inline constexpr double kArmedHangSlack = 4.0;
// How often the watchdog looks: a hang is named within this of its threshold, and the check
// (a mutex and a subtraction) costs nothing at this rate.
inline constexpr std::chrono::milliseconds kWatchdogPeriod{50};

// A window as start_window() asks for it.
struct WindowRequest {
  int64_t iterations = window_defaults::kIterations;  // >= 1
  double max_s = window_defaults::kMaxSeconds;        // > 0: the time limit from its arming
  std::string path;                                   // the window file
  int64_t start_iteration = -1;  // arm at the first iteration start >= this; -1: the next one
  bool sample_heap = false;      // sample the Python heap in it (worker/heap_sampler.h)
};

// What one event asks of the thread that reported it.
enum class WindowAction {
  kNone,
  kArm,     // arm the requested window here (PrepareArm ... CommitArm)
  kDisarm,  // end the armed window here (FinishWindow)
};
// What the training thread's event answers Python (py/module.cc's on_loader_next,
// on_optimizer_step, on_marker; python/perftracker/window.py names the same numbers ARMED, ENDED
// and TORCH_DONE).
enum EventEdge : int {
  kNoEdge = 0,
  kArmedEdge = 1,      // this event armed a window: Python starts torch.profiler
  kEndedEdge = 2,      // a window this thread armed ended (TakeEndEdge): Python stops it
  kTorchDoneEdge = 3,  // EventDecision::torch_done: Python stops torch.profiler, the window goes on
};

struct EventDecision {
  WindowAction action = WindowAction::kNone;
  int64_t iteration = 0;  // the detector's iteration number after the event
  // The armed window's first window_defaults::kTorchProfilerIterations iterations are done, and
  // it goes on: Python stops torch.profiler here (on the armed thread, which started it). Not
  // for a window whose end is this same event, nor for a memory window (its profiler places
  // the allocations of the whole window).
  bool torch_done = false;
};

// stats()'s figures of the detector and the control, copied under the mutex.
struct ControlStats {
  bool learned = false;
  std::string pattern;
  int64_t iterations = 0, unmatched = 0, relearns = 0, slowdowns = 0, hangs = 0;
  double mean_ns = 0, reference_ns = 0, threshold_ns = 0, recent_ns = 0;
  bool excluded = false;  // iterations feed no statistics now (a window armed, or held)
  int holds = 0;
  uint64_t news_dropped = 0;
};

class WindowControl {
 public:
  // A thread as the extension tells threads apart (PyThread_get_thread_ident()).
  using ThreadId = uint64_t;

  WindowControl() = default;
  // Stops the watchdog. Window writers still running must be waited for first (WaitWriters).
  ~WindowControl();
  WindowControl(const WindowControl&) = delete;
  WindowControl& operator=(const WindowControl&) = delete;

  // ---- any thread ----

  // A new detector with CONFIG (validated by the caller); queued news is forgotten.
  void Install(const DetectorConfig& config);
  // Starts the hang watchdog, which skips its checks while *OFF (the collector turned off).
  // Throws std::system_error as std::thread does when the system refuses a thread.
  void StartWatchdog(const std::atomic<bool>* off);
  // Stops the watchdog and joins it (the caller must not hold anything the watchdog waits for).
  void StopWatchdog();
  // One watchdog check at NOW (steady clock): whether the training thread's silence is a hang
  // (IterationDetector::CheckHang, with kArmedHangSlack while a window is armed); a hang is
  // queued as news. Needs an installed detector (false without one).
  bool CheckHang(int64_t now);

  // Accepts R unless a window is armed or pending (one window at a time) or R asks more than
  // window_defaults' kMostIterations / kMostSeconds. Needs an installed detector.
  bool Request(const WindowRequest& r);
  // Drops a pending request and makes the armed window Expired (the armed thread ends it).
  void Stop();
  // hold_detector(on): counted; while any hold is on, iterations feed no statistics.
  void Hold(bool on);
  // The news since the last call, oldest first.
  std::deque<News> TakeNews();
  ControlStats Snapshot() const;

  // Writes W (a finished window) on a detached thread of its own at background priority, queues
  // window_done or window_failed with its path, and counts it. Throws std::system_error as
  // std::thread does (the writer is then still counted, as it always was).
  void StartWriter(std::shared_ptr<PythonWindow> w);
  // Waits up to TIMEOUT_S for every writer to finish; false if the timeout came first.
  bool WaitWriters(double timeout_s);

  // ---- the training thread ----

  // A detector event of KIND at NOW (steady clock) from THREAD. ARMED_TREE is the armed window's
  // tree when THREAD is the armed one, else null: an iteration completed inside the window
  // starts the tree's next iteration. Queues the detector's news, and decides whether a pending
  // window arms here (an iteration start at or after its start iteration, not on the event that
  // still has to report a previous window's end) or the armed one ends here (its iterations
  // done, its time up, or stopped; only on the armed thread).
  EventDecision OnEvent(EventKind kind, int64_t now, ThreadId thread, CallTree* armed_tree);
  // Arming, on THREAD at NOW (steady clock), ITERATION being the decision's: the window's
  // deadline and iteration count are fixed and the detector excluded. CommitArm once the tracer
  // is on: until then the window does not count as armed.
  void PrepareArm(int64_t now, int64_t iteration, ThreadId thread);
  void CommitArm() { armed_ = true; }
  // Whether the armed window must end at NOW (the tracer's time): its time limit, or Stop.
  // Inline: the profile callback asks on every call.
  bool Expired(int64_t now) const {
    return now >= deadline_ns_ || stop_requested_.load(std::memory_order_relaxed);
  }
  // The armed window ends at NOW: its path, markers and times go into W, the detector is
  // included again (unless held), and the end is pending for TakeEndEdge.
  void FinishWindow(int64_t now, PythonWindow* w);
  // True once, on THREAD, after a window THREAD armed has ended: the event that reports it. The
  // end of a window, wherever it happened (at an event, in the profile callback at its time
  // limit, or on stop), is reported once to the thread that armed it.
  bool TakeEndEdge(ThreadId thread) {
    if (!end_edge_pending_ || armed_ || thread != armed_thread_) return false;
    end_edge_pending_ = false;
    return true;
  }

  bool armed() const { return armed_; }
  // Whether the window armed last samples the Python heap (set by PrepareArm).
  bool armed_sample_heap() const { return armed_sample_heap_; }
  uint64_t windows_done() const { return windows_done_; }
  uint64_t files_written() const { return files_written_; }
  uint64_t write_errors() const { return write_errors_; }

  // ---- a forked child ----

  // The child of a fork has this state but not the watchdog or writer threads, and the mutex
  // may have been held at the fork: a fresh mutex, condition and (empty) watchdog thread object,
  // no window armed, pending or ending. The old thread object is abandoned, not destroyed
  // (destroying a joinable std::thread ends the process).
  void ResetAfterFork();

 private:
  bool CheckHangLocked(int64_t now);  // mu_ held
  void WatchdogLoop(const std::atomic<bool>* off);
  void WriteWindow(const std::shared_ptr<PythonWindow>& w);

  mutable std::mutex mu_;
  std::condition_variable cv_;  // the watchdog's wake-up and the writers' end
  std::thread watchdog_;

  // Guarded by mu_.
  std::unique_ptr<IterationDetector> det_;
  NewsQueue news_;
  bool stop_watchdog_ = false;
  bool pending_ = false;
  WindowRequest request_;
  std::vector<IterationMark> markers_;  // the armed window's completed iterations
  bool window_excludes_ = false;
  int holds_ = 0;
  int writers_ = 0;

  std::atomic<bool> armed_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> files_written_{0};
  std::atomic<uint64_t> write_errors_{0};

  // The training thread's.
  bool end_edge_pending_ = false;  // a window ended: reported at the armed thread's next event
  ThreadId armed_thread_ = 0;
  int64_t armed_at_iter_ = 0, armed_ns_ = 0, deadline_ns_ = 0;
  int64_t armed_iterations_ = 0;  // the armed window's iteration count
  bool armed_sample_heap_ = false;
  uint64_t windows_done_ = 0;
};

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_WINDOW_CONTROL_H_
