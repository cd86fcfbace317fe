// The file the Python tracer leaves for one profiling window: its CallTree as JSON
// ("perftracker.python_window/1", base/python_window_format.h), written by a thread of
// its own (never the training thread) through PATH.tmp, created exclusively, and a link. The
// node agent reads it back with pattern/python_window.h and turns it into behaviour patterns.
#ifndef PERFTRACKER_WORKER_WINDOW_FILE_H_
#define PERFTRACKER_WORKER_WINDOW_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "worker/call_tree.h"
#include "worker/heap_sampler.h"

namespace perftracker::worker {

// One iteration the window profiled: its number and its span (the window file's iteration marks).
struct IterationMark {
  int64_t index;  // the detector's iteration number
  int64_t start_ns, end_ns;
};

// Everything the writer needs, detached from Python objects.
struct PythonWindow {
  std::string path;
  int pid = 0;
  uint64_t tid = 0;  // the traced (training) thread
  int64_t start_ns = 0, end_ns = 0;
  std::vector<std::string> names;  // name id -> "file.py(12): fn" or "<built-in method x>"
  std::vector<IterationMark> markers;
  CallTree tree;
  KeptHeap kept;  // the window's sampled Python heap, where it sampled (sample_bytes > 0)
};

// The window as JSON.
std::string PythonWindowJson(const PythonWindow& w);
// Writes it to w.path, through w.path + ".tmp" made with O_CREAT | O_EXCL | O_NOFOLLOW (mode
// 0600) and then linked to w.path: a file or a link already at either name is an error, never
// followed or overwritten.
Status WritePythonWindow(const PythonWindow& w);

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_WINDOW_FILE_H_
