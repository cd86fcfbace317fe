// Trace readers: stream a PyTorch profiler trace (Kineto JSON, .json or .json.gz, or the older
// torch 1.x list-of-events JSON) into an EventSink. Memory stays bounded by the reader's chunk
// buffer: no DOM of the whole file is ever built. Also finds and ranks the files of a job.
#ifndef PERFTRACKER_TRACE_READER_H_
#define PERFTRACKER_TRACE_READER_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "trace/event.h"

namespace perftracker::trace {

struct ReadOptions {
  // Rank to use when the trace names none (e.g. legacy traces); -1 = derive from file name.
  int rank_override = -1;
};

// Reads one trace file. Errors name the file and what is wrong in one line.
StatusOr<ReadStats> ReadTrace(const std::string& path, EventSink* sink,
                              const ReadOptions& options = {});

// The same over an in-memory (uncompressed) buffer; `name` is used in messages. For fuzzing
// and tests.
StatusOr<ReadStats> ReadTraceBuffer(std::string_view json, const std::string& name, EventSink* sink,
                                    const ReadOptions& options = {});

// Rank from a file name: rank-3, rank3, rank_3, _rank_3, rank.3 (case-insensitive); -1 if none.
int RankFromFileName(const std::string& path);

// Expands PATHs (files or folders, non-recursive folders hold trace files: *.json, *.json.gz)
// into a sorted list of trace files.
StatusOr<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& paths);

}  // namespace perftracker::trace

#endif  // PERFTRACKER_TRACE_READER_H_
