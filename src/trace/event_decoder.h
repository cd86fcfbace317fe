// Pass 2 of the trace reader: decodes the events of a trace into an EventSink. The cuts pass 1
// (trace_scanner.h) recorded split the event array into segments of whole events; each segment
// is framed as "[ ... ]" in place in the padded input (the mapped file, or a read buffer) and
// parsed as one simdjson on-demand document, so simdjson's SIMD stage 1 runs over megabytes at
// a time and events are decoded without any per-event allocation. Events of the wrong shape are
// counted in ReadStats (the first one's offset and reason kept), flows and metadata events
// counted and skipped; only broken JSON is an error. Owns the mapping from Kineto categories
// (and legacy event names) to EventKind.
//
// Internal to the trace module: reader.cc runs it after pass 1.
#ifndef PERFTRACKER_TRACE_EVENT_DECODER_H_
#define PERFTRACKER_TRACE_EVENT_DECODER_H_

#include <cstddef>
#include <string>

#include "base/file_source.h"
#include "base/status.h"
#include "trace/event.h"
#include "trace/reader_internal.h"
#include "trace/trace_scanner.h"

namespace perftracker::trace::internal {

// Decodes the events between scan.cuts.front() and scan.events_end (the first cut at least one
// byte into the input, where the framing '[' goes) to `sink`, counting into `stats`. `map`
// (with `map_size` bytes and kPad more after them, all writable) is the whole input when the
// source is mapped; null to stream `src` through Read from its start. Errors name `name` and
// the byte offset, in one line.
Status DecodeEvents(const std::string& name, const ReaderTuning& tuning, const ScanResult& scan,
                    ByteSource* src, char* map, size_t map_size, EventSink* sink, ReadStats* stats);

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_EVENT_DECODER_H_
