#include "trace/trace_scanner.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/file_source.h"
#include "trace/block_classifier.h"

namespace perftracker::trace::internal {
namespace {

// Pass 1 over `json`: streamed through reads of `read` bytes, or mapped when `read` is 0.
StatusOr<ScanResult> Scan(const std::string& json, size_t read, int classifier = -1,
                          size_t segment_bytes = 1) {
  ReaderTuning tuning;
  tuning.segment_bytes = segment_bytes;
  tuning.classifier = classifier;
  if (read > 0) tuning.read_bytes = read;
  std::unique_ptr<ByteSource> src = OpenMemorySource(json, /*mappable=*/read == 0);
  size_t map_size = 0;
  const char* map = read == 0 ? src->Map(kPad, &map_size) : nullptr;
  ScanResult out;
  Status st = ScanTrace("t.json", tuning, src.get(), map, map_size, &out);
  if (!st.ok()) return st;
  return out;
}

// Offsets of every `needle` in `s`.
std::vector<uint64_t> All(const std::string& s, const std::string& needle) {
  std::vector<uint64_t> out;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) {
    out.push_back(at);
  }
  return out;
}

const std::string kKineto = R"({
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "H100", "numSms": 132, "computeMajor": 9,
                        "computeMinor": 0}],
  "distributedInfo": {"backend": "nccl", "rank": 2, "world_size": 4, "nccl_version": "2.21.5",
    "pg_config": [{"pg_name": 0, "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                   "pg_size": 4, "ranks": [0, 1, 2, 3]},
                  {"pg_name": "1", "ranks": "[0, 2]"}]},
  "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 5,
     "ts": 100, "dur": 50},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#7", "pid": 0, "tid": 7,
     "ts": 101, "dur": 49},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 5, "ts": 110, "dur": 5,
     "args": {"note": "[not a bracket] {nor this}"}},
    {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 1,
     "tid": 5, "ts": 130, "dur": 10}
  ],
  "baseTimeNanoseconds": 1700000000000000000,
  "hostname": "node7"
})";

TEST(TraceScannerTest, MetadataSpansAndCuts) {
  for (size_t read : {0, 1, 7, 64, 1 << 20}) {
    auto r = Scan(kKineto, read);
    ASSERT_TRUE(r.ok()) << read << ": " << r.status().message();
    const TraceMeta& m = r->meta;
    EXPECT_FALSE(m.legacy_format);
    EXPECT_TRUE(r->rank_from_trace);
    EXPECT_TRUE(r->have_events);
    EXPECT_EQ(m.rank, 2);
    EXPECT_EQ(m.world_size, 4);
    EXPECT_EQ(m.backend, "nccl");
    EXPECT_EQ(m.nccl_version, "2.21.5");
    EXPECT_EQ(m.host, "node7");
    EXPECT_EQ(m.base_time_ns, 1700000000000000000);
    ASSERT_EQ(m.devices.size(), 1u);
    EXPECT_EQ(m.devices[0].name, "H100");
    EXPECT_EQ(m.devices[0].num_sms, 132);
    EXPECT_EQ(m.devices[0].compute_major, 9);
    ASSERT_EQ(m.process_groups.size(), 2u);
    EXPECT_EQ(m.process_groups[0].name, "0");  // a number's text
    EXPECT_EQ(m.process_groups[0].desc, "default_pg");
    EXPECT_EQ(m.process_groups[0].size, 4);
    EXPECT_EQ(m.process_groups[1].ranks, (std::vector<int>{0, 2}));
    EXPECT_EQ(m.process_groups[1].size, 2);  // from its ranks
    // The GPU copy of the step marker is not a step.
    ASSERT_EQ(m.profiler_steps.size(), 1u);
    EXPECT_EQ(m.profiler_steps[0].step, 7);
    EXPECT_EQ(m.profiler_steps[0].ts_us, 100);
    EXPECT_EQ(m.profiler_steps[0].dur_us, 50);
    EXPECT_EQ(m.profiler_steps[0].tid, 5);
    ASSERT_EQ(m.optimizer_steps.size(), 1u);
    EXPECT_EQ(m.optimizer_steps[0].ts_us, 130);
    // segment_bytes 1: every event opens a segment.
    EXPECT_EQ(r->cuts, All(kKineto, "{\"ph\""));
    EXPECT_EQ(r->events_end, kKineto.find("\n  ],") + 3);  // the ']' itself
    EXPECT_EQ(r->bytes, kKineto.size());
    EXPECT_EQ(r->bad_metadata, 0u);
  }
}

TEST(TraceScannerTest, SegmentBytesSpaceTheCuts) {
  auto r = Scan(kKineto, 0, -1, /*segment_bytes=*/300);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<uint64_t> starts = All(kKineto, "{\"ph\"");
  ASSERT_EQ(starts.size(), 4u);
  // The first event always opens one; the next cut is the first event 300 bytes past it.
  std::vector<uint64_t> want = {starts[0]};
  for (uint64_t s : starts) {
    if (s - want.back() >= 300) want.push_back(s);
  }
  EXPECT_EQ(r->cuts, want);
  EXPECT_LT(r->cuts.size(), starts.size());
}

TEST(TraceScannerTest, LegacyList) {
  const std::string json =
      "\xef\xbb\xbf"
      R"([{"name": "ProfilerStep#3", "ph": "X", "ts": 5, "dur": 2, "tid": "main"},
          {"name": "aten::add", "ph": "X", "ts": 6, "dur": 1}, "stray", 7])";
  for (size_t read : {0, 3, 1 << 20}) {
    auto r = Scan(json, read);
    ASSERT_TRUE(r.ok()) << read << ": " << r.status().message();
    EXPECT_TRUE(r->meta.legacy_format);
    EXPECT_FALSE(r->rank_from_trace);
    EXPECT_EQ(r->cuts, (std::vector<uint64_t>{4, json.find("{\"name\": \"aten"),
                                              json.find("\"stray\""), json.find("7]")}));
    EXPECT_EQ(r->events_end, json.size() - 1);
    // No cat: a step marker by its name alone; a string tid is hashed.
    ASSERT_EQ(r->meta.profiler_steps.size(), 1u);
    EXPECT_EQ(r->meta.profiler_steps[0].step, 3);
    EXPECT_GT(r->meta.profiler_steps[0].tid, 0);
  }
}

TEST(TraceScannerTest, BadMetadataIsCountedAndLeftUnset) {
  const std::string json =
      R"({"distributedInfo": {"rank": -1, "world_size": 0}, "traceEvents": []})";
  auto r = Scan(json, 0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->bad_metadata, 2u);
  EXPECT_EQ(r->first_bad_metadata_byte, json.find("{\"rank\""));
  EXPECT_STREQ(r->first_bad_metadata, "a distributedInfo.rank from 0 to 1048575");
  EXPECT_FALSE(r->rank_from_trace);
  EXPECT_EQ(r->meta.rank, -1);
  EXPECT_EQ(r->meta.world_size, -1);
  EXPECT_TRUE(r->cuts.empty());
}

// Brackets, quotes and '#' inside strings, escaped quotes and backslash runs across blocks:
// every classifier finds the same events and steps.
TEST(TraceScannerTest, StringsHideStructureForEveryClassifier) {
  std::string json = R"({"traceEvents": [)";
  for (int pad = 0; pad < 70; ++pad) {
    json += R"({"ph": "X", "name": ")" + std::string(static_cast<size_t>(pad), 'a') +
            R"(\\\"]}[{#", "ts": 1, "dur": 1}, )";
  }
  json += R"({"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#42", "ts": 9, "dur": 1}]})";
  const std::vector<uint64_t> starts = All(json, "{\"ph\"");
  for (int classifier = 0; classifier <= 2; ++classifier) {
    if (!ClassifierSupported(classifier)) continue;
    for (size_t read : {0, 1, 63, 64, 65, 1 << 20}) {
      auto r = Scan(json, read, classifier);
      ASSERT_TRUE(r.ok()) << classifier << "/" << read << ": " << r.status().message();
      EXPECT_EQ(r->cuts, starts) << classifier << "/" << read;
      ASSERT_EQ(r->meta.profiler_steps.size(), 1u) << classifier << "/" << read;
      EXPECT_EQ(r->meta.profiler_steps[0].step, 42);
    }
  }
}

void ExpectError(const std::string& json, const std::string& want) {
  for (size_t read : {0, 1, 1 << 20}) {
    auto r = Scan(json, read);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().message(), want) << read;
  }
}

TEST(TraceScannerTest, Errors) {
  ExpectError("", "t.json: empty file");
  ExpectError("  \n", "t.json: empty file");
  ExpectError(R"({"a": 1})", "t.json: no traceEvents array");
  ExpectError(R"({"traceEvents": [{}, ]})",
              "t.json: malformed JSON at byte 21: trailing ',' in the event array");
  ExpectError(R"({"traceEvents": [{} {}]})",
              "t.json: malformed JSON at byte 20: missing ',' between events");
  ExpectError(R"({"traceEvents": [{"a": [}]})",
              "t.json: malformed JSON at byte 24: unexpected '}'");
  ExpectError(R"({"traceEvents": [{"a": "x)",
              "t.json: malformed JSON at byte 25: unexpected end of input");
  ExpectError(R"({"traceEvents": 3})", "t.json: traceEvents is a number, expected an array");
  ExpectError("7",
              "t.json: top-level value is a number, expected an object with traceEvents or a "
              "list of events");
  ExpectError(R"({"traceEvents": []} x)",
              "t.json: malformed JSON at byte 20: unexpected data after the top-level value");
  ExpectError("{\"hostname\": \"\xff\", \"traceEvents\": []}",
              "t.json: malformed JSON at byte 13: in hostname: The input is not valid UTF-8");
}

TEST(TraceScannerTest, ValueLargerThanTheLimit) {
  ReaderTuning tuning;
  tuning.read_bytes = 16;
  tuning.max_value_bytes = 64;
  const std::string json =
      R"({"traceEvents": [{"name": ")" + std::string(200, 'x') + R"(", "ph": "X"}]})";
  std::unique_ptr<ByteSource> src = OpenMemorySource(json);
  ScanResult out;
  Status st = ScanTrace("big.json", tuning, src.get(), nullptr, 0, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("big.json: malformed JSON at byte"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("a single value is larger than 0 MiB"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace perftracker::trace::internal
