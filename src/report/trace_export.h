// `perftracker export-trace`: one Chrome JSON trace (opens in ui.perfetto.dev and
// chrome://tracing) of a window or a job, merged from every rank's files: a process per rank
// (pid = rank, named "rank R (host)"), each rank's Python-tracer and torch.profiler files on the
// first file's clock, their threads and GPU streams as named tracks, iteration markers, and the
// findings of a diagnosis as instant events on the culprit ranks, and beside each rank's
// iterations the same iterations as the what-if replay predicts them without the finding whose
// fix gives the most. Streams: events go from the reader to the (optionally gzip) output
// through one reused buffer.
#ifndef PERFTRACKER_REPORT_TRACE_EXPORT_H_
#define PERFTRACKER_REPORT_TRACE_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "diagnose/finding.h"

namespace perftracker::report {

struct ExportStats {
  int ranks = 0;
  int files = 0;
  uint64_t events = 0;
  uint64_t bytes_written = 0;      // before compression
  std::vector<std::string> notes;  // e.g. a file without iteration markers to align on
};

struct ExportOptions {
  // Findings to mark on their ranks (null: none).
  const diagnose::Diagnosis* diagnosis = nullptr;
};

// Writes the traces (files) to OUT, gzip-compressed when OUT ends in .gz. Files of one rank
// (its rank from the trace or the file name) are put on one clock: a file's ProfilerStep#N
// aligned with the same step of the rank's first file; a rank whose files share no step is
// left on its own clock, with a note.
StatusOr<ExportStats> ExportTrace(const std::vector<std::string>& files, const std::string& out,
                                  const ExportOptions& options = {});

}  // namespace perftracker::report

#endif  // PERFTRACKER_REPORT_TRACE_EXPORT_H_
