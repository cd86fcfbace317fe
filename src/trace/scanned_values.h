// The values pass 1 of the trace reader (trace_scanner.h) parses whole, with simdjson: the
// small top-level metadata values (distributedInfo, deviceProperties, baseTimeNanoseconds, the
// host's name) into the trace's TraceMeta, and each event whose strings hold a '#' that may be
// an iteration marker (ProfilerStep#N, Optimizer.step#N) into the meta's spans. The scanner finds
// where such a value starts and ends; this parses its bytes, which it copies into a padded
// scratch buffer of its own (simdjson reads past a value's end).
//
// Internal to the trace module.
#ifndef PERFTRACKER_TRACE_SCANNED_VALUES_H_
#define PERFTRACKER_TRACE_SCANNED_VALUES_H_

#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "trace/trace_scanner.h"

namespace perftracker::trace::internal {

class ScannedValueParser {
 public:
  // NAME: the trace's name in messages; OUT: where the values go.
  ScannedValueParser(const std::string& name, ScanResult* out) : name_(name), out_(out) {}

  // Whether a top-level KEY's value is metadata this parses ("distributedInfo",
  // "deviceProperties", "baseTimeNanoseconds", "host_name", "hostname"), not skipped.
  static bool IsMetadataKey(std::string_view key);

  // The value of top-level KEY, TEXT, found at byte START of the trace, into out->meta. JSON
  // that simdjson rejects is an error naming the trace, START and KEY ("t.json: malformed JSON
  // at byte 12: in distributedInfo: ..."); a value of the wrong type or range is left unset and
  // counted (ScanResult::bad_metadata). E.g. {"rank": 3, "world_size": 8} under
  // distributedInfo sets meta.rank 3 and world_size 8.
  Status Metadata(std::string_view key, std::string_view text, uint64_t start);

  // An event, TEXT, with a '#' in one of its strings: a complete ("ph": "X") CPU-side
  // ProfilerStep#N or Optimizer.step#N span goes to out->meta's profiler_steps or
  // optimizer_steps; anything else, broken JSON included (pass 2 reports it), is ignored. E.g.
  // {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 10, "dur": 5}
  // adds the span {ts 10, dur 5, step 7}.
  void StepCandidate(std::string_view text);

 private:
  // TEXT copied into the padded scratch buffer simdjson parses.
  std::string_view Scratch(std::string_view text);
  void BadMetadata(uint64_t start, const char* why);
  Status Error(uint64_t start, std::string_view key, simdjson::error_code e) const;
  Status DeviceProperties(simdjson::ondemand::document& doc, uint64_t start);
  Status DistributedInfo(simdjson::ondemand::document& doc, uint64_t start);

  const std::string name_;
  ScanResult* out_;
  std::string scratch_;
  simdjson::ondemand::parser parser_;
};

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_SCANNED_VALUES_H_
