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
// The fast path is on_loader_next() / on_optimizer_step(): a clock read, the detector under a
// mutex (only the hang watchdog thread competes for it, for microseconds), and a push of the
// detector's news into a bounded queue that Python drains from a background thread (drain()).
//
// The Python tracer uses PyEval_SetProfile, which arms only the calling thread, so a window
// requested from any thread (the agent client's) is armed by the training thread itself at its
// next loader next() once the requested iteration is reached, and disarmed there (or from inside
// the profile callback once the time limit passes or stop is requested). Function identity is
// the whole call stack: (parent stack id, function name id) pairs are interned into stack ids.
// Each armed thread records into its own ring of finished calls; when the ring is full the
// oldest calls are overwritten (a parent finishes after its children, so parents survive). At
// window end the rings are handed to a writer thread that writes a Chrome-trace JSON with
// python_function events (Python id / Python parent id) and ProfilerStep#N markers, which
// `perftracker analyze` reads like a profiler trace, to PATH.tmp and renames it to PATH.
//
// Python's garbage collector is invisible to PyEval_SetProfile: gc_event(), installed by
// hooks.py as a gc.callbacks entry, records each collection on an armed thread as a call of its
// own function "<gc>" (stack: root -> "<gc>", Python parent id 0, wherever the collection was
// triggered). Finalizers that run Python code during the collection nest under it.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
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

#include "worker/iteration_detector.h"

namespace perftracker::worker {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- news queue (detector -> Python) ----

struct News {
  enum Kind { kIter, kSlowdown, kHang, kLearned, kRelearn, kWindowDone, kWindowFailed } kind;
  int64_t a = 0, b = 0;  // iter: start, end; slowdown: mean, best; hang: now, mean
  int64_t index = 0;
  bool clean = true;
  std::string text;  // learned: pattern; window done / failed: path
};

constexpr int8_t kNotGc = -1;

struct Call {  // a finished (or, at window end, still open) Python call
  uint32_t stack = 0;
  int8_t gc_gen = kNotGc;  // a "<gc>" span: the collected generation (0-2; 3 = unknown)
  uint64_t id = 0, parent = 0;
  int64_t start = 0, end = 0;
};

struct Frame {
  uint32_t stack = 0;
  int8_t gc_gen = kNotGc;  // an open "<gc>" span
  uint64_t id = 0;
  int64_t start = 0;
};

struct ThreadBuf {
  uint64_t tid = 0;
  std::vector<Frame> stack;
  std::vector<Call> ring;
  size_t next = 0;     // ring write position
  uint64_t total = 0;  // calls recorded (total - ring.size() were overwritten)
};

struct Marker {
  int64_t index, start, end;
};

struct WindowOut {  // what the writer thread needs, detached from Python objects
  std::string path;
  int pid = 0;
  std::vector<std::string> names;
  std::vector<std::pair<uint32_t, uint32_t>> stacks;  // stack id -> (parent stack, name id)
  std::vector<std::unique_ptr<ThreadBuf>> bufs;
  std::vector<Marker> markers;
  uint64_t main_tid = 0;
  int64_t origin_ns = 0;
};

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
  bool armed = false;
  bool end_edge_pending = false;   // a window ended outside OnEvent: report 2 at the next event
  unsigned long armed_thread = 0;  // PyThread_get_thread_ident() of the armed thread
  int64_t armed_at_iter = 0, armed_ns = 0, deadline_ns = 0;
  std::vector<Marker> markers;
  size_t ring_capacity = 1 << 18;
  size_t max_stacks = 1 << 20;
  int max_depth = 256;
  uint64_t windows_done = 0;
  std::atomic<uint64_t> files_written{0};
  std::atomic<uint64_t> write_errors{0};

  // Tracer tables (touched only with the GIL held).
  std::unordered_map<const void*, uint32_t> name_ids;  // code object or PyMethodDef -> name id
  std::vector<PyObject*> held_codes;                   // strong refs while armed
  std::vector<std::string> names;
  std::unordered_map<uint64_t, uint32_t> stack_ids;
  std::vector<std::pair<uint32_t, uint32_t>> stacks;
  std::vector<std::unique_ptr<ThreadBuf>> bufs;
  uint64_t next_call_id = 1;
  uint64_t tracer_calls = 0, tracer_overwritten = 0, tracer_dropped = 0;
  uint64_t gc_spans = 0;
};

State* g = nullptr;  // created at module init, never freed (threads may outlive finalization)
thread_local ThreadBuf* t_buf = nullptr;

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

uint32_t NameId(const void* key, PyObject* code_ref, std::string (*make)(PyObject*),
                PyObject* obj) {
  auto it = g->name_ids.find(key);
  if (it != g->name_ids.end()) return it->second;
  g->names.push_back(make(obj));
  const auto id = static_cast<uint32_t>(g->names.size() - 1);
  g->name_ids.emplace(key, id);
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

void RecordCall(ThreadBuf* b, const Call& c) {  // GIL held
  if (b->ring.size() < g->ring_capacity) {
    b->ring.push_back(c);
  } else {
    b->ring[b->next] = c;
    b->next = (b->next + 1) % b->ring.size();
    ++g->tracer_overwritten;
  }
  ++b->total;
  ++g->tracer_calls;
}

uint32_t StackId(uint32_t parent, uint32_t name) {
  const uint64_t key = (static_cast<uint64_t>(parent) << 32) | name;
  auto it = g->stack_ids.find(key);
  if (it != g->stack_ids.end()) return it->second;
  g->stacks.emplace_back(parent, name);
  const auto id = static_cast<uint32_t>(g->stacks.size() - 1);
  g->stack_ids.emplace(key, id);
  return id;
}

void Disarm(int64_t now);

int ProfileCallback(PyObject*, PyFrameObject* frame, int what, PyObject* arg) {
  ThreadBuf* b = t_buf;
  if (b == nullptr || g->failed.load(std::memory_order_relaxed)) {
    PyEval_SetProfile(nullptr, nullptr);
    return 0;
  }
  const int64_t now = NowNs();
  if (now >= g->deadline_ns || g->win_stop.load(std::memory_order_relaxed)) {
    Disarm(now);
    return 0;
  }
  try {
    switch (what) {
      case PyTrace_CALL:
      case PyTrace_C_CALL: {
        if (static_cast<int>(b->stack.size()) >= g->max_depth ||
            g->stacks.size() >= g->max_stacks) {
          ++g->tracer_dropped;
          b->stack.push_back({0, kNotGc, 0, now});  // placeholder keeps returns balanced
          break;
        }
        uint32_t name;
        if (what == PyTrace_CALL) {
          PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
          name = NameId(code, reinterpret_cast<PyObject*>(code), CodeName,
                        reinterpret_cast<PyObject*>(code));
          Py_DECREF(code);
        } else {
          if (!PyCFunction_Check(arg)) {
            b->stack.push_back({0, kNotGc, 0, now});
            break;
          }
          name = NameId(reinterpret_cast<PyCFunctionObject*>(arg)->m_ml, nullptr, CFuncName, arg);
        }
        uint32_t parent = 0;
        for (auto it = b->stack.rbegin(); it != b->stack.rend(); ++it) {
          if (it->id != 0) {
            parent = it->stack;
            break;
          }
        }
        b->stack.push_back({StackId(parent, name), kNotGc, g->next_call_id++, now});
        break;
      }
      case PyTrace_RETURN:
      case PyTrace_C_RETURN:
      case PyTrace_C_EXCEPTION: {
        if (b->stack.empty()) break;  // a call that began before the window
        // An open "<gc>" span is closed by gc_event(stop), never by a return (a return that
        // would pop it belongs to a call that began before the collection: impossible, but
        // harmless to ignore).
        if (b->stack.back().gc_gen != kNotGc) break;
        Frame f = b->stack.back();
        b->stack.pop_back();
        if (f.id == 0) break;
        uint64_t parent_id = 0;
        for (auto it = b->stack.rbegin(); it != b->stack.rend(); ++it) {
          if (it->id != 0) {
            parent_id = it->id;
            break;
          }
        }
        RecordCall(b, Call{f.stack, kNotGc, f.id, parent_id, f.start, now});
        break;
      }
      default:
        break;
    }
  } catch (const std::exception& e) {
    Fail(e.what());
    PyEval_SetProfile(nullptr, nullptr);
  }
  return 0;
}

void WriteWindow(std::shared_ptr<WindowOut> w);

void Arm(int64_t now, int64_t iter) {  // training thread, GIL held
  g->armed = true;
  g->end_edge_pending = false;
  g->armed_thread = PyThread_get_thread_ident();
  g->armed_at_iter = iter;
  g->armed_ns = now;
  g->deadline_ns = now + static_cast<int64_t>(g->win_max_s * 1e9);
  g->win_stop = false;
  g->markers.clear();
  g->names.clear();
  g->name_ids.clear();
  g->stacks.assign(1, {0, 0});  // stack id 0: the root
  g->names.push_back("");
  g->stack_ids.clear();
  g->bufs.clear();
  g->next_call_id = 1;
  auto b = std::make_unique<ThreadBuf>();
  b->tid = PyThread_get_thread_native_id();
  b->ring.reserve(std::min<size_t>(g->ring_capacity, 1 << 14));
  t_buf = b.get();
  g->bufs.push_back(std::move(b));
  PyEval_SetProfile(ProfileCallback, nullptr);
}

void Disarm(int64_t now) {  // training thread (the armed one), GIL held
  PyEval_SetProfile(nullptr, nullptr);
  if (!g->armed) return;
  g->armed = false;
  g->end_edge_pending = true;  // OnEvent reports the end (torch.profiler stops there)
  t_buf = nullptr;
  auto w = std::make_shared<WindowOut>();
  {
    std::lock_guard<std::mutex> l(g->mu);
    w->path = g->win_path;
    w->markers = std::move(g->markers);
    g->markers.clear();
  }
  // Calls still open at the window end are closed there, so their children keep a parent.
  for (auto& b : g->bufs) {
    for (size_t i = 0; i < b->stack.size(); ++i) {
      const Frame& f = b->stack[i];
      if (f.id == 0) continue;
      uint64_t parent_id = 0;
      for (size_t j = i; f.gc_gen == kNotGc && j-- > 0;) {
        if (b->stack[j].id != 0) {
          parent_id = b->stack[j].id;
          break;
        }
      }
      if (b->ring.size() < g->ring_capacity)
        b->ring.push_back({f.stack, f.gc_gen, f.id, parent_id, f.start, now});
    }
    b->stack.clear();
  }
  for (PyObject* c : g->held_codes) Py_DECREF(c);
  g->held_codes.clear();
  g->name_ids.clear();
  w->names = std::move(g->names);
  w->stacks = std::move(g->stacks);
  w->bufs = std::move(g->bufs);
  g->names.clear();
  g->stacks.clear();
  g->stack_ids.clear();
  g->bufs.clear();
  w->pid = static_cast<int>(getpid());
  w->main_tid = w->bufs.empty() ? 0 : w->bufs[0]->tid;
  w->origin_ns = 0;
  ++g->windows_done;
  // Writing a file is blocking I/O: never on the training thread.
  std::thread(WriteWindow, std::move(w)).detach();
}

void JsonString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

void AppendUs(std::string* out, int64_t ns) {  // Chrome trace times are microseconds
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  out->append(buf);
}

void WriteWindow(std::shared_ptr<WindowOut> w) {
  try {
    const std::string tmp = w->path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
      ++g->write_errors;
      std::lock_guard<std::mutex> l(g->mu);
      News n{News::kWindowFailed, 0, 0, 0, false, {}};
      n.text = w->path;
      PushNews(std::move(n));
      return;
    }
    std::string out = "{\"traceEvents\":[\n";
    bool first = true;
    auto sep = [&] {
      if (!first) out += ",\n";
      first = false;
    };
    const std::string pid = std::to_string(w->pid);
    for (const Marker& m : w->markers) {
      sep();
      out += "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#" +
             std::to_string(m.index) + "\",\"pid\":" + pid +
             ",\"tid\":" + std::to_string(w->main_tid) + ",\"ts\":";
      AppendUs(&out, m.start);
      out += ",\"dur\":";
      AppendUs(&out, m.end - m.start);
      out += ",\"args\":{}}";
    }
    for (const auto& b : w->bufs) {
      for (const Call& c : b->ring) {
        sep();
        out += "{\"ph\":\"X\",\"cat\":\"python_function\",\"name\":";
        JsonString(&out, w->names[w->stacks[c.stack].second]);
        out += ",\"pid\":" + pid + ",\"tid\":" + std::to_string(b->tid) + ",\"ts\":";
        AppendUs(&out, c.start);
        out += ",\"dur\":";
        AppendUs(&out, c.end - c.start);
        out += ",\"args\":{\"Python id\":" + std::to_string(c.id) +
               ",\"Python parent id\":" + std::to_string(c.parent) +
               ",\"Python stack id\":" + std::to_string(c.stack);
        if (c.gc_gen != kNotGc && c.gc_gen < 3) {
          out += ",\"gc generation\":" + std::to_string(c.gc_gen);
        }
        out += "}}";
        if (out.size() > (1 << 20)) {
          std::fwrite(out.data(), 1, out.size(), f);
          out.clear();
        }
      }
    }
    out += "\n]}\n";
    std::fwrite(out.data(), 1, out.size(), f);
    const bool ok = std::fflush(f) == 0;
    std::fclose(f);
    if (!ok || std::rename(tmp.c_str(), w->path.c_str()) != 0) {
      ++g->write_errors;
      std::remove(tmp.c_str());
      std::lock_guard<std::mutex> l(g->mu);
      News n{News::kWindowFailed, 0, 0, 0, false, {}};
      n.text = w->path;
      PushNews(std::move(n));
      return;
    }
    ++g->files_written;
    std::lock_guard<std::mutex> l(g->mu);
    News n{News::kWindowDone, 0, 0, 0, true, {}};
    n.text = w->path;
    PushNews(std::move(n));
  } catch (const std::exception& e) {
    ++g->write_errors;
  }
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
      if (g->armed) g->markers.push_back({it.index, it.start_ns, it.end_ns});
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
    if (g->win_pending && !end_first && kind == EventKind::kLoaderNext && d.learned() &&
        iters >= g->win_start_iter) {
      g->win_pending = false;
      arm = true;
    }
  }
  if (arm && !g->armed) {
    Arm(now, iters);
    return 1;
  }
  if (g->armed && t_buf != nullptr &&
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
    if (g->det->CheckHang(now)) {
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
  t_buf = nullptr;
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
         relearn = c.relearn_after, period = c.max_period,
         ring = static_cast<double>(g->ring_capacity), depth = g->max_depth;
  if (cfg != nullptr &&
      !(GetNum(cfg, "learn_repeats", &learn) && GetNum(cfg, "window", &window) &&
        GetNum(cfg, "slowdown_ratio", &ratio) && GetNum(cfg, "hang_factor", &hang) &&
        GetNum(cfg, "relearn_after", &relearn) && GetNum(cfg, "max_period", &period) &&
        GetNum(cfg, "tracer_buffer_calls", &ring) && GetNum(cfg, "tracer_max_depth", &depth))) {
    return nullptr;
  }
  c.learn_repeats = static_cast<int>(learn);
  c.window = static_cast<int>(window);
  c.slowdown_ratio = ratio;
  c.hang_factor = hang;
  c.relearn_after = static_cast<int>(relearn);
  c.max_period = static_cast<int>(period);
  if (Status st = c.Validate(); !st.ok()) {
    PyErr_SetString(PyExc_ValueError, st.message().c_str());
    return nullptr;
  }
  if (ring < 1024 || ring > 1e8 || depth < 1 || depth > 10000) {
    PyErr_SetString(PyExc_ValueError, "tracer_buffer_calls or tracer_max_depth out of range");
    return nullptr;
  }
  try {
    std::lock_guard<std::mutex> l(g->mu);
    g->det = std::make_unique<IterationDetector>(c);
    g->ring_capacity = static_cast<size_t>(ring);
    g->max_depth = static_cast<int>(depth);
    g->news.clear();
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
  if (g->armed && t_buf != nullptr) Disarm(NowNs());
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
    if (g->armed && t_buf != nullptr) PyEval_SetProfile(nullptr, nullptr);
    return PyLong_FromLong(0);
  }
}

// gc.callbacks entry: gc_event(phase, info=None); phase "start"/"stop" (as the gc module calls
// it) or 0/1. Records only on an armed thread; elsewhere it returns after one thread-local read.
// Never raises (a gc callback's exception would be printed by the interpreter).
PyObject* GcEvent(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  ThreadBuf* b = t_buf;
  if (b == nullptr || nargs < 1 || g->failed.load(std::memory_order_relaxed)) Py_RETURN_NONE;
  try {
    const int64_t now = NowNs();
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
      int gen = 3;
      if (nargs >= 2 && PyDict_Check(args[1])) {
        PyObject* v = PyDict_GetItemString(args[1], "generation");  // borrowed
        if (v != nullptr && PyLong_Check(v)) {
          const long n = PyLong_AsLong(v);
          if (n >= 0 && n <= 2) gen = static_cast<int>(n);
        }
        if (PyErr_Occurred()) PyErr_Clear();
      }
      if (static_cast<int>(b->stack.size()) >= g->max_depth || g->stacks.size() >= g->max_stacks) {
        ++g->tracer_dropped;
        b->stack.push_back({0, static_cast<int8_t>(gen), 0, now});  // placeholder, closed by stop
        Py_RETURN_NONE;
      }
      static const char kGcKey = 0;
      const uint32_t name = NameId(
          &kGcKey, nullptr, [](PyObject*) { return std::string("<gc>"); }, nullptr);
      b->stack.push_back({StackId(0, name), static_cast<int8_t>(gen), g->next_call_id++, now});
    } else if (phase == 1) {
      // The innermost open span; frames above it (none, unless a finalizer left the tracer
      // unbalanced) are dropped with it.
      for (size_t i = b->stack.size(); i-- > 0;) {
        if (b->stack[i].gc_gen == kNotGc) continue;
        const Frame f = b->stack[i];
        b->stack.resize(i);
        if (f.id != 0) {
          RecordCall(b, Call{f.stack, f.gc_gen, f.id, 0, f.start, now});
          ++g->gc_spans;
        }
        break;
      }
    }
  } catch (const std::exception& e) {
    Fail(e.what());
    PyEval_SetProfile(nullptr, nullptr);
  }
  Py_RETURN_NONE;
}

PyObject* OnLoaderNext(PyObject*, PyObject*) { return EventEntry(EventKind::kLoaderNext); }
PyObject* OnOptimizerStep(PyObject*, PyObject*) { return EventEntry(EventKind::kOptimizerStep); }

PyObject* StartWindow(PyObject*, PyObject* args) {
  long long n = 0, start = -1;
  double max_s = 20;
  const char* path = nullptr;
  if (!PyArg_ParseTuple(args, "Lds|L", &n, &max_s, &path, &start)) return nullptr;
  if (n < 1 || !(max_s > 0)) {
    PyErr_SetString(PyExc_ValueError, "need n_iters >= 1 and max_s > 0");
    return nullptr;
  }
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
  if (g->armed && t_buf != nullptr) Disarm(NowNs());  // the armed thread itself
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
  double mean = 0, best = 0;
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
      best = d->best_mean_ns();
    }
    news_dropped = g->news_dropped;
  }
  auto b = [](bool v) { return v ? Py_True : Py_False; };
  return Py_BuildValue(
      "{s:O,s:O,s:O,s:s,s:L,s:L,s:L,s:L,s:L,s:d,s:d,s:O,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
      "installed", b(g->installed), "failed", b(g->failed), "learned", b(learned), "pattern",
      pattern.c_str(), "iterations", iters, "unmatched", unmatched, "relearns", relearns,
      "slowdowns", slowdowns, "hangs", hangs, "mean_ns", mean, "best_mean_ns", best, "window_armed",
      b(g->armed), "windows_done", (unsigned long long)g->windows_done, "files_written",
      (unsigned long long)g->files_written.load(), "write_errors",
      (unsigned long long)g->write_errors.load(), "tracer_calls",
      (unsigned long long)g->tracer_calls, "tracer_overwritten",
      (unsigned long long)g->tracer_overwritten, "tracer_dropped",
      (unsigned long long)g->tracer_dropped, "news_dropped", news_dropped, "gc_spans",
      (unsigned long long)g->gc_spans);
}

// Test hook: behaves like an internal error so that containment can be tested for real.
PyObject* InjectFailure(PyObject*, PyObject*) {
  Fail("injected by _inject_failure()");
  if (g->armed && t_buf != nullptr) PyEval_SetProfile(nullptr, nullptr);
  Py_RETURN_NONE;
}

// Turns the collector off without a message (Python already logged its own one line).
PyObject* Disable(PyObject*, PyObject*) {
  g->failed = true;
  if (g->armed && t_buf != nullptr) PyEval_SetProfile(nullptr, nullptr);
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"install", Install, METH_VARARGS, "install(config: dict = {}) -> bool"},
    {"uninstall", Uninstall, METH_NOARGS, "uninstall()"},
    {"on_loader_next", OnLoaderNext, METH_NOARGS, "a DataLoader iterator's next(); 0/1/2"},
    {"on_optimizer_step", OnOptimizerStep, METH_NOARGS, "an optimizer's step(); 0/1/2"},
    {"gc_event", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(GcEvent)),
     METH_FASTCALL, "gc.callbacks entry: gc_event(phase, info=None); phase 'start'/'stop' or 0/1"},
    {"start_window", StartWindow, METH_VARARGS,
     "start_window(n_iters, max_s, out_path, start_iter=-1) -> bool"},
    {"stop_window", StopWindow, METH_NOARGS, "stop_window()"},
    {"drain", Drain, METH_NOARGS, "news since the last drain, oldest first"},
    {"stats", Stats, METH_NOARGS, "counters as a dict"},
    {"_inject_failure", InjectFailure, METH_NOARGS, "test hook"},
    {"disable", Disable, METH_NOARGS, "turn the collector off for good, silently"},
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
