#include "trace/event_decoder.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/file_source.h"
#include "trace/block_classifier.h"
#include "trace/json_fields.h"

namespace perftracker::trace::internal {
namespace {

struct Decoded {
  std::string name;
  EventKind kind;
  double ts_us, dur_us;
  int64_t pid, tid, correlation, external_id;
  int32_t stream;
  std::string collective;
  std::string pg_ranks;
  std::string input_dims;
};

struct Sink : EventSink {
  std::vector<Decoded> events;
  void OnEvent(const Event& e) override {
    events.push_back({std::string(e.name), e.kind, e.ts_us, e.dur_us, e.pid, e.tid, e.correlation,
                      e.external_id, e.stream, std::string(e.collective_name),
                      std::string(e.pg_ranks), std::string(e.input_dims)});
  }
};

// Pass 2 over `array` (a JSON array of events, at byte 1 of the input after one space) cut at
// `cuts`: streamed through reads of `read` bytes, or mapped when `read` is 0.
StatusOr<ReadStats> Decode(const std::string& array, const std::vector<uint64_t>& cuts, size_t read,
                           Sink* sink) {
  const std::string input = " " + array;
  ReaderTuning tuning;
  if (read > 0) tuning.read_bytes = read;
  ScanResult scan;
  scan.cuts = cuts;
  scan.events_end = input.rfind(']');
  std::unique_ptr<ByteSource> src = OpenMemorySource(input, /*mappable=*/read == 0);
  size_t map_size = 0;
  char* map = read == 0 ? src->Map(kPad, &map_size) : nullptr;
  ReadStats stats;
  Status st = DecodeEvents("t.json", tuning, scan, src.get(), map, map_size, sink, &stats);
  if (!st.ok()) return st;
  return stats;
}

// The input offsets (one space before `array`) of every event's opening brace.
std::vector<uint64_t> EventStarts(const std::string& array) {
  std::vector<uint64_t> out;
  for (size_t at = array.find("{\"ph\""); at != std::string::npos;
       at = array.find("{\"ph\"", at + 1)) {
    out.push_back(at + 1);
  }
  return out;
}

const std::string kEvents = R"([
  {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": "stream 7",
   "ts": 10.5, "dur": 2, "args": {"correlation": 5, "stream": 7, "External id": 9.9,
   "Collective name": "allreduce", "Process Group Ranks": [0, 1]}},
  {"ph": "s", "cat": "ac2g", "name": "flow", "id": 1, "pid": 1, "tid": 1, "ts": 11},
  {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
  {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 9,
   "dur": 1},
  {"ph": "X", "cat": "novel_cat", "name": "x", "pid": 1, "tid": 2, "ts": 12, "dur": 1},
  {"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 2, "ts": 8, "dur": 30},
  {"ph": "X", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 13, "dur": 3,
   "args": {"Input Dims": [[8, 96], [96, 128]], "Input type": ["float", "float"]}}
])";

TEST(EventDecoderTest, DecodesKindsAndCountsTheRest) {
  const std::vector<uint64_t> starts = EventStarts(kEvents);
  // One segment for all, or one per event; streamed in small reads, large ones, or mapped.
  for (const std::vector<uint64_t>& cuts : {std::vector<uint64_t>{starts[0]}, starts}) {
    for (size_t read : {0, 1, 7, 1 << 20}) {
      Sink sink;
      auto st = Decode(kEvents, cuts, read, &sink);
      ASSERT_TRUE(st.ok()) << read << ": " << st.status().message();
      EXPECT_EQ(st->events, 5u);
      EXPECT_EQ(st->flow_events, 1u);
      EXPECT_EQ(st->metadata_events, 1u);
      EXPECT_EQ(st->unknown_kind, 1u);
      EXPECT_EQ(st->malformed_events, 0u);
      EXPECT_EQ(st->unknown_cats, (std::map<std::string, uint64_t>{{"novel_cat", 1}}));
      ASSERT_EQ(sink.events.size(), 5u) << cuts.size() << "/" << read;
      const Decoded& k = sink.events[0];
      EXPECT_EQ(k.name, "ncclKernel_AllReduce");
      EXPECT_EQ(k.kind, EventKind::kKernel);
      EXPECT_EQ(k.ts_us, 10.5);
      EXPECT_EQ(k.dur_us, 2);
      EXPECT_EQ(k.tid, HashId("stream 7"));
      EXPECT_EQ(k.correlation, 5);
      EXPECT_EQ(k.external_id, 9);  // a double, truncated
      EXPECT_EQ(k.stream, 7);
      EXPECT_EQ(k.collective, "allreduce");
      EXPECT_EQ(k.pg_ranks, "[0, 1]");                          // an array's raw text
      EXPECT_EQ(sink.events[1].kind, EventKind::kCudaRuntime);  // an older capitalised cat
      EXPECT_EQ(sink.events[2].kind, EventKind::kOther);
      EXPECT_EQ(sink.events[3].kind, EventKind::kUserAnnotation);  // no cat: by its name
      EXPECT_EQ(sink.events[4].kind, EventKind::kCpuOp);
      EXPECT_EQ(sink.events[4].correlation, -1);
      EXPECT_EQ(sink.events[4].input_dims, "[[8, 96], [96, 128]]");  // record_shapes, raw
      EXPECT_EQ(k.input_dims, "");
    }
  }
}

TEST(EventDecoderTest, MalformedEventsAreCountedWithTheFirstReason) {
  const std::string array = R"([
    {"ph": "X", "name": "a", "ts": 1, "dur": 1},
    {"ph": "X", "name": "no ts", "dur": 1},
    {"ph": "X", "name": "b", "ts": "soon", "dur": 1},
    ["not", "an", "object"],
    {"ph": "XX", "name": "c", "ts": 1}
  ])";
  Sink sink;
  auto st = Decode(array, {EventStarts(array)[0]}, 0, &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->events, 1u);
  EXPECT_EQ(st->malformed_events, 4u);
  EXPECT_EQ(st->first_bad, "a \"ts\" number");
  // Located just past the first bad event, inside the input.
  const uint64_t bad = 1 + array.find(R"({"ph": "X", "name": "no ts")");
  EXPECT_GT(st->first_bad_byte, bad);
  EXPECT_LT(st->first_bad_byte, 1 + array.find(R"({"ph": "X", "name": "b")"));
}

TEST(EventDecoderTest, WrongTypeNamesTheField) {
  const std::string array = R"([{"ph": "X", "name": "b", "ts": "soon", "dur": 1}])";
  Sink sink;
  auto st = Decode(array, {1 + 1}, 0, &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->malformed_events, 1u);
  EXPECT_EQ(st->first_bad, "a number for \"ts\"");
}

TEST(EventDecoderTest, BrokenJsonIsAnError) {
  const std::string array = R"([{"ph": "X", "name": "a", "ts": tru, "dur": 1}])";
  for (size_t read : {0, 1 << 20}) {
    Sink sink;
    auto st = Decode(array, {2}, read, &sink);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().message().rfind("t.json: malformed JSON at byte ", 0), 0u)
        << st.status().message();
  }
}

TEST(EventDecoderTest, InvalidUtf8BecomesQuestionMarks) {
  const std::string array = "[{\"ph\": \"X\", \"name\": \"a\xff\xc3zb\", \"ts\": 1, \"dur\": 1}]";
  for (size_t read : {0, 1 << 20}) {
    Sink sink;
    auto st = Decode(array, {2}, read, &sink);
    ASSERT_TRUE(st.ok()) << st.status().message();
    ASSERT_EQ(sink.events.size(), 1u);
    EXPECT_EQ(sink.events[0].name, std::string("a?") + "?zb");  // "a??" would be a trigraph
  }
}

TEST(EventDecoderTest, UnknownCategoriesAreCountedByName) {
  std::string array = "[";
  for (int i = 0; i < 64; ++i) {
    array += R"({"ph": "X", "cat": "c)" + std::to_string(i % 32) + R"(", "name": "n", "ts": 1},)";
  }
  array.back() = ']';
  Sink sink;
  auto st = Decode(array, {2}, 0, &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->unknown_kind, 64u);
  EXPECT_EQ(st->unknown_cats.size(), 32u);
  EXPECT_EQ(st->unknown_cats.at("c0"), 2u);
  EXPECT_EQ(st->unknown_cats.at("c31"), 2u);
}

// 70 distinct unknown categories: the first 64 by name, the other 6 (one event each, the 65th
// category twice) under "(other)". This input used to hang the reader.
TEST(EventDecoderTest, CategoriesPastTheBoundCountAsOther) {
  std::string array = "[";
  for (int i = 0; i < 70; ++i) {
    array += R"({"ph": "X", "cat": "c)" + std::to_string(i) + R"(", "name": "n", "ts": 1},)";
  }
  array += R"({"ph": "X", "cat": "c64", "name": "n", "ts": 1}])";
  Sink sink;
  auto st = Decode(array, {2}, 0, &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->unknown_kind, 71u);
  EXPECT_EQ(st->unknown_cats.size(), 65u);
  EXPECT_EQ(st->unknown_cats.at("c0"), 1u);
  EXPECT_EQ(st->unknown_cats.at("c63"), 1u);
  EXPECT_EQ(st->unknown_cats.count("c64"), 0u);
  EXPECT_EQ(st->unknown_cats.at("(other)"), 7u);
}

}  // namespace
}  // namespace perftracker::trace::internal
