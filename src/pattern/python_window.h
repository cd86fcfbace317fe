// The one reader of the Python tracer's window file ("perftracker.python_window/1",
// base/python_window_format.h, written by worker/window_file.h): ReadPythonWindow checks every
// record and count before use (bounded by limits::kMaxPythonWindowFile) and gives the file as
// plain values, for the summary below and the Perfetto export (report/trace_export.h).
// SummarizePythonWindow turns its call-stack aggregate into behaviour patterns: one
// FunctionPattern per call-stack path, with the meaning the summarizer gives python_function
// events of a profiler trace (identity = name + callers, per-iteration time and calls, self
// time, spread, quantiles). A window that sampled the Python heap also gives memory sites
// (RankSummary::memory_sites, device "cpu", op kPythonHeapOp or the torch op whose tensors the
// collector followed whole): the sampled heap kept past the iteration that allocated it, placed
// at the program's innermost function as the summarizer places profile_memory's records
// (pattern/memory_sites.h).
#ifndef PERFTRACKER_PATTERN_PYTHON_WINDOW_H_
#define PERFTRACKER_PATTERN_PYTHON_WINDOW_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/python_window_format.h"
#include "base/status.h"
#include "pattern/pattern.h"

namespace perftracker::pattern {

// A window file as read: every array's arity, every index and every count checked.
struct PythonWindowFile {
  struct Iteration {
    int64_t index = 0, start_ns = 0, end_ns = 0;
  };
  struct Cell {
    int64_t iteration = 0;  // position in `iterations`
    uint64_t calls = 0, inclusive_ns = 0, self_ns = 0;
  };
  struct Node {
    uint64_t parent = 0, name = 0;  // parent < its own index; name < names.size()
    bool gc = false;
    uint64_t count = 0, total_ns = 0, self_ns = 0, min_ns = 0, max_ns = 0;
    double sum_sq_ns = 0;
    int64_t hist_offset = 0;
    std::vector<uint32_t> hist;
    std::vector<Cell> cells;
  };
  struct LongCall {
    uint64_t node = 0;  // < nodes.size()
    int64_t start_ns = 0, end_ns = 0;
  };
  // The sampled Python heap still live at the window's end (worker/heap_sampler.h), where the
  // window sampled it.
  struct KeptCell {
    uint64_t node = 0;       // < nodes.size()
    int64_t iteration = -1;  // position in `iterations`; -1: outside them
    uint64_t bytes = 0, samples = 0;
    uint64_t op = 0;  // < names.size(); 0: Python objects sampled, else whole tensors by op
  };
  bool has_tid = false;
  int64_t tid = 0, start_ns = 0, end_ns = 0;
  std::vector<Iteration> iterations;
  std::vector<std::string> names;  // as the tracer wrote them
  std::vector<Node> nodes;
  std::vector<LongCall> long_calls;
  int64_t kept_sample_bytes = 0;  // 0: the window did not sample the heap
  uint64_t kept_samples = 0, kept_dropped = 0;
  std::vector<KeptCell> kept;
  uint64_t calls = 0;  // stats.calls
  size_t bytes = 0;
};

// The file at PATH, or NAME's JSON text. Errors name the file and what is wrong in one line.
StatusOr<PythonWindowFile> ReadPythonWindow(const std::string& path);
StatusOr<PythonWindowFile> ParsePythonWindow(std::string_view json, const std::string& name);

// The op a memory site of the sampled Python heap names (MemorySite::op).
inline constexpr char kPythonHeapOp[] = "Python objects";

// The window's patterns. The rank comes from the file name (rank-3.python.json) unless the
// caller sets it.
StatusOr<RankSummary> SummarizePythonWindow(const std::string& path);

// Whether the file at PATH starts as a Python tracer's window file does (aggregates, not an event
// trace: base/python_window_format.h); false for a file that cannot be read.
bool IsPythonWindowFile(const std::string& path);
StatusOr<RankSummary> SummarizePythonWindowBuffer(std::string_view json, const std::string& name);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_PYTHON_WINDOW_H_
