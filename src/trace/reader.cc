// The trace reader: two streaming passes over the (possibly gzip) bytes of a trace, both with
// memory bounded by a chunk buffer, and what the trace's metadata lacks filled in between them.
//  1. trace_scanner.h walks the whole text: the top-level metadata, ProfilerStep#N /
//     Optimizer.step# spans, and the cuts that split the event array into segments.
//  2. event_decoder.h parses those segments with simdjson On-Demand and hands the events to
//     the sink.
// A plain file is mapped once and read in place by both passes; other sources (gzip, memory)
// are opened once per pass and streamed.
// Timestamps stay as doubles in the trace's own (absolute) microseconds: a double holds
// 1.7e15 us to within 0.25 us, well below what any diagnosis here needs, and keeping the
// absolute clock lets ranks be compared without a per-file offset.
#include "trace/reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "base/file_source.h"
#include "base/limits.h"
#include "trace/block_classifier.h"
#include "trace/event_decoder.h"
#include "trace/reader_internal.h"
#include "trace/trace_scanner.h"

namespace perftracker::trace {
namespace internal {

StatusOr<ReadStats> ReadTraceFrom(const SourceOpener& open, const std::string& name,
                                  EventSink* sink, const ReadOptions& options,
                                  const ReaderTuning& tuning) {
  auto opened = [&]() -> StatusOr<std::unique_ptr<ByteSource>> {
    StatusOr<std::unique_ptr<ByteSource>> src = open();
    if (!src.ok()) return Status(src.status().code(), name + ": " + src.status().message());
    return src;
  };
  ScanResult p1;
  // A mappable source (a plain file) is opened once and read in place by both passes.
  std::unique_ptr<ByteSource> mapped;
  char* map = nullptr;
  size_t map_size = 0;
  {
    PT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, opened());
    if (tuning.map) map = src->Map(kPad, &map_size);
    PT_RETURN_IF_ERROR(ScanTrace(name, tuning, src.get(), map, map_size, &p1));
    if (map != nullptr) mapped = std::move(src);
  }
  TraceMeta& meta = p1.meta;
  meta.path = name;
  if (p1.rank_from_trace) {
    meta.rank_source = "distributedInfo";
  } else if (const int r = RankFromFileName(name); r >= 0) {
    meta.rank = r;
    meta.rank_source = "file name";
  } else if (options.rank_override >= 0) {
    meta.rank = options.rank_override;
    meta.rank_source = "override";
  } else {
    meta.rank = -1;
  }
  auto by_ts = [](const Span& a, const Span& b) { return a.ts_us < b.ts_us; };
  std::stable_sort(meta.profiler_steps.begin(), meta.profiler_steps.end(), by_ts);
  std::stable_sort(meta.optimizer_steps.begin(), meta.optimizer_steps.end(), by_ts);

  ReadStats stats;
  stats.bytes = p1.bytes;
  sink->OnBegin(meta);
  if (!p1.cuts.empty()) {
    if (mapped != nullptr) {
      PT_RETURN_IF_ERROR(DecodeEvents(name, tuning, p1, mapped.get(), map, map_size, sink, &stats));
    } else {
      PT_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, opened());
      PT_RETURN_IF_ERROR(DecodeEvents(name, tuning, p1, src.get(), nullptr, 0, sink, &stats));
    }
  }
  static_assert(limits::kMaxWorldSize == 1048576, "the metadata messages name the limit");
  if (p1.bad_metadata > 0) {
    stats.malformed_events += p1.bad_metadata;
    if (stats.first_bad.empty()) {
      stats.first_bad_byte = p1.first_bad_metadata_byte;
      stats.first_bad = p1.first_bad_metadata;
    }
  }
  // Events of the wrong shape are counted and the trace is still read; a trace made only of them
  // is not a trace: it fails here, naming the first bad event.
  if (stats.events == 0 && stats.malformed_events > 0) {
    return InvalidArgument(
        fmt::format("{}: no event could be read: at byte {}, expected {} ({} malformed event{})",
                    name, stats.first_bad_byte, stats.first_bad, stats.malformed_events,
                    stats.malformed_events == 1 ? "" : "s"));
  }
  sink->OnEnd(stats);
  return stats;
}

}  // namespace internal

StatusOr<ReadStats> ReadTrace(const std::string& path, EventSink* sink,
                              const ReadOptions& options) {
  return internal::ReadTraceFrom([&] { return OpenFileSource(path); }, path, sink, options,
                                 internal::ReaderTuning{});
}

StatusOr<ReadStats> ReadTraceBuffer(std::string_view json, const std::string& name, EventSink* sink,
                                    const ReadOptions& options) {
  return internal::ReadTraceFrom(
      [&]() -> StatusOr<std::unique_ptr<ByteSource>> { return OpenMemorySource(json); }, name, sink,
      options, internal::ReaderTuning{});
}

}  // namespace perftracker::trace
