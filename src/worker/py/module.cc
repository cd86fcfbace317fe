// perftracker._worker: the in-worker collector as a CPython extension. Only the CPython glue is
// here; the logic is in the pt_worker library, Python-free and unit-tested:
//   worker/window_control.h   the detector under its mutex, the news queue, the requested window,
//                             when it arms and ends, the hang watchdog, the window writers;
//   worker/window_recorder.h  the armed window's tracer clock, interned names and call tree;
//   worker/heap_sampler.h     a memory window's sampled Python heap (its allocator hooks are
//                             py/heap_hooks.cc);
//   worker/name_table.h       names by code object / method def, behind a direct-mapped cache;
//   worker/tracer_clock.h     the TSC scaled to steady-clock nanoseconds.
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
// next iteration start once the requested iteration is reached, and disarmed there (or from
// inside the profile callback once the time limit passes or stop is requested): WindowControl
// decides, this file turns the tracer on and off. Function identity is the whole call stack.
// Calls are aggregated as they return into a CallTree (worker/call_tree.h), so the tracer loses
// nothing at any call rate and its memory is bounded by the node cap, not by the number of calls.
// At window end the tree is handed to a writer thread that writes it as
// "perftracker.python_window/1" JSON (worker/window_file.h) to PATH.tmp and renames it to PATH.
//
// torch.profiler's with_stack (a memory window's) installs its own profile function over the
// window's: chain_profile() puts the window's back in front, passing every event on, and the
// tree takes the real stack again (CallTree::Resync).
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

#include <atomic>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/window_defaults.h"
#include "worker/call_tree.h"
#include "worker/iteration_detector.h"
#include "worker/py/collectives.h"
#include "worker/py/heap_hooks.h"
#include "worker/tracer_clock.h"
#include "worker/window_control.h"
#include "worker/window_file.h"
#include "worker/window_recorder.h"

namespace perftracker::worker {
namespace {

struct State {
  WindowControl control;  // the detector, the news, the window's arming and end
  std::atomic<bool> installed{false};
  std::atomic<bool> failed{false};
  CallTreeLimits limits;

  // The tracer (touched only with the GIL held, by the armed thread).
  WindowRecorder recorder;
  uint64_t traced_tid = 0;
  std::vector<PyObject*> held_codes;  // strong refs while armed: keys of recorder.names()
  // Code objects whose calls go unrecorded with everything under them (mute_calls()): the
  // collector's own per-op code. Strong refs, kept for good; a handful at most.
  std::vector<PyObject*> muted_codes;
};

State* g = nullptr;  // created at module init, never freed (threads may outlive finalization)
thread_local CallTree* t_tree = nullptr;
// The profile function the armed thread had before the window (a user's cProfile, a debugger's
// profiler): put back when the window ends, not cleared. Owned reference to its object.
thread_local Py_tracefunc t_saved_profile = nullptr;
thread_local PyObject* t_saved_profile_obj = nullptr;

// A profile function installed over ours while the window records (torch.profiler's Python
// tracer: with_stack, asked for in a memory window): chain_profile() puts ours back in front,
// and ours passes every event on to it, so that both see the thread's calls. Owned reference.
thread_local Py_tracefunc t_chained = nullptr;
thread_local PyObject* t_chained_obj = nullptr;

// Ends this thread's tracing by the window and gives the thread back its own profiler, or the
// chained one (whose owner removes it when it stops). GIL held.
void RestoreProfile() {
  PyObject* obj = t_saved_profile_obj;
  Py_tracefunc func = t_saved_profile;
  t_saved_profile = nullptr;
  t_saved_profile_obj = nullptr;
  if (t_chained != nullptr) {
    Py_XDECREF(obj);
    func = t_chained;
    obj = t_chained_obj;
    t_chained = nullptr;
    t_chained_obj = nullptr;
  }
  PyEval_SetProfile(func, obj);  // takes its own reference
  Py_XDECREF(obj);
}

void Fail(const char* what) {
  bool expected = false;
  if (!g->failed.compare_exchange_strong(expected, true)) return;
  std::fprintf(stderr, "perftracker: worker collector turned off after an internal error: %s\n",
               what);
}

// ---- tracer ----

uint32_t NameId(const void* key, PyObject* code_ref, std::string (*make)(PyObject*),
                PyObject* obj) {
  NameTable& names = g->recorder.names();
  uint32_t id = 0;
  if (names.Find(key, &id)) return id;
  id = names.Add(key, make(obj));
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

int RecordEvent(PyFrameObject* frame, int what, PyObject* arg);

int ProfileCallback(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  // Borrowed: a RestoreProfile below installs the chained function, which keeps it alive.
  const Py_tracefunc chained = t_chained;
  PyObject* chained_obj = t_chained_obj;
  RecordEvent(frame, what, arg);
  return chained != nullptr ? chained(chained_obj, frame, what, arg) : 0;
}

bool IsMuted(PyObject* code) {
  for (PyObject* c : g->muted_codes)
    if (c == code) return true;
  return false;
}

int RecordEvent(PyFrameObject* frame, int what, PyObject* arg) {
  CallTree* tree = t_tree;
  if (tree == nullptr || g->failed.load(std::memory_order_relaxed)) {
    RestoreProfile();
    return 0;
  }
  const int64_t now = g->recorder.Now();
  if (g->control.Expired(now)) {
    Disarm(SteadyNowNs());
    return 0;
  }
  try {
    switch (what) {
      case PyTrace_CALL: {
        PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
        if (!tree->muted() && IsMuted(reinterpret_cast<PyObject*>(code))) {
          Py_DECREF(code);
          tree->EnterMuted();
          break;
        }
        const uint32_t name = NameId(code, reinterpret_cast<PyObject*>(code), CodeName,
                                     reinterpret_cast<PyObject*>(code));
        Py_DECREF(code);
        tree->Enter(name, now);
        break;
      }
      case PyTrace_C_CALL:
        if (PyCFunction_Check(arg)) {
          tree->EnterC(
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

// The calling thread's Python frames as name ids, outermost first (at most the depth cap).
std::vector<uint32_t> PythonStack() {
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
  std::vector<uint32_t> names;
  names.reserve(codes.size());
  for (auto it = codes.rbegin(); it != codes.rend(); ++it) {
    PyObject* code = reinterpret_cast<PyObject*>(*it);
    names.push_back(NameId(code, code, CodeName, code));
    Py_DECREF(code);
  }
  return names;
}

void Arm(int64_t now, int64_t iter) {  // training thread, GIL held
  g->control.PrepareArm(now, iter, PyThread_get_thread_ident());
  g->recorder.Begin(now, g->limits);
  CallTree* tree = g->recorder.tree();
  g->traced_tid = PyThread_get_thread_native_id();
  // The Python calls in progress (the training loop, the step function, the loader's next())
  // began before the window: enter them now, so that their callees get the same identity (the
  // whole stack) as in the window's later iterations. C calls in progress between them (the
  // on_loader_next() arming the window, a builtin next()) cannot be listed; their returns are
  // recognised and ignored (CallTree::ExitC).
  for (uint32_t name : PythonStack()) tree->EnterInProgress(name, now);
  t_tree = tree;
  if (g->control.armed_sample_heap())
    py::StartHeapSampling(tree, static_cast<uint64_t>(now) ^ static_cast<uint64_t>(getpid()),
                          &g->failed);
  g->control.CommitArm();
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
  KeptHeap kept = py::StopHeapSampling();  // before the tree it placed samples in moves
  if (!g->control.armed()) return;
  t_tree = nullptr;
  auto w = std::make_shared<PythonWindow>();
  w->kept = std::move(kept);
  g->control.FinishWindow(now, w.get());
  g->recorder.Finish(now, w.get());
  for (PyObject* c : g->held_codes) Py_DECREF(c);
  g->held_codes.clear();
  w->pid = static_cast<int>(getpid());
  w->tid = g->traced_tid;
  g->control.StartWriter(std::move(w));
}

// wait_writers(timeout_s) -> bool: waits (GIL released) until no window file is being written;
// False if the timeout came first. The exit hook's: a process ending mid-write loses the file.
PyObject* WaitWriters(PyObject*, PyObject* arg) {
  const double timeout = PyFloat_AsDouble(arg);
  if (PyErr_Occurred()) return nullptr;
  bool done = false;
  Py_BEGIN_ALLOW_THREADS done = g->control.WaitWriters(timeout);
  Py_END_ALLOW_THREADS return PyBool_FromLong(done);
}

// ---- detector entry points ----

// The event's EventEdge (worker/window_control.h): Python then starts or stops torch.profiler on
// this same thread.
int OnEvent(EventKind kind) {
  const int64_t now = SteadyNowNs();
  const WindowControl::ThreadId self = PyThread_get_thread_ident();
  const EventDecision d = g->control.OnEvent(kind, now, self, t_tree);
  if (d.action == WindowAction::kArm) {
    Arm(now, d.iteration);
    return kArmedEdge;
  }
  if (d.action == WindowAction::kDisarm) Disarm(now);
  if (g->control.TakeEndEdge(self)) return kEndedEdge;
  return d.torch_done ? kTorchDoneEdge : kNoEdge;
}

// A forked child (DataLoader workers, subprocess helpers) has this state but not the watchdog
// thread, and the mutex may have been held at the fork: the child starts over with the collector
// off (WindowControl::ResetAfterFork).
void AtForkChild() {
  if (g == nullptr) return;
  g->control.ResetAfterFork();
  g->installed = false;
  t_tree = nullptr;
  py::HeapSamplingAfterFork();
  g->recorder.AbandonAfterFork();  // the parent's tree: a forked child never touches (nor frees) it
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
  if (Status st = CheckTracerLimits(nodes, depth); !st.ok()) {
    PyErr_SetString(PyExc_ValueError, st.message().c_str());
    return nullptr;
  }
  try {
    g->control.Install(c);
    g->limits.max_nodes = static_cast<size_t>(nodes);
    g->limits.max_depth = static_cast<int>(depth);
    g->recorder.Start();
    g->control.StartWatchdog(&g->failed);
  } catch (const std::exception& e) {
    Fail(e.what());
    Py_RETURN_FALSE;
  }
  g->installed = true;
  Py_RETURN_TRUE;
}

PyObject* Uninstall(PyObject*, PyObject*) {
  if (!g->installed) Py_RETURN_NONE;
  if (g->control.armed() && t_tree != nullptr) Disarm(SteadyNowNs());
  // The join waits for the watchdog's last check, which never needs the GIL: released meanwhile.
  PyThreadState* ts = PyEval_SaveThread();
  g->control.StopWatchdog();
  PyEval_RestoreThread(ts);
  g->installed = false;
  Py_RETURN_NONE;
}

PyObject* EventEntry(EventKind kind) {
  if (!g->installed || g->failed.load(std::memory_order_relaxed)) return PyLong_FromLong(0);
  try {
    return PyLong_FromLong(OnEvent(kind));
  } catch (const std::exception& e) {
    Fail(e.what());
    if (g->control.armed() && t_tree != nullptr) RestoreProfile();
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
    const int64_t now = g->recorder.Now();
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
      tree->EnterGc(g->recorder.gc_name(), now);
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
  double max_s = window_defaults::kMaxSeconds;
  const char* path = nullptr;
  int heap = 0;
  if (!PyArg_ParseTuple(args, "Lds|Lp", &n, &max_s, &path, &start, &heap)) return nullptr;
  if (n < 1 || !(max_s > 0)) {
    PyErr_SetString(PyExc_ValueError, "need n_iters >= 1 and max_s > 0");
    return nullptr;
  }
  if (!g->installed || g->failed) Py_RETURN_FALSE;
  // Refused while a window is on, and beyond base/window_defaults.h's most.
  if (!g->control.Request({n, max_s, path, start, heap != 0})) Py_RETURN_FALSE;
  Py_RETURN_TRUE;
}

// chain_profile() -> bool: on the armed thread, after torch.profiler started its own Python
// tracer over the window's (with_stack), puts the window's in front again and passes each event
// on to torch's; False when there is nothing to chain (no window armed here, no other tracer).
PyObject* ChainProfile(PyObject*, PyObject*) {
  if (!g->installed || g->failed || t_tree == nullptr) Py_RETURN_FALSE;
  PyThreadState* ts = PyThreadState_Get();
  if (ts->c_profilefunc == nullptr || ts->c_profilefunc == ProfileCallback) Py_RETURN_FALSE;
  try {
    // The calls and returns the other function took while it held the thread are lost to the
    // window's tree: it takes the real stack again. This call's own return is to come (its call
    // went to the other function): a placeholder takes it.
    t_tree->Resync(PythonStack(), g->recorder.Now());
    t_tree->EnterUntraced();
  } catch (const std::exception& e) {
    Fail(e.what());
    Py_RETURN_FALSE;
  }
  Py_XDECREF(t_chained_obj);
  t_chained = ts->c_profilefunc;
  t_chained_obj = ts->c_profileobj;
  Py_XINCREF(t_chained_obj);
  PyEval_SetProfile(ProfileCallback, nullptr);
  Py_RETURN_TRUE;
}

PyObject* StopWindow(PyObject*, PyObject*) {
  g->control.Stop();
  if (g->control.armed() && t_tree != nullptr) Disarm(SteadyNowNs());  // the armed thread itself
  Py_RETURN_NONE;
}

// keep_block(addr, nbytes, op, name) -> bool: a tensor's storage of NBYTES at ADDR, made by the
// torch op OP (named NAME) on this thread, is followed while this thread's window samples the
// heap (worker/py/heap_hooks.h KeepBlock); False when none does (the caller stops asking).
PyObject* KeepBlock(PyObject*, PyObject* args) {
  unsigned long long addr = 0, n = 0;
  PyObject* op = nullptr;
  PyObject* name = nullptr;
  if (!PyArg_ParseTuple(args, "KKOU", &addr, &n, &op, &name)) return nullptr;
  if (!g->installed || g->failed || t_tree == nullptr) Py_RETURN_FALSE;
  try {
    // OP keys its name as a code object does (kept alive while armed: held_codes).
    py::KeepBlock(static_cast<uintptr_t>(addr), static_cast<size_t>(n), NameId(op, op, Utf8, name));
  } catch (const std::exception& e) {
    Fail(e.what());
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

// mute_calls(code): calls of the code object CODE, and everything under them, go unrecorded from
// now on (CallTree::EnterMuted): the collector's own per-op Python. At most kMaxMutedCodes.
PyObject* MuteCalls(PyObject*, PyObject* code) {
  constexpr size_t kMaxMutedCodes = 8;  // the tensor recorder's and torch's dispatch helper
  if (!PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "mute_calls() needs a code object");
    return nullptr;
  }
  if (IsMuted(code)) Py_RETURN_TRUE;
  if (g->muted_codes.size() >= kMaxMutedCodes) Py_RETURN_FALSE;
  Py_INCREF(code);
  g->muted_codes.push_back(code);
  Py_RETURN_TRUE;
}

// forget_block(addr): the tensor storage at ADDR is freed; any thread.
PyObject* ForgetBlock(PyObject*, PyObject* arg) {
  const unsigned long long addr = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return nullptr;
  py::ForgetBlock(static_cast<uintptr_t>(addr));
  Py_RETURN_NONE;
}

// hold_detector(on): while held (counted), completed iterations feed neither the detector's
// statistics nor its slowdown trigger: work the collector itself does (a torch.profiler
// export after a window) slows them.
PyObject* HoldDetector(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  g->control.Hold(on != 0);
  Py_RETURN_NONE;
}

PyObject* Drain(PyObject*, PyObject*) {
  const std::deque<News> got = g->control.TakeNews();
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
  const ControlStats c = g->control.Snapshot();
  const TracerTotals& t = g->recorder.totals();
  auto b = [](bool v) { return v ? Py_True : Py_False; };
  return Py_BuildValue(
      "{s:O,s:O,s:O,s:s,s:L,s:L,s:L,s:L,s:L,s:d,s:d,s:d,s:d,s:O,s:i,s:O,s:K,s:K,s:K,s:K,s:K,s:K,s:"
      "K,"
      "s:K,s:K}",
      "installed", b(g->installed), "failed", b(g->failed), "learned", b(c.learned), "pattern",
      c.pattern.c_str(), "iterations", (long long)c.iterations, "unmatched", (long long)c.unmatched,
      "relearns", (long long)c.relearns, "slowdowns", (long long)c.slowdowns, "hangs",
      (long long)c.hangs, "mean_ns", c.mean_ns, "reference_ns", c.reference_ns, "threshold_ns",
      c.threshold_ns, "recent_ns", c.recent_ns, "excluded", b(c.excluded), "holds", c.holds,
      "window_armed", b(g->control.armed()), "windows_done",
      (unsigned long long)g->control.windows_done(), "files_written",
      (unsigned long long)g->control.files_written(), "write_errors",
      (unsigned long long)g->control.write_errors(), "tracer_calls", (unsigned long long)t.calls,
      "tracer_other_calls", (unsigned long long)t.other_calls, "tracer_untraced",
      (unsigned long long)t.untraced, "tracer_nodes", (unsigned long long)t.nodes, "news_dropped",
      (unsigned long long)c.news_dropped, "gc_spans", (unsigned long long)t.gc_spans);
}

// Test hook: behaves like an internal error so that containment can be tested for real.
PyObject* InjectFailure(PyObject*, PyObject*) {
  Fail("injected by _inject_failure()");
  if (g->control.armed() && t_tree != nullptr) RestoreProfile();
  Py_RETURN_NONE;
}

// Turns the collector off without a message (Python already logged its own one line).
PyObject* Disable(PyObject*, PyObject*) {
  g->failed = true;
  if (g->control.armed() && t_tree != nullptr) RestoreProfile();
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"install", Install, METH_VARARGS, "install(config: dict = {}) -> bool"},
    {"uninstall", Uninstall, METH_NOARGS, "uninstall()"},
    {"on_loader_next", OnLoaderNext, METH_NOARGS, "a DataLoader iterator's next(); 0/1/2/3"},
    {"on_optimizer_step", OnOptimizerStep, METH_NOARGS, "an optimizer's step(); 0/1/2/3"},
    {"on_marker", OnMarker, METH_NOARGS, "perftracker.step(): the end of an iteration; 0/1/2/3"},
    {"gc_event", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(GcEvent)),
     METH_FASTCALL, "gc.callbacks entry: gc_event(phase, info=None); phase 'start'/'stop' or 0/1"},
    {"start_window", StartWindow, METH_VARARGS,
     "start_window(n_iters, max_s, out_path, start_iter=-1, sample_heap=False) -> bool (False: a "
     "window is on, or n_iters / max_s beyond window_defaults.h's kMostIterations / "
     "kMostSeconds); sample_heap: where the Python heap is kept (worker/heap_sampler.h)"},
    {"stop_window", StopWindow, METH_NOARGS, "stop_window()"},
    {"chain_profile", ChainProfile, METH_NOARGS,
     "chain_profile() -> bool: the window's tracer in front of a profile function installed "
     "over it (torch.profiler's with_stack), passing each event on"},
    {"drain", Drain, METH_NOARGS, "news since the last drain, oldest first"},
    {"keep_block", KeepBlock, METH_VARARGS,
     "keep_block(addr, nbytes, op, name) -> bool: a tensor storage the memory window follows"},
    {"forget_block", ForgetBlock, METH_O, "forget_block(addr): a followed storage is freed"},
    {"mute_calls", MuteCalls, METH_O, "mute_calls(code) -> bool: its calls go unrecorded"},
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
