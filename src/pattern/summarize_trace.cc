// Kept apart from summarizer.cc so code that only pushes events (tests, the online path) does
// not pull in the trace reader.
#include "pattern/python_window.h"
#include "pattern/summarizer.h"
#include "trace/reader.h"

namespace perftracker::pattern {

StatusOr<RankSummary> SummarizeTrace(const std::string& path, const trace::ReadOptions& options,
                                     bool merged) {
  // The Python tracer's window files are aggregates, not event traces: their own reader.
  if (IsPythonWindowFile(path)) {
    auto s = SummarizePythonWindow(path);
    if (s.ok() && options.rank_override >= 0) s->rank = options.rank_override;
    return s;
  }
  Summarizer summarizer;
  if (merged) summarizer.LeaveWarmupIn();
  StatusOr<trace::ReadStats> stats = trace::ReadTrace(path, &summarizer, options);
  if (!stats.ok()) return stats.status();
  summarizer.OnEnd(*stats);  // idempotent: the reader may already have called it
  return summarizer.Finish();
}

}  // namespace perftracker::pattern
