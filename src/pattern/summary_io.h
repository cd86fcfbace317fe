// The versioned binary summary format (`perftracker summarize -o rank.summary`), read back by
// `diagnose`: the map/reduce path for huge trace sets and what agents upload. Little-endian,
// magic "PTSUMMRY", format version, then length-prefixed fields; readers reject unknown major
// versions with a clear error.
#ifndef PERFTRACKER_PATTERN_SUMMARY_IO_H_
#define PERFTRACKER_PATTERN_SUMMARY_IO_H_

#include <string>

#include "base/status.h"
#include "pattern/pattern.h"

namespace perftracker::pattern {

std::string SerializeSummary(const RankSummary& summary);
StatusOr<RankSummary> ParseSummary(std::string_view bytes, const std::string& name);

Status WriteSummaryFile(const RankSummary& summary, const std::string& path);
StatusOr<RankSummary> ReadSummaryFile(const std::string& path);

// True if the file starts with the summary magic.
bool LooksLikeSummaryFile(const std::string& path);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_SUMMARY_IO_H_
