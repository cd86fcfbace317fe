// The versioned binary summary format (`perftracker summarize -o rank.summary`), read back by
// `diagnose`: the map/reduce path for huge trace sets and what agents upload. Little-endian,
// magic "PTSUMMRY", format version, then length-prefixed fields; readers reject unknown major
// versions with a clear error.
#ifndef PERFTRACKER_PATTERN_SUMMARY_IO_H_
#define PERFTRACKER_PATTERN_SUMMARY_IO_H_

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "pattern/pattern.h"

namespace perftracker::pattern {

std::string SerializeSummary(const RankSummary& summary);
// The same in format VERSION: 4 (a process group's ranks listed, what perftracker read before
// version 5) or the current one. For tests of the older readers and files an older one reads.
std::string SerializeSummary(const RankSummary& summary, int version);
StatusOr<RankSummary> ParseSummary(std::string_view bytes, const std::string& name);

// A summary's payload (string table, then body) with the header checked: read from START in
// BYTES, which is the file itself for version 1 (stored as is) and the inflated copy otherwise.
struct SummaryPayload {
  std::string_view bytes;
  size_t start = 0;
  uint32_t version = 0;  // the file's format version
};
// ParseSummary's first step: checks magic and version and inflates the payload into INFLATED,
// which the result then points into. Errors name the file NAME.
StatusOr<SummaryPayload> UnwrapSummary(std::string_view bytes, const std::string& name,
                                       std::string* inflated);

Status WriteSummaryFile(const RankSummary& summary, const std::string& path);
StatusOr<RankSummary> ReadSummaryFile(const std::string& path);

// A summary decoded for a compact job (CompactJob::Add): everything but the functions in
// SUMMARY (whose functions stay empty), and the functions as views into this thread's decoding
// buffers (and, for a version-1 summary, into BYTES). The views are valid until the thread next
// parses or reads a summary. The same checks and errors as ParseSummary / ReadSummaryFile,
// without a string or vector per function.
struct SummaryViews {
  RankSummary summary;
  std::span<const FunctionView> functions;
  // The summary's string table, which FunctionView::name_ref and stack_ref index.
  std::span<const std::string_view> strings;
};
StatusOr<SummaryViews> ParseSummaryViews(std::string_view bytes, const std::string& name);
// Where reading a summary file goes, for --stats: the file's bytes, then their decoding.
struct SummaryReadTimes {
  double read_s = 0;
  double decode_s = 0;
};
StatusOr<SummaryViews> ReadSummaryFileViews(const std::string& path,
                                            SummaryReadTimes* times = nullptr);

// True if the file starts with the summary magic.
// Whether PATH is named as a summary file is ("*.summary").
bool HasSummaryExtension(std::string_view path);
bool LooksLikeSummaryFile(const std::string& path);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_SUMMARY_IO_H_
