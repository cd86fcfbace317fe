// The protobuf form of a rank summary (bench/summary_format.proto) with everything it needs beyond
// the generated code to do what src/pattern/summary_io.cc does: the same header, zstd, a bounded
// inflate and the reader's checks. bench/summary_format_bench.cc measures it against the custom
// format and counts this file and its .cc as the protobuf format's lines of code.
#ifndef PERFTRACKER_BENCH_SUMMARY_FORMAT_PB_H_
#define PERFTRACKER_BENCH_SUMMARY_FORMAT_PB_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "pattern/pattern.h"
#include "summary_format.pb.h"

namespace perftracker::bench {

// The file's header: the custom format's magic, version 4 (the custom format's is 3), then the
// payload's size as a varint; kPbHeader: the magic and the version.
inline constexpr char kPbMagic[8] = {'P', 'T', 'S', 'U', 'M', 'M', 'R', 'Y'};
inline constexpr uint32_t kPbVersion = 4;
inline constexpr size_t kPbHeader = 12;

// V as a protobuf varint at the end of *OUT.
void PutVarint(uint64_t v, std::string* out);

// S as a protobuf summary file: header, payload size, one zstd frame with its checksum.
std::string EncodePb(const pattern::RankSummary& s);
// A protobuf summary file back, with the custom reader's checks (NAME: for the errors).
StatusOr<pattern::RankSummary> DecodePb(std::string_view bytes, const std::string& name);

}  // namespace perftracker::bench

#endif  // PERFTRACKER_BENCH_SUMMARY_FORMAT_PB_H_
