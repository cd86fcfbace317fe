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
namespace {

// Most whitespace looked at after a quote before it is taken to end its string.
constexpr size_t kMaxQuoteLookahead = limits::kMaxQuoteLookahead;

// The bytes of another source with the unescaped quotes inside strings turned into ', as
// RepairUnescapedQuotes (json_fields.h) turns them, looking past the end of a read for what
// follows a quote: the same length, streamed, memory bounded. Pass 1 needs it when a name holds
// an odd number of unescaped quotes (its string tracking would be off for the rest of the
// file); pass 2 repairs its segments itself.
class QuoteRepairSource : public ByteSource {
 public:
  explicit QuoteRepairSource(std::unique_ptr<ByteSource> in) : in_(std::move(in)) {}
  bool compressed() const override { return in_->compressed(); }

  StatusOr<size_t> Read(char* dst, size_t n) override {
    size_t out = 0;
    while (out < n) {
      if (pos_ == buf_.size()) {
        buf_.clear();
        pos_ = 0;
        if (eof_) break;
        PT_RETURN_IF_ERROR(More(n));
        continue;
      }
      char c = buf_[pos_];
      if (!in_string_) {
        in_string_ = c == '"';
      } else if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        size_t j = pos_ + 1;
        for (;;) {
          while (j < buf_.size() && IsWs(buf_[j])) ++j;
          if (j < buf_.size() || eof_ || j - pos_ > kMaxQuoteLookahead) break;
          PT_RETURN_IF_ERROR(More(n));
        }
        const char next = j < buf_.size() ? buf_[j] : ',';
        if (next == ',' || next == ':' || next == '}' || next == ']') {
          in_string_ = false;
        } else {
          c = '\'';
        }
      }
      dst[out++] = c;
      ++pos_;
    }
    return out;
  }

 private:
  static bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  // Appends up to `n` more bytes of the source to buf_ (none at its end).
  Status More(size_t n) {
    const size_t have = buf_.size();
    buf_.resize(have + std::max<size_t>(n, 4096));
    StatusOr<size_t> got = in_->Read(buf_.data() + have, buf_.size() - have);
    if (!got.ok()) {
      buf_.resize(have);
      return got.status();
    }
    buf_.resize(have + *got);
    eof_ = *got == 0;
    return Status::Ok();
  }

  std::unique_ptr<ByteSource> in_;
  std::string buf_;  // read from the source, handed out up to pos_
  size_t pos_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  bool eof_ = false;
};

}  // namespace

StatusOr<ReadStats> ReadTraceFrom(const SourceOpener& open, const std::string& name,
                                  EventSink* sink, const ReadOptions& options,
                                  const ReaderTuning& tuning) {
  bool repair_quotes = false;
  auto opened = [&]() -> StatusOr<std::unique_ptr<ByteSource>> {
    StatusOr<std::unique_ptr<ByteSource>> src = open();
    if (!src.ok()) return Status(src.status().code(), name + ": " + src.status().message());
    if (repair_quotes) return std::unique_ptr<ByteSource>(new QuoteRepairSource(std::move(*src)));
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
    Status scanned = ScanTrace(name, tuning, src.get(), map, map_size, &p1);
    if (!scanned.ok() && scanned.code() == StatusCode::kInvalidArgument) {
      // Broken JSON: read again with unescaped quotes repaired (torch 2.13 writes them), both
      // passes streamed through the repair. Nothing reached the sink yet. If that does not
      // help either, the first error is the answer.
      repair_quotes = true;
      map = nullptr;
      p1 = ScanResult{};
      PT_ASSIGN_OR_RETURN(src, opened());
      if (!ScanTrace(name, tuning, src.get(), nullptr, 0, &p1).ok()) return scanned;
    } else if (!scanned.ok()) {
      return scanned;
    }
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

Status MalformedJson(std::string_view name, uint64_t at, std::string_view what) {
  return InvalidArgument(std::string(name) + ": malformed JSON at byte " + std::to_string(at) +
                         ": " + std::string(what));
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
