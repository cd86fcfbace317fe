// Pass 1 of the trace reader: a hand-written, quote/escape-aware structural scanner that walks
// the whole (possibly gzip) JSON text of a trace with memory bounded by its chunk buffer. It
// parses the small top-level values (distributedInfo, deviceProperties, baseTimeNanoseconds,
// host_name) wherever they sit, parses only the events whose strings contain '#' to collect
// ProfilerStep#N / Optimizer.step# spans, and records the byte offsets of one event start every
// `segment_bytes` inside the traceEvents array (or the top-level legacy list), where pass 2
// (event_decoder.h) cuts the array into segments of whole events. It checks the structure
// (brackets, strings, separators around events); simdjson validates the rest in pass 2.
// Owns the trace's metadata (ScanResult::meta) and the segment cuts. Its parts: where the bytes
// come from (scan_input.h) and the values it parses whole (scanned_values.h).
//
// Internal to the trace module: reader.cc runs it, then pass 2 over what it found.
#ifndef PERFTRACKER_TRACE_TRACE_SCANNER_H_
#define PERFTRACKER_TRACE_TRACE_SCANNER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/file_source.h"
#include "base/status.h"
#include "trace/event.h"
#include "trace/reader_internal.h"

namespace perftracker::trace::internal {

struct ScanResult {
  TraceMeta meta;  // all but path and the rank's fallbacks (the reader fills those in)
  bool rank_from_trace = false;
  bool have_events = false;
  std::vector<uint64_t> cuts;  // event starts that open each pass-2 segment
  uint64_t events_end = 0;     // offset of the ']' closing the event array
  uint64_t bytes = 0;
  // Metadata values that cannot be right (left unset), counted with the malformed events.
  uint64_t bad_metadata = 0;
  uint64_t first_bad_metadata_byte = 0;
  const char* first_bad_metadata = nullptr;
};

// Scans the bytes of `src` into `out`. `map` (with `map_size` bytes and kPad more after them)
// is the whole input when the source is mapped; null to stream it through Read. Errors name
// `name` and, for broken JSON, the byte offset, in one line. The spans in out->meta are in file
// order (the reader sorts them).
Status ScanTrace(const std::string& name, const ReaderTuning& tuning, ByteSource* src,
                 const char* map, size_t map_size, ScanResult* out);

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_TRACE_SCANNER_H_
