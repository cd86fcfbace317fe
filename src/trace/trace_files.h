// The trace files of a job: which files in a folder are traces (*.json, *.json.gz, listed
// without recursing) and the rank a file's name gives. The public entry points,
// ExpandTracePaths and RankFromFileName, are declared in reader.h; the steps they are made of
// are here for tests.
//   IsTraceFileName("rank3.pt.trace.json.gz") == true; IsTraceFileName("notes.txt") == false
//   BaseName("/job/traces/rank-3.json") == "rank-3.json", whose RankFromFileName is 3
// Internal to the trace module.
#ifndef PERFTRACKER_TRACE_TRACE_FILES_H_
#define PERFTRACKER_TRACE_TRACE_FILES_H_

#include <string>

#include "trace/reader.h"

namespace perftracker::trace::internal {

// The part of `path` after its last '/' (all of it when there is none).
std::string BaseName(const std::string& path);

// Whether a file name (not a path) ends in .json or .json.gz, with something before it.
bool IsTraceFileName(const std::string& name);

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_TRACE_FILES_H_
