// Reads the Python tracer's window file ("perftracker.python_window/1", written by
// worker/window_file.h, described in src/worker/protocol.md) and turns its call-stack aggregate
// into behaviour patterns: one FunctionPattern per call-stack path, with the same meaning as the
// summarizer gives python_function events of a profiler trace (identity = name + callers,
// per-iteration time and calls, self time, spread, quantiles). The file is small (bounded by the
// tracer's node cap), so it is parsed whole; every count is checked before it is used.
#ifndef PERFTRACKER_PATTERN_PYTHON_WINDOW_H_
#define PERFTRACKER_PATTERN_PYTHON_WINDOW_H_

#include <string>
#include <string_view>

#include "base/status.h"
#include "pattern/pattern.h"

namespace perftracker::pattern {

// True when HEAD (a file's first bytes) starts a Python window file.
bool LooksLikePythonWindow(std::string_view head);

// The window's patterns. The rank comes from the file name (rank-3.python.json) unless the
// caller sets it. Errors name the file and what is wrong in one line.
StatusOr<RankSummary> SummarizePythonWindow(const std::string& path);
StatusOr<RankSummary> SummarizePythonWindowBuffer(std::string_view json, const std::string& name);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_PYTHON_WINDOW_H_
