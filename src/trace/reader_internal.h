// Internals of the trace reader exposed for tests and fuzzing: the reader over any ByteSource,
// with its buffer sizes adjustable so tests can make every event straddle a chunk boundary.
#ifndef PERFTRACKER_TRACE_READER_INTERNAL_H_
#define PERFTRACKER_TRACE_READER_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/file_source.h"
#include "base/status.h"
#include "trace/event.h"
#include "trace/reader.h"

namespace perftracker::trace::internal {

struct ReaderTuning {
  size_t read_bytes = 1 << 20;         // bytes pulled from the source per read
  size_t segment_bytes = 512 << 10;    // events parsed per simdjson document (pass 2)
  size_t max_value_bytes = 256 << 20;  // largest single event / top-level value accepted
  bool map = true;                     // read mappable sources (plain files) through Map
  int classifier = -1;  // pass 1's block classifier: 0 portable, 1 AVX2, 2 AVX-512; -1 the best
  size_t release_bytes = 4 << 20;  // mapped input: bytes passed between Release calls
};

// The one line either pass gives for broken JSON, naming the trace and the byte:
//   MalformedJson("t.json", 12, "unexpected ']'") -> "t.json: malformed JSON at byte 12:
//   unexpected ']'"
Status MalformedJson(std::string_view name, uint64_t at, std::string_view what);

// Whether this CPU runs block classifier `level` (ReaderTuning::classifier).
bool ClassifierSupported(int level);

// Opens the data afresh; called once per pass.
using SourceOpener = std::function<StatusOr<std::unique_ptr<ByteSource>>()>;

StatusOr<ReadStats> ReadTraceFrom(const SourceOpener& open, const std::string& name,
                                  EventSink* sink, const ReadOptions& options,
                                  const ReaderTuning& tuning);

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_READER_INTERNAL_H_
