// Kept apart from summarizer.cc so code that only pushes events (tests, the online path) does
// not pull in the trace reader.
#include "pattern/summarizer.h"
#include "trace/reader.h"

namespace perftracker::pattern {

StatusOr<RankSummary> SummarizeTrace(const std::string& path, const trace::ReadOptions& options) {
  Summarizer summarizer;
  StatusOr<trace::ReadStats> stats = trace::ReadTrace(path, &summarizer, options);
  if (!stats.ok()) return stats.status();
  summarizer.OnEnd(*stats);  // idempotent: the reader may already have called it
  return summarizer.Finish();
}

}  // namespace perftracker::pattern
