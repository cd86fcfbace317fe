// perftracker._worker: the in-worker collector as a CPython extension.
//
// Design notes.
//
// Everything here runs inside a training process, so the rules are: never raise into the
// training code, never block the training thread, bounded memory. Every entry point checks a
// `failed` flag first; an internal error (a C++ exception, a failed allocation, a broken
// invariant) sets it, disarms the tracer and logs one line to stderr, and from then on every
// entry point returns at once.
//
// The fast path is on_loader_next() / on_optimizer_step() / on_marker(): a clock read, the detector
// under a mutex (only the hang watchdog thread competes for it, for microseconds), and a push of
// the detector's news into a bounded queue that Python drains from a background thread (drain()).
//
// The Python tracer uses PyEval_SetProfile, which arms only the calling thread, so a window
// requested from any thread (the agent client's) is armed by the training thread itself at its
// next iteration start (worker/iteration_detector.h: a loader next() after a step, a step on
// a rank without a DataLoader, a marker) once the requested iteration is reached, and disarmed
// there (or from inside the profile callback once the time limit passes or stop is requested).
// Function identity is the whole call stack. Calls are aggregated as they return into a CallTree
// (worker/call_tree.h): one node per call-stack path with counts, times, a histogram and
// per-iteration figures, so the tracer loses nothing at any call rate and its memory is bounded by
// the node cap, not by the number of calls. At window end the tree is handed to a writer thread
// that writes it as "perftracker.python_window/1" JSON (worker/window_file.h) to PATH.tmp and
// renames it to PATH.
//
// Python's garbage collector is invisible to PyEval_SetProfile: gc_event(), installed by
// hooks.py as a gc.callbacks entry, records each collection on an armed thread as a call of
// "<gc>" below the stack that was running when it started (the function whose allocations
// triggered it). Finalizers that run Python code during the collection nest under it.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <pthread.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/background.h"
#include "base/window_defaults.h"
#include "worker/call_tree.h"
#include "worker/iteration_detector.h"
#include "worker/py/collectives.h"
#include "worker/window_file.h"

namespace perftracker::worker {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The tracer reads the time twice per call. clock_gettime costs 20-50 ns through the vDSO (more
// on a VM's paravirtual clock: a quarter of the tracer's time, measured with perf); the time
// stamp counter costs a few. Where the CPU has an invariant TSC, the tracer's clock is the TSC
// scaled to nanoseconds with a rate measured between the collector's install and the window's
// arming (seconds apart: parts per million), anchored at the arming's steady-clock time, so its
// times line up with the detector's iteration markers.
class TracerClock {
 public:
  // Called at install: the start of the rate measurement.
  void Start() {
    ns0_ = NowNs();
    ticks0_ = Ticks();
  }
  // Called at arming: anchors the clock and decides TSC or steady clock for this window.
  void Anchor(int64_t now_ns) {
    anchor_ns_ = now_ns;
    anchor_ticks_ = Ticks();
    scale_ = 0;
    const int64_t span_ns = now_ns - ns0_;
    if (InvariantTsc() && span_ns >= kMinCalibrationNs && anchor_ticks_ > ticks0_) {
      scale_ = static_cast<double>(span_ns) / static_cast<double>(anchor_ticks_ - ticks0_);
    }
  }
  int64_t Now() const {
    if (scale_ == 0) return NowNs();
    return anchor_ns_ + static_cast<int64_t>(static_cast<double>(Ticks() - anchor_ticks_) * scale_);
  }

 private:
  // Below this the two clock reads' own cost would show in the rate.
  static constexpr int64_t kMinCalibrationNs = 50'000'000;
  static uint64_t Ticks() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
  }
  static bool InvariantTsc() {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
#else
    return false;
#endif
  }
  int64_t ns0_ = 0;
  uint64_t ticks0_ = 0;
  int64_t anchor_ns_ = 0;
  uint64_t anchor_ticks_ = 0;
  double scale_ = 0;  // ns per tick; 0: use the steady clock
};

// ---- news queue (detector -> Python) ----

struct News {
  enum Kind { kIter, kSlowdown, kHang, kLearned, kRelearn, kWindowDone, kWindowFailed } kind;
  int64_t a = 0, b = 0;  // iter: start, end; slowdown: mean, best; hang: now, mean
  int64_t index = 0;
  bool clean = true;
  std::string text;  // learned: pattern; window done / failed: path
};

// While a window is armed the tracer slows the traced thread down (up to ~2x on call-heavy
// code), so the watchdog waits this many times longer before it calls a silence a hang.
constexpr double kArmedHangSlack = 4.0;
// Names are looked up by code object address for every call: a direct-mapped cache in front of
// the hash map answers most lookups with one compare.
constexpr size_t kNameCacheSlots = 4096;

struct State {
  std::mutex mu;  // guards det, news, window fields touched by other threads
  std::unique_ptr<IterationDetector> det;
  std::deque<News> news;
  size_t max_news = 10000;
  uint64_t news_dropped = 0;
  std::atomic<bool> installed{false};
  std::atomic<bool> failed{false};
  bool verbose = false;

  // Watchdog (hang check) thread.
  std::thread watchdog;
  std::condition_variable cv;
  bool stop_watchdog = false;

  // Window: requested (any thread, under mu), armed (training thread, under the GIL).
  bool win_pending = false;
  int64_t win_start_iter = 0, win_iters = 0;
  double win_max_s = 20;
  std::string win_path;
  std::atomic<bool> win_stop{false};
  std::atomic<bool> armed{false};
  bool end_edge_pending = false;   // a window ended outside OnEvent: report 2 at the next event
  unsigned long armed_thread = 0;  // PyThread_get_thread_ident() of the armed thread
  int64_t armed_at_iter = 0, armed_ns = 0, deadline_ns = 0;
  std::vector<WindowMarker> markers;  // under mu
  // The detector ignores iterations while a window is armed and while Python holds it (its
  // torch.profiler export competes for the GIL after the window). Under mu.
  bool window_excludes = false;
  int holds = 0;
  CallTreeLimits limits;
  uint64_t windows_done = 0;
  std::atomic<uint64_t> files_written{0};
  std::atomic<uint64_t> write_errors{0};
  int writers = 0;  // window files being written (under mu; cv signals the last one's end)

  // Tracer tables (touched only with the GIL held, by the armed thread).
  TracerClock clock;
  std::unique_ptr<CallTree> tree;
  uint64_t traced_tid = 0;
  std::unordered_map<const void*, uint32_t> name_ids;  // code object or PyMethodDef -> name id
  std::array<std::pair<const void*, uint32_t>, kNameCacheSlots> name_cache{};
  std::vector<PyObject*> held_codes;  // strong refs while armed
  std::vector<std::string> names;
  uint32_t gc_name = 0;
  // Totals over every window, for stats().
  uint64_t tracer_calls = 0, tracer_other_calls = 0, tracer_untraced = 0, gc_spans = 0;
  uint64_t tracer_nodes = 0;
};

State* g = nullptr;  // created at module init, never freed (threads may outlive finalization)
thread_local CallTree* t_tree = nullptr;
// The profile function the armed thread had before the window (a user's cProfile, a debugger's
// profiler): put back when the window ends, not cleared. Owned reference to its object.
thread_local Py_tracefunc t_saved_profile = nullptr;
thread_local PyObject* t_saved_profile_obj = nullptr;

// Ends this thread's tracing by the window and gives the thread back its own profiler. GIL held.
void RestoreProfile() {
  PyObject* obj = t_saved_profile_obj;
  Py_tracefunc func = t_saved_profile;
  t_saved_profile = nullptr;
  t_saved_profile_obj = nullptr;
  PyEval_SetProfile(func, obj);  // takes its own reference
  Py_XDECREF(obj);
}

void Fail(const char* what) {
  bool expected = false;
  if (!g->failed.compare_exchange_strong(expected, true)) return;
  std::fprintf(stderr, "perftracker: worker collector turned off after an internal error: %s\n",
               what);
}

void PushNews(News n) {  // mu held
  if (g->news.size() >= g->max_news) {
    g->news.pop_front();
    ++g->news_dropped;
  }
  g->news.push_back(std::move(n));
}

// ---- tracer ----

uint32_t InternName(std::string name) {
  g->names.push_back(std::move(name));
  return static_cast<uint32_t>(g->names.size() - 1);
}

uint32_t NameId(const void* key, PyObject* code_ref, std::string (*make)(PyObject*),
                PyObject* obj) {
  auto& slot = g->name_cache[(reinterpret_cast<uintptr_t>(key) >> 4) % kNameCacheSlots];
  if (slot.first == key) return slot.second;
  auto it = g->name_ids.find(key);
  if (it != g->name_ids.end()) {
    slot = {key, it->second};
    return it->second;
  }
  const uint32_t id = InternName(make(obj));
  g->name_ids.emplace(key, id);
  slot = {key, id};
  if (code_ref != nullptr) {
    Py_INCREF(code_ref);  // keep the address from being reused for another code object
    g->held_codes.push_back(code_ref);
  }
  return id;
}

std::string Utf8(PyObject* s) {
  if (s == nullptr || !PyUnicode_Check(s)) return "?";
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (p == nullptr) {
    PyErr_Clear();
    return "?";
  }
  return std::string(p, n);
}

std::string CodeName(PyObject* o) {  // Kineto's form: "file.py(12): name"
  auto* code = reinterpret_cast<PyCodeObject*>(o);
  return Utf8(code->co_filename) + "(" + std::to_string(code->co_firstlineno) +
         "): " + Utf8(code->co_name);
}

std::string CFuncName(PyObject* o) {
  auto* f = reinterpret_cast<PyCFunctionObject*>(o);
  const char* n = (f->m_ml && f->m_ml->ml_name) ? f->m_ml->ml_name : "?";
  return std::string("<built-in method ") + n + ">";
}

void Disarm(int64_t now);

int ProfileCallback(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  CallTree* tree = t_tree;
  if (tree == nullptr || g->failed.load(std::memory_order_relaxed)) {
    RestoreProfile();
    return 0;
  }
  const int64_t now = g->clock.Now();
  if (now >= g->deadline_ns || g->win_stop.load(std::memory_order_relaxed)) {
    Disarm(NowNs());
    return 0;
  }
  try {
    switch (what) {
      case PyTrace_CALL: {
        PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
        const uint32_t name = NameId(code, reinterpret_cast<PyObject*>(code), CodeName,
                                     reinterpret_cast<PyObject*>(code));
        Py_DECREF(code);
        tree->Enter(name, now);
        break;
      }
      case PyTrace_C_CALL:
        if (PyCFunction_Check(arg)) {
          tree->Enter(
              NameId(reinterpret_cast<PyCFunctionObject*>(arg)->m_ml, nullptr, CFuncName, arg),
              now);
        } else {
          tree->EnterUntraced();
        }
        break;
      case PyTrace_RETURN:
        tree->Exit(now);
        break;
      case PyTrace_C_RETURN:
      case PyTrace_C_EXCEPTION:
        tree->ExitC(now);
        break;
      default:
        break;
    }
  } catch (const std::exception& e) {
    Fail(e.what());
    RestoreProfile();
  }
  return 0;
}

void WriteWindow(std::shared_ptr<PythonWindow> w);

void Arm(int64_t now, int64_t iter) {  // training thread, GIL held
  g->end_edge_pending = false;
  g->armed_thread = PyThread_get_thread_ident();
  g->armed_at_iter = iter;
  g->armed_ns = now;
  g->deadline_ns = now + static_cast<int64_t>(g->win_max_s * 1e9);
  g->win_stop = false;
  {
    std::lock_guard<std::mutex> l(g->mu);
    g->markers.clear();
    g->window_excludes = true;
    g->det->SetExcluded(true);
  }
  g->names.clear();
  g->name_ids.clear();
  g->name_cache.fill({nullptr, 0});
  InternName("");  // name 0: the root's
  g->gc_name = InternName("<gc>");
  g->clock.Anchor(now);
  g->tree = std::make_unique<CallTree>(g->limits);
  g->tree->SetIteration(0);
  g->traced_tid = PyThread_get_thread_native_id();
  // The Python calls in progress (the training loop, the step function, the loader's next())
  // began before the window: enter them now, so that their callees get the same identity (the
  // whole stack) as in the window's later iterations. C calls in progress between them (the
  // on_loader_next() arming the window, a builtin next()) cannot be listed; their returns are
  // recognised and ignored (CallTree::ExitC).
  std::vector<PyCodeObject*> codes;
  PyFrameObject* f = PyEval_GetFrame();  // borrowed
  Py_XINCREF(f);
  while (f != nullptr && codes.size() < static_cast<size_t>(g->limits.max_depth)) {
    codes.push_back(PyFrame_GetCode(f));       // new reference
    PyFrameObject* back = PyFrame_GetBack(f);  // new reference
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
  for (auto it = codes.rbegin(); it != codes.rend(); ++it) {
    PyObject* code = reinterpret_cast<PyObject*>(*it);
    g->tree->EnterInProgress(NameId(code, code, CodeName, code), now);
    Py_DECREF(code);
  }
  t_tree = g->tree.get();
  g->armed = true;
  PyThreadState* ts = PyThreadState_Get();
  if (ts->c_profilefunc != ProfileCallback) {
    t_saved_profile = ts->c_profilefunc;
    t_saved_profile_obj = ts->c_profileobj;
    Py_XINCREF(t_saved_profile_obj);
  }
  PyEval_SetProfile(ProfileCallback, nullptr);
}

void Disarm(int64_t now) {  // training thread (the armed one), GIL held
  RestoreProfile();
  if (!g->armed) return;
  g->armed = false;
  g->end_edge_pending = true;  // OnEvent reports the end (torch.profiler stops there)
  t_tree = nullptr;
  auto w = std::make_shared<PythonWindow>();
  {
    std::lock_guard<std::mutex> l(g->mu);
    w->path = g->win_path;
    w->markers = std::move(g->markers);
    g->markers.clear();
    g->window_excludes = false;
    g->det->SetExcluded(g->holds > 0);
  }
  // Calls still open at the window end are closed there (their time so far is real).
  g->tree->CloseAll(now);
  const CallTreeStats& s = g->tree->stats();
  g->tracer_calls += s.calls;
  g->tracer_other_calls += s.other_calls;
  g->tracer_untraced += s.untraced_calls;
  g->gc_spans += s.gc_collections;
  g->tracer_nodes = g->tree->nodes().size();
  w->tree = std::move(*g->tree);
  g->tree.reset();
  for (PyObject* c : g->held_codes) Py_DECREF(c);
  g->held_codes.clear();
  g->name_ids.clear();
  g->name_cache.fill({nullptr, 0});
  w->names = std::move(g->names);
  g->names.clear();
  w->pid = static_cast<int>(getpid());
  w->tid = g->traced_tid;
  w->start_ns = g->armed_ns;
  w->end_ns = now;
  ++g->windows_done;
  // Writing a file is blocking I/O: never on the training thread. Counted, so that the exit
  // hook can wait for it (wait_writers) instead of cutting the file off.
  {
    std::lock_guard<std::mutex> l(g->mu);
    ++g->writers;
  }
  std::thread(WriteWindow, std::move(w)).detach();
}

void WriteWindow(std::shared_ptr<PythonWindow> w) {
  // Its own thread, without the GIL: at the lowest priority, so that training gets the CPU
  // first (base/background.h). Best effort: a refusal only leaves it at the rank's priority.
  (void)BecomeBackgroundThread("pt-window-file");
  try {
    const Status st = WritePythonWindow(*w);
    News n{st.ok() ? News::kWindowDone : News::kWindowFailed, 0, 0, 0, st.ok(), {}};
    n.text = w->path;
    if (st.ok()) {
      ++g->files_written;
    } else {
      ++g->write_errors;
    }
    std::lock_guard<std::mutex> l(g->mu);
    PushNews(std::move(n));
  } catch (const std::exception& e) {
    ++g->write_errors;
  }
  std::lock_guard<std::mutex> l(g->mu);
  --g->writers;
  g->cv.notify_all();
}

// wait_writers(timeout_s) -> bool: waits (GIL released) until no window file is being written;
// False if the timeout came first. The exit hook's: a process ending mid-write loses the file.
PyObject* WaitWriters(PyObject*, PyObject* arg) {
  const double timeout = PyFloat_AsDouble(arg);
  if (PyErr_Occurred()) return nullptr;
  bool done = false;
  Py_BEGIN_ALLOW_THREADS {
    std::unique_lock<std::mutex> l(g->mu);
    done = g->cv.wait_for(l, std::chrono::duration<double>(std::max(timeout, 0.0)),
                          [] { return g->writers == 0; });
  }
  Py_END_ALLOW_THREADS return PyBool_FromLong(done);
}

// ---- detector entry points ----

// Returns 0, or 1 when this call armed a window, 2 when it ended one (Python then starts or
// stops torch.profiler on this same thread).
int OnEvent(EventKind kind) {
  const int64_t now = NowNs();
  int ret = 0;
  bool arm = false;
  int64_t iters = 0;
  // The previous window's end is reported before a new window arms (one edge per event).
  const bool end_first =
      g->end_edge_pending && !g->armed && PyThread_get_thread_ident() == g->armed_thread;
  {
    std::lock_guard<std::mutex> l(g->mu);
    IterationDetector& d = *g->det;
    DetectorUpdate u = d.OnEvent(kind, now);
    if (u.learned) PushNews({News::kLearned, 0, 0, 0, true, d.PatternString()});
    if (u.relearning) PushNews({News::kRelearn, 0, 0, 0, true, {}});
    if (u.iteration_done) {
      const Iteration& it = u.iteration;
      PushNews({News::kIter, it.start_ns, it.end_ns, it.index, it.clean, {}});
      if (g->armed) {
        g->markers.push_back({it.index, it.start_ns, it.end_ns});
        // The training thread holds the GIL here: the tree is its own.
        if (t_tree != nullptr) t_tree->SetIteration(static_cast<int32_t>(g->markers.size()));
      }
    }
    if (u.slowdown) {
      PushNews({News::kSlowdown,
                static_cast<int64_t>(u.window_mean_ns),
                static_cast<int64_t>(u.best_mean_ns),
                u.iteration.index,
                true,
                {}});
    }
    iters = d.iterations();
    if (g->win_pending && !end_first && u.started && iters >= g->win_start_iter) {
      g->win_pending = false;
      arm = true;
    }
  }
  if (arm && !g->armed) {
    Arm(now, iters);
    return 1;
  }
  if (g->armed && t_tree != nullptr &&
      (g->win_stop || now >= g->deadline_ns || iters - g->armed_at_iter >= g->win_iters)) {
    Disarm(now);
  }
  // The end of a window, wherever it happened (here, in the profile callback at max_s, or on
  // stop), is reported once to the thread that armed it.
  if (g->end_edge_pending && !g->armed && PyThread_get_thread_ident() == g->armed_thread) {
    g->end_edge_pending = false;
    ret = 2;
  }
  return ret;
}

void WatchdogLoop() {
  std::unique_lock<std::mutex> l(g->mu);
  while (!g->stop_watchdog) {
    g->cv.wait_for(l, std::chrono::milliseconds(50));
    if (g->stop_watchdog || g->failed || !g->det) continue;
    const int64_t now = NowNs();
    // A traced window slows the thread down: a silence must last longer to be a hang.
    if (g->det->CheckHang(now, g->armed ? kArmedHangSlack : 1.0)) {
      PushNews({News::kHang,
                now,
                static_cast<int64_t>(g->det->mean_ns()),
                g->det->iterations(),
                true,
                {}});
    }
  }
}

// A forked child (DataLoader workers, subprocess helpers) has this state but not the watchdog
// thread, and the mutex may have been held at the fork: the child starts over with a fresh mutex
// and the collector off. The old std::thread object is abandoned, not destroyed (destroying a
// joinable thread terminates the process).
void AtForkChild() {
  if (g == nullptr) return;
  new (&g->mu) std::mutex();
  new (&g->cv) std::condition_variable();
  new (&g->watchdog) std::thread();
  g->installed = false;
  g->armed = false;
  g->end_edge_pending = false;
  g->win_pending = false;
  t_tree = nullptr;
  g->tree.release();  // the parent's: a forked child never touches (nor frees) it
}

// ---- Python functions ----

bool GetNum(PyObject* cfg, const char* key, double* v) {
  PyObject* o = PyDict_GetItemString(cfg, key);  // borrowed
  if (o == nullptr) return true;
  const double d = PyFloat_AsDouble(o);
  if (d == -1.0 && PyErr_Occurred()) return false;
  *v = d;
  return true;
}

PyObject* Install(PyObject*, PyObject* args) {
  PyObject* cfg = nullptr;
  if (!PyArg_ParseTuple(args, "|O!", &PyDict_Type, &cfg)) return nullptr;
  if (g->installed) Py_RETURN_FALSE;
  DetectorConfig c;
  double learn = c.learn_repeats, window = c.window, ratio = c.slowdown_ratio, hang = c.hang_factor,
         hang_min_s = c.hang_min_s, relearn = c.relearn_after, period = c.max_period,
         warmup = c.warmup_iterations, reference = c.reference_iterations,
         nodes = static_cast<double>(g->limits.max_nodes), depth = g->limits.max_depth;
  if (cfg != nullptr &&
      !(GetNum(cfg, "learn_repeats", &learn) && GetNum(cfg, "window", &window) &&
        GetNum(cfg, "slowdown_ratio", &ratio) && GetNum(cfg, "hang_factor", &hang) &&
        GetNum(cfg, "hang_min_s", &hang_min_s) && GetNum(cfg, "relearn_after", &relearn) &&
        GetNum(cfg, "max_period", &period) && GetNum(cfg, "warmup_iterations", &warmup) &&
        GetNum(cfg, "reference_iterations", &reference) &&
        GetNum(cfg, "tracer_max_nodes", &nodes) && GetNum(cfg, "tracer_max_depth", &depth))) {
    return nullptr;
  }
  c.learn_repeats = static_cast<int>(learn);
  c.window = static_cast<int>(window);
  c.slowdown_ratio = ratio;
  c.hang_factor = hang;
  c.hang_min_s = hang_min_s;
  c.relearn_after = static_cast<int>(relearn);
  c.max_period = static_cast<int>(period);
  c.warmup_iterations = static_cast<int>(warmup);
  c.reference_iterations = static_cast<int>(reference);
  if (Status st = c.Validate(); !st.ok()) {
    PyErr_SetString(PyExc_ValueError, st.message().c_str());
    return nullptr;
  }
  if (!(nodes >= 16 && nodes <= 1e7 && depth >= 1 && depth <= 10000)) {
    PyErr_SetString(PyExc_ValueError, "tracer_max_nodes or tracer_max_depth out of range");
    return nullptr;
  }
  try {
    std::lock_guard<std::mutex> l(g->mu);
    g->det = std::make_unique<IterationDetector>(c);
    g->limits.max_nodes = static_cast<size_t>(nodes);
    g->limits.max_depth = static_cast<int>(depth);
    g->news.clear();
    g->clock.Start();
    g->stop_watchdog = false;
    g->watchdog = std::thread(WatchdogLoop);
  } catch (const std::exception& e) {
    Fail(e.what());
    Py_RETURN_FALSE;
  }
  g->installed = true;
  Py_RETURN_TRUE;
}

PyObject* Uninstall(PyObject*, PyObject*) {
  if (!g->installed) Py_RETURN_NONE;
  if (g->armed && t_tree != nullptr) Disarm(NowNs());
  {
    std::lock_guard<std::mutex> l(g->mu);
    g->stop_watchdog = true;
  }
  g->cv.notify_all();
  if (g->watchdog.joinable()) {
    Py_BEGIN_ALLOW_THREADS g->watchdog.join();
    Py_END_ALLOW_THREADS
  }
  g->installed = false;
  Py_RETURN_NONE;
}

PyObject* EventEntry(EventKind kind) {
  if (!g->installed || g->failed.load(std::memory_order_relaxed)) return PyLong_FromLong(0);
  try {
    return PyLong_FromLong(OnEvent(kind));
  } catch (const std::exception& e) {
    Fail(e.what());
    if (g->armed && t_tree != nullptr) RestoreProfile();
    return PyLong_FromLong(0);
  }
}

// gc.callbacks entry: gc_event(phase, info=None); phase "start"/"stop" (as the gc module calls
// it) or 0/1. Records only on an armed thread; elsewhere it returns after one thread-local read.
// Never raises (a gc callback's exception would be printed by the interpreter).
PyObject* GcEvent(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  CallTree* tree = t_tree;
  if (tree == nullptr || nargs < 1 || g->failed.load(std::memory_order_relaxed)) Py_RETURN_NONE;
  try {
    const int64_t now = g->clock.Now();
    int phase = -1;
    PyObject* p = args[0];
    if (PyUnicode_Check(p)) {
      if (PyUnicode_CompareWithASCIIString(p, "start") == 0) {
        phase = 0;
      } else if (PyUnicode_CompareWithASCIIString(p, "stop") == 0) {
        phase = 1;
      }
    } else if (PyLong_Check(p)) {
      phase = static_cast<int>(PyLong_AsLong(p));
    }
    if (PyErr_Occurred()) PyErr_Clear();
    if (phase == 0) {
      tree->EnterGc(g->gc_name, now);
    } else if (phase == 1) {
      tree->ExitGc(now);
    }
  } catch (const std::exception& e) {
    Fail(e.what());
    RestoreProfile();
  }
  Py_RETURN_NONE;
}

PyObject* OnLoaderNext(PyObject*, PyObject*) { return EventEntry(EventKind::kLoaderNext); }
PyObject* OnOptimizerStep(PyObject*, PyObject*) { return EventEntry(EventKind::kOptimizerStep); }
PyObject* OnMarker(PyObject*, PyObject*) { return EventEntry(EventKind::kMarker); }

PyObject* StartWindow(PyObject*, PyObject* args) {
  long long n = 0, start = -1;
  double max_s = 20;
  const char* path = nullptr;
  if (!PyArg_ParseTuple(args, "Lds|L", &n, &max_s, &path, &start)) return nullptr;
  if (n < 1 || !(max_s > 0)) {
    PyErr_SetString(PyExc_ValueError, "need n_iters >= 1 and max_s > 0");
    return nullptr;
  }
  // Beyond what any agent asks (base/window_defaults.h): refused, as a second window is.
  if (n > window_defaults::kMostIterations || !(max_s <= window_defaults::kMostSeconds))
    Py_RETURN_FALSE;
  if (!g->installed || g->failed) Py_RETURN_FALSE;
  std::lock_guard<std::mutex> l(g->mu);
  if (g->armed || g->win_pending) Py_RETURN_FALSE;  // one window at a time
  g->win_pending = true;
  g->win_iters = n;
  g->win_max_s = max_s;
  g->win_path = path;
  g->win_start_iter = start < 0 ? g->det->iterations() : start;
  g->win_stop = false;
  Py_RETURN_TRUE;
}

PyObject* StopWindow(PyObject*, PyObject*) {
  {
    std::lock_guard<std::mutex> l(g->mu);
    g->win_pending = false;
  }
  g->win_stop = true;
  if (g->armed && t_tree != nullptr) Disarm(NowNs());  // the armed thread itself
  Py_RETURN_NONE;
}

// hold_detector(on): while held (counted), completed iterations feed neither the detector's
// statistics nor its slowdown trigger: work the collector itself does (a torch.profiler
// export after a window) slows them.
PyObject* HoldDetector(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  std::lock_guard<std::mutex> l(g->mu);
  g->holds = std::max(0, g->holds + (on ? 1 : -1));
  if (g->det) g->det->SetExcluded(g->window_excludes || g->holds > 0);
  Py_RETURN_NONE;
}

PyObject* Drain(PyObject*, PyObject*) {
  std::deque<News> got;
  {
    std::lock_guard<std::mutex> l(g->mu);
    got.swap(g->news);
  }
  PyObject* list = PyList_New(0);
  if (list == nullptr) return nullptr;
  for (const News& n : got) {
    PyObject* t = nullptr;
    switch (n.kind) {
      case News::kIter:
        t = Py_BuildValue("(sLLLO)", "iter", (long long)n.index, (long long)n.a, (long long)n.b,
                          n.clean ? Py_True : Py_False);
        break;
      case News::kSlowdown:
        t = Py_BuildValue("(sLLL)", "slowdown", (long long)n.index, (long long)n.a, (long long)n.b);
        break;
      case News::kHang:
        t = Py_BuildValue("(sLLL)", "hang", (long long)n.index, (long long)n.a, (long long)n.b);
        break;
      case News::kLearned:
        t = Py_BuildValue("(ss)", "learned", n.text.c_str());
        break;
      case News::kRelearn:
        t = Py_BuildValue("(s)", "relearn");
        break;
      case News::kWindowDone:
        t = Py_BuildValue("(ss)", "window_done", n.text.c_str());
        break;
      case News::kWindowFailed:
        t = Py_BuildValue("(ss)", "window_failed", n.text.c_str());
        break;
    }
    if (t == nullptr || PyList_Append(list, t) != 0) {
      Py_XDECREF(t);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(t);
  }
  return list;
}

PyObject* Stats(PyObject*, PyObject*) {
  // Copied under the lock, built outside it: building Python objects may run the GC, and no
  // Python code may run while the detector's lock is held.
  bool learned = false;
  std::string pattern;
  long long iters = 0, unmatched = 0, relearns = 0, slowdowns = 0, hangs = 0;
  double mean = 0, best = 0, threshold = 0, recent = 0;
  bool excluded = false;
  int holds = 0;
  unsigned long long news_dropped = 0;
  {
    std::lock_guard<std::mutex> l(g->mu);
    if (const IterationDetector* d = g->det.get()) {
      learned = d->learned();
      pattern = d->PatternString();
      iters = d->iterations();
      unmatched = d->unmatched();
      relearns = d->relearn_count();
      slowdowns = d->slowdown_count();
      hangs = d->hang_count();
      mean = d->mean_ns();
      best = d->shift().reference_ns();
      threshold = d->shift().threshold_ns();
      recent = d->shift().recent_ns();
    }
    excluded = g->window_excludes || g->holds > 0;
    holds = g->holds;
    news_dropped = g->news_dropped;
  }
  auto b = [](bool v) { return v ? Py_True : Py_False; };
  return Py_BuildValue(
      "{s:O,s:O,s:O,s:s,s:L,s:L,s:L,s:L,s:L,s:d,s:d,s:d,s:d,s:O,s:i,s:O,s:K,s:K,s:K,s:K,s:K,s:K,s:"
      "K,"
      "s:K,s:K}",
      "installed", b(g->installed), "failed", b(g->failed), "learned", b(learned), "pattern",
      pattern.c_str(), "iterations", iters, "unmatched", unmatched, "relearns", relearns,
      "slowdowns", slowdowns, "hangs", hangs, "mean_ns", mean, "reference_ns", best, "threshold_ns",
      threshold, "recent_ns", recent, "excluded", b(excluded), "holds", holds, "window_armed",
      b(g->armed), "windows_done", (unsigned long long)g->windows_done, "files_written",
      (unsigned long long)g->files_written.load(), "write_errors",
      (unsigned long long)g->write_errors.load(), "tracer_calls",
      (unsigned long long)g->tracer_calls, "tracer_other_calls",
      (unsigned long long)g->tracer_other_calls, "tracer_untraced",
      (unsigned long long)g->tracer_untraced, "tracer_nodes", (unsigned long long)g->tracer_nodes,
      "news_dropped", news_dropped, "gc_spans", (unsigned long long)g->gc_spans);
}

// Test hook: behaves like an internal error so that containment can be tested for real.
PyObject* InjectFailure(PyObject*, PyObject*) {
  Fail("injected by _inject_failure()");
  if (g->armed && t_tree != nullptr) RestoreProfile();
  Py_RETURN_NONE;
}

// Turns the collector off without a message (Python already logged its own one line).
PyObject* Disable(PyObject*, PyObject*) {
  g->failed = true;
  if (g->armed && t_tree != nullptr) RestoreProfile();
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"install", Install, METH_VARARGS, "install(config: dict = {}) -> bool"},
    {"uninstall", Uninstall, METH_NOARGS, "uninstall()"},
    {"on_loader_next", OnLoaderNext, METH_NOARGS, "a DataLoader iterator's next(); 0/1/2"},
    {"on_optimizer_step", OnOptimizerStep, METH_NOARGS, "an optimizer's step(); 0/1/2"},
    {"on_marker", OnMarker, METH_NOARGS, "perftracker.step(): the end of an iteration; 0/1/2"},
    {"gc_event", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(GcEvent)),
     METH_FASTCALL, "gc.callbacks entry: gc_event(phase, info=None); phase 'start'/'stop' or 0/1"},
    {"start_window", StartWindow, METH_VARARGS,
     "start_window(n_iters, max_s, out_path, start_iter=-1) -> bool (False: a window is on, or "
     "n_iters / max_s beyond window_defaults.h's kMostIterations / kMostSeconds)"},
    {"stop_window", StopWindow, METH_NOARGS, "stop_window()"},
    {"drain", Drain, METH_NOARGS, "news since the last drain, oldest first"},
    {"hold_detector", HoldDetector, METH_O,
     "hold_detector(on): iterations completed while held do not feed the slowdown trigger"},
    {"stats", Stats, METH_NOARGS, "counters as a dict"},
    {"_inject_failure", InjectFailure, METH_NOARGS, "test hook"},
    {"disable", Disable, METH_NOARGS, "turn the collector off for good, silently"},
    {"wait_writers", WaitWriters, METH_O,
     "wait_writers(timeout_s) -> bool: no window file is being written any more"},
    {"collective_enter", py::CollectiveEnter, METH_VARARGS,
     "collective_enter(group, desc, seq, op, backend, sizes, dtype, file, line, function) -> "
     "ticket"},
    {"collective_exit", py::CollectiveExit, METH_VARARGS, "collective_exit(ticket, completed)"},
    {"collective_dump", py::CollectiveDump, METH_O,
     "collective_dump(path): the ring of collectives as a Flight Recorder JSON dump"},
    {"collective_crash_path", py::CollectiveCrashPath, METH_O,
     "collective_crash_path(path): where a fatal signal writes the ring"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "perftracker._worker",
                       "perftracker's in-worker collector (iteration detector, Python tracer)",
                       -1,
                       kMethods,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

}  // namespace
}  // namespace perftracker::worker

PyMODINIT_FUNC PyInit__worker() {
  using perftracker::worker::g;
  if (g == nullptr) {
    g = new perftracker::worker::State();
    pthread_atfork(nullptr, nullptr, perftracker::worker::AtForkChild);
  }
  return PyModule_Create(&perftracker::worker::kModule);
}
