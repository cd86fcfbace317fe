#include "trace/reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "trace/reader_internal.h"

namespace perftracker::trace {
namespace {

const std::string kTraces = PT_SHARED_TRACES "/kineto/";

struct CountingSink : EventSink {
  TraceMeta meta;
  int begins = 0;
  std::map<EventKind, uint64_t> kinds;
  double dur_sum = 0;
  int64_t id_sum = 0;
  std::vector<std::pair<std::string, int64_t>> collectives;  // Collective name, In msg nelems
  std::vector<std::string> pg_ranks;
  void OnBegin(const TraceMeta& m) override {
    meta = m;
    ++begins;
  }
  void OnEvent(const Event& e) override {
    ++kinds[e.kind];
    dur_sum += e.dur_us;
    id_sum += e.external_id + e.correlation + e.tid;
    if (!e.collective_name.empty()) {
      collectives.emplace_back(std::string(e.collective_name), e.in_msg_nelems);
      pg_ranks.emplace_back(e.pg_ranks);
    }
  }
};

std::string Slurp(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  gzclose(f);
  return out;
}

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

TEST(ReaderTest, EverySharedTraceReads) {
  auto files = ExpandTracePaths({kTraces, kTraces + "compare_pair"});
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(files->size(), 9u);
  for (const auto& f : *files) {
    CountingSink sink;
    auto st = ReadTrace(f, &sink);
    ASSERT_TRUE(st.ok()) << st.status().message();
    EXPECT_GT(st->events, 0u) << f;
    EXPECT_EQ(st->malformed_events, 0u) << f;
    EXPECT_EQ(sink.begins, 1);
  }
}

// Expected numbers computed independently with python3's json module.
TEST(ReaderTest, GoldenNccl2Rank) {
  CountingSink sink;
  auto st = ReadTrace(kTraces + "nccl_2rank_rank0.json.gz", &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->events, 26933u);
  EXPECT_EQ(st->flow_events, 13600u);
  EXPECT_EQ(st->metadata_events, 40u);
  EXPECT_EQ(sink.kinds[EventKind::kCpuOp], 14346u);
  EXPECT_EQ(sink.kinds[EventKind::kUserAnnotation], 42u);
  EXPECT_EQ(sink.kinds[EventKind::kCudaRuntime], 8740u);
  EXPECT_EQ(sink.kinds[EventKind::kKernel], 2700u);
  EXPECT_EQ(sink.kinds[EventKind::kMemset], 114u);
  EXPECT_EQ(sink.kinds[EventKind::kMemcpy], 960u);
  EXPECT_EQ(sink.kinds[EventKind::kGpuUserAnnotation], 30u);
  EXPECT_EQ(sink.kinds[EventKind::kOther], 1u);
  const TraceMeta& m = sink.meta;
  EXPECT_EQ(m.rank, 0);
  EXPECT_EQ(m.rank_source, "distributedInfo");
  EXPECT_EQ(m.world_size, 2);
  EXPECT_EQ(m.backend, "nccl");
  EXPECT_EQ(m.nccl_version, "2.17.1");
  ASSERT_EQ(m.process_groups.size(), 1u);
  EXPECT_EQ(m.process_groups[0].size, 2);
  EXPECT_EQ(m.process_groups[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(m.devices.size(), 8u);
  EXPECT_EQ(m.devices[0].num_sms, 108);
  EXPECT_EQ(m.base_time_ns, 1711964646000000000);  // written after traceEvents
  ASSERT_EQ(m.profiler_steps.size(), 3u);
  EXPECT_EQ(m.profiler_steps[0].step, 4);
  EXPECT_EQ(m.profiler_steps[2].step, 6);
  EXPECT_EQ(m.optimizer_steps.size(), 3u);
  ASSERT_FALSE(sink.collectives.empty());
  bool found = false;
  for (size_t i = 0; i < sink.collectives.size(); ++i) {
    if (sink.collectives[i].first == "allreduce" && sink.collectives[i].second == 2049000) {
      found = true;
      EXPECT_EQ(sink.pg_ranks[i], "[0, 1]");
    }
  }
  EXPECT_TRUE(found);
}

TEST(ReaderTest, GoldenResnetAndCpuOnly) {
  CountingSink sink;
  auto st = ReadTrace(kTraces + "resnet_ns_rank-0.pt.trace.json.gz", &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->events, 45420u);
  EXPECT_EQ(st->flow_events, 23234u);
  EXPECT_EQ(sink.kinds[EventKind::kCpuOp], 23910u);
  EXPECT_EQ(sink.kinds[EventKind::kKernel], 4350u);
  ASSERT_EQ(sink.meta.profiler_steps.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sink.meta.profiler_steps[i].step, 101 + i);
  EXPECT_EQ(sink.meta.optimizer_steps.size(), 5u);
  EXPECT_EQ(sink.meta.host, "twshared39868.02.pnb3.facebook.com");

  CountingSink cpu;
  st = ReadTrace(kTraces + "cpu_only_rank-34.pt.trace.json.gz", &cpu);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->events, 16u);
  EXPECT_EQ(cpu.meta.rank, 34);
  EXPECT_EQ(cpu.meta.world_size, 300);
  EXPECT_EQ(cpu.meta.backend, "gloo");
  ASSERT_EQ(cpu.meta.process_groups.size(), 11u);
  EXPECT_EQ(cpu.meta.process_groups[0].size, 300);
  EXPECT_EQ(cpu.meta.process_groups[0].ranks.size(), 300u);
  EXPECT_EQ(cpu.meta.base_time_ns, 1719853884000000000);
  ASSERT_EQ(cpu.meta.profiler_steps.size(), 1u);
  EXPECT_EQ(cpu.meta.profiler_steps[0].step, 551);
}

TEST(ReaderTest, LegacyFormat) {
  const std::string json = R"([
    {"name":"ProfilerStep#7","ph":"X","ts":100,"dur":50,"tid":1,"pid":"CPU functions","args":{}},
    {"name":"aten::zeros","ph":"X","ts":398.5,"dur":56,"tid":1,"pid":"CPU functions","args":{}},
    {"name":"Optimizer.step#SGD.step","ph":"X","ts":120,"dur":5,"tid":1,"pid":"CPU functions"},
    {"name":"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__","ph":"X","ts":101,"dur":1,"tid":1,"pid":"CPU functions"},
    {"name":"gloo:all_reduce","ph":"X","ts":130,"dur":9,"tid":2,"pid":"CPU functions"},
    {"name":"no_ts","ph":"X","dur":9,"tid":2,"pid":"CPU functions"}
  ])";
  CountingSink sink;
  auto st = ReadTraceBuffer(json, "worker_rank_3.json", &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_TRUE(sink.meta.legacy_format);
  EXPECT_EQ(st->events, 5u);
  EXPECT_EQ(st->malformed_events, 1u);
  EXPECT_EQ(sink.kinds[EventKind::kUserAnnotation], 3u);
  EXPECT_EQ(sink.kinds[EventKind::kCpuOp], 2u);
  EXPECT_EQ(sink.meta.rank, 3);
  EXPECT_EQ(sink.meta.rank_source, "file name");
  ASSERT_EQ(sink.meta.profiler_steps.size(), 1u);
  EXPECT_EQ(sink.meta.profiler_steps[0].step, 7);
  EXPECT_EQ(sink.meta.optimizer_steps.size(), 1u);

  CountingSink over;
  ReadOptions opt;
  opt.rank_override = 5;
  st = ReadTraceBuffer(json, "legacy.json", &over, opt);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(over.meta.rank, 5);
}

TEST(ReaderTest, KinetoOddShapes) {
  const std::string json = R"({"traceEvents": [
    {"ph": "X", "cat": "Kernel", "name": "k\"x", "pid": 0, "tid": "stream 7", "ts": 1682725898236567.5,
     "dur": 2, "args": {"correlation": 9, "stream": 7, "device": 0, "Process Group Ranks": [0, 1],
     "Collective name": "allreduce", "In msg nelems": 10}},
    {"ph": "X", "cat": "weird_cat", "name": "w", "pid": 0, "tid": 0, "ts": 1, "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "bad", "pid": 0, "tid": 0, "ts": "x", "dur": 1},
    {"ph": "s", "id": 1, "pid": 0, "tid": 0, "ts": 1, "cat": "ac2g", "name": "ac2g"},
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "x"}},
    5
  ], "distributedInfo": {"rank": 1, "world_size": 4}, "baseTimeNanoseconds": 17})";
  CountingSink sink;
  auto st = ReadTraceBuffer(json, "x.json", &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->events, 2u);
  EXPECT_EQ(st->unknown_kind, 1u);
  EXPECT_EQ(st->unknown_cats.at("weird_cat"), 1u);
  EXPECT_EQ(st->malformed_events, 2u);
  EXPECT_EQ(st->flow_events, 1u);
  EXPECT_EQ(st->metadata_events, 1u);
  EXPECT_EQ(sink.kinds[EventKind::kKernel], 1u);
  EXPECT_EQ(sink.meta.rank, 1);
  EXPECT_EQ(sink.meta.world_size, 4);
  EXPECT_EQ(sink.meta.base_time_ns, 17);
  ASSERT_EQ(sink.pg_ranks.size(), 1u);
  EXPECT_EQ(sink.pg_ranks[0], "[0, 1]");
}

// profile_memory's records: instant events named "[memory]" / "[OutOfMemory]" reach the sink
// with the allocator's totals; other instant events stay metadata.
TEST(ReaderTest, MemoryRecords) {
  const std::string json = R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 10, "dur": 2},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
     "ts": 11.5, "args": {"Total Reserved": 2097152, "Total Allocated": 1052672, "Bytes": 4096,
     "Addr": 139917, "Device Type": 1, "Device Id": 0}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 3,
     "ts": 12, "args": {"Total Reserved": 0, "Total Allocated": 0, "Bytes": -4096, "Addr": 7,
     "Device Type": 0, "Device Id": -1}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[OutOfMemory]", "pid": 1,
     "tid": 1, "ts": 13, "args": {"Total Reserved": 3, "Total Allocated": 2, "Bytes": 1073741824,
     "Device Type": 1, "Device Id": 0}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "Record Window End", "pid": 1,
     "tid": 1, "ts": 14},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": "x"}
  ]})";
  struct MemorySink : CountingSink {
    std::vector<MemoryEvent> memory;
    void OnMemory(const MemoryEvent& e) override { memory.push_back(e); }
  } sink;
  auto st = ReadTraceBuffer(json, "m.json", &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->events, 1u);
  EXPECT_EQ(st->memory_events, 3u);
  EXPECT_EQ(st->metadata_events, 2u);  // the window's end and the record without a time
  ASSERT_EQ(sink.memory.size(), 3u);
  const MemoryEvent& a = sink.memory[0];
  EXPECT_DOUBLE_EQ(a.ts_us, 11.5);
  EXPECT_EQ(a.device_type, 1);
  EXPECT_EQ(a.device_id, 0);
  EXPECT_EQ(a.bytes, 4096);
  EXPECT_EQ(a.total_allocated, 1052672);
  EXPECT_EQ(a.total_reserved, 2097152);
  EXPECT_FALSE(a.out_of_memory);
  EXPECT_EQ(a.addr, 139917);
  EXPECT_EQ(a.tid, 1);
  EXPECT_EQ(sink.memory[1].bytes, -4096);
  EXPECT_EQ(sink.memory[1].addr, 7);
  EXPECT_EQ(sink.memory[1].tid, 3);
  EXPECT_EQ(sink.memory[2].addr, -1);  // none given
  EXPECT_EQ(sink.memory[1].device_type, 0);
  EXPECT_TRUE(sink.memory[2].out_of_memory);
  EXPECT_EQ(sink.memory[2].bytes, 1073741824);
}

TEST(ReaderTest, ChunkBoundaries) {
  for (const char* f :
       {"nccl_2rank_rank0.json.gz", "single_rank_triton.json.gz", "job128_rank-1.json.gz"}) {
    const std::string text = Slurp(kTraces + f);
    CountingSink big, small;
    auto open = [&]() -> StatusOr<std::unique_ptr<ByteSource>> { return OpenMemorySource(text); };
    internal::ReaderTuning tiny;
    tiny.read_bytes = 7;
    tiny.segment_bytes = 300;
    auto a = internal::ReadTraceFrom(open, f, &big, {}, internal::ReaderTuning{});
    auto b = internal::ReadTraceFrom(open, f, &small, {}, tiny);
    ASSERT_TRUE(a.ok() && b.ok()) << f;
    EXPECT_EQ(a->events, b->events);
    EXPECT_EQ(a->flow_events, b->flow_events);
    EXPECT_EQ(a->metadata_events, b->metadata_events);
    EXPECT_EQ(big.kinds, small.kinds);
    EXPECT_EQ(big.dur_sum, small.dur_sum);
    EXPECT_EQ(big.id_sum, small.id_sum);
    EXPECT_EQ(big.meta.profiler_steps.size(), small.meta.profiler_steps.size());
    EXPECT_EQ(big.meta.devices.size(), small.meta.devices.size());
    EXPECT_EQ(big.meta.base_time_ns, small.meta.base_time_ns);
  }
}

// Mapped input (plain files) gives what streaming gives, whatever the chunk, segment and release
// sizes, through a real file mapping and through a mappable memory copy.
TEST(ReaderTest, MappedMatchesStreamed) {
  for (const char* f :
       {"nccl_2rank_rank0.json.gz", "single_rank_triton.json.gz", "job128_rank-1.json.gz"}) {
    const std::string text = Slurp(kTraces + f);
    const std::string plain = TempPath(std::string("mapped_") + f + ".json");
    WriteFile(plain, text);
    CountingSink want;
    auto streamed = internal::ReadTraceFrom(
        [&]() -> StatusOr<std::unique_ptr<ByteSource>> { return OpenMemorySource(text); }, f, &want,
        {}, internal::ReaderTuning{});
    ASSERT_TRUE(streamed.ok()) << f;
    for (int variant = 0; variant < 4; ++variant) {
      internal::ReaderTuning tuning;
      if (variant & 1) {
        tuning.read_bytes = 7;
        tuning.segment_bytes = 300;
        tuning.release_bytes = 1;
      }
      CountingSink got;
      auto open = [&]() -> StatusOr<std::unique_ptr<ByteSource>> {
        if (variant & 2) return OpenMemorySource(text, /*mappable=*/true);
        return OpenFileSource(plain);
      };
      auto st = internal::ReadTraceFrom(open, f, &got, {}, tuning);
      ASSERT_TRUE(st.ok()) << f << " " << variant << ": " << st.status().message();
      EXPECT_EQ(st->bytes, streamed->bytes);
      EXPECT_EQ(st->events, streamed->events);
      EXPECT_EQ(st->flow_events, streamed->flow_events);
      EXPECT_EQ(st->metadata_events, streamed->metadata_events);
      EXPECT_EQ(got.kinds, want.kinds);
      EXPECT_EQ(got.dur_sum, want.dur_sum);
      EXPECT_EQ(got.id_sum, want.id_sum);
      EXPECT_EQ(got.collectives, want.collectives);
      EXPECT_EQ(got.meta.profiler_steps.size(), want.meta.profiler_steps.size());
      EXPECT_EQ(got.meta.devices.size(), want.meta.devices.size());
      EXPECT_EQ(got.meta.base_time_ns, want.meta.base_time_ns);
    }
    std::remove(plain.c_str());
  }
}

// A mapped file cut between the passes (pass 1 has handed its pages back) is an error, not a
// SIGBUS when pass 2 touches bytes the file no longer has.
TEST(ReaderTest, MappedFileTruncatedBetweenPasses) {
  const std::string text = Slurp(kTraces + "nccl_2rank_rank0.json.gz");
  const std::string plain = TempPath("truncated_between_passes.json");
  struct TruncatingSink : CountingSink {
    std::string path;
    void OnBegin(const TraceMeta& m) override {
      CountingSink::OnBegin(m);
      ASSERT_EQ(truncate(path.c_str(), 100), 0);
    }
  };
  for (size_t release : {size_t{1}, size_t{4} << 20}) {
    WriteFile(plain, text);
    TruncatingSink sink;
    sink.path = plain;
    internal::ReaderTuning tuning;
    tuning.release_bytes = release;
    tuning.segment_bytes = 4096;
    auto st =
        internal::ReadTraceFrom([&] { return OpenFileSource(plain); }, "t", &sink, {}, tuning);
    ASSERT_FALSE(st.ok()) << release;
    EXPECT_EQ(st.status().message(), "t: file changed while being read");
  }
  std::remove(plain.c_str());
}

// Pass 1 steps from one event to the next inside a 64-byte block when only `,` and whitespace
// separate them; markers right after such a step are still found, and anything else between
// events is still reported.
TEST(ReaderTest, EventToEventInsideABlock) {
  const std::string good =
      R"({"traceEvents": [{"ph":"X","name":"a","ts":1}, {"ph":"X","cat":"user_annotation",)"
      R"("name":"ProfilerStep#1","ts":1,"dur":5},{"ph":"X","name":"b","ts":2})"
      "\n ,\t{\"ph\":\"X\",\"name\":\"Optimizer.step#x\",\"ts\":3}]}";
  CountingSink sink;
  auto st = ReadTraceBuffer(good, "good.json", &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->events, 4u);
  EXPECT_EQ(sink.meta.profiler_steps.size(), 1u);
  EXPECT_EQ(sink.meta.optimizer_steps.size(), 1u);
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"traceEvents": [{"a":1}, ,{"b":2}]})", "byte 26: unexpected ',' in the event"},
           {R"({"traceEvents": [{"a":1} {"b":2}]})", "byte 25: missing ',' between events"},
           {R"({"traceEvents": [{"a":1},{"b":2},]})", "byte 33: trailing ','"},
           {R"({"traceEvents": [{"a":1}:{"b":2}]})", "byte 24: unexpected ':'"}}) {
    CountingSink bad;
    auto e = ReadTraceBuffer(text, "bad.json", &bad);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_THAT(e.status().message(), ::testing::HasSubstr(want)) << text;
  }
}

// Errors read the same mapped or streamed, including at the very end of a mapping.
TEST(ReaderTest, MappedErrorsMatchStreamed) {
  for (const std::string& text : std::vector<std::string>{
           R"({"traceEvents": [{"ph": "X", "name": tru}]})", R"({"traceEvents": [{"ph": "X"]})",
           R"({"traceEvents": [{"ph": "X")",
           R"({"traceEvents": [{"ph": "X", "name": "a"}, {"ph": "X", "name": "b\)",
           R"({"traceEvents": [{"ph": "X", "name": "a", "ts": 1)", std::string(4096, ' ') + "[",
           "{\"traceEvents\": [1,2,3]}  x"}) {
    for (size_t read : {size_t{1} << 20, size_t{3}}) {
      internal::ReaderTuning streamed_tuning, mapped_tuning;
      streamed_tuning.read_bytes = mapped_tuning.read_bytes = read;
      streamed_tuning.segment_bytes = mapped_tuning.segment_bytes = 10;
      mapped_tuning.release_bytes = 1;
      CountingSink a, b;
      auto sa = internal::ReadTraceFrom(
          [&]() -> StatusOr<std::unique_ptr<ByteSource>> { return OpenMemorySource(text); }, "t",
          &a, {}, streamed_tuning);
      auto sb = internal::ReadTraceFrom(
          [&]() -> StatusOr<std::unique_ptr<ByteSource>> { return OpenMemorySource(text, true); },
          "t", &b, {}, mapped_tuning);
      ASSERT_EQ(sa.ok(), sb.ok()) << text;
      if (!sa.ok()) {
        EXPECT_EQ(sa.status().message(), sb.status().message()) << text;
      }
    }
  }
}

// Backslash runs of every length, escaped quotes and brackets inside strings, placed at every
// offset so they straddle the scanner's 64-byte blocks, read through chunks of many sizes.
TEST(ReaderTest, EscapesStraddlingBlocksAndChunks) {
  struct NameSink : EventSink {
    std::vector<std::string> names;
    std::vector<std::string> stacks;
    TraceMeta meta;
    void OnBegin(const TraceMeta& m) override { meta = m; }
    void OnEvent(const Event& e) override {
      names.emplace_back(e.name);
      stacks.emplace_back(e.call_stack);
    }
  };
  std::string json = R"({"traceEvents": [)";
  std::vector<std::string> want;
  int step = 0;
  for (int pad = 0; pad < 70; ++pad) {
    for (int run = 0; run < 5; ++run) {
      for (int quote = 0; quote < 2; ++quote) {
        std::string raw(static_cast<size_t>(pad), 'a');
        std::string name = raw;
        raw.append(static_cast<size_t>(2 * run), '\\');
        name.append(static_cast<size_t>(run), '\\');
        if (quote) {
          raw += "\\\"";
          name += '"';
        }
        raw += "]}[{#";
        name += "]}[{#";
        json += R"({"ph": "X", "cat": "cpu_op", "name": ")" + raw +
                R"(", "pid": 1, "tid": 2, "ts": 10, "dur": 1, "args": {"Call stack": ")" + raw +
                R"("}}, )";
        want.push_back(name);
        if ((pad + run) % 9 == 0 && quote) {
          json += R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)" +
                  std::to_string(step++) + R"(", "pid": 1, "tid": 2, "ts": 5, "dur": 9}, )";
          want.push_back("ProfilerStep#" + std::to_string(step - 1));
        }
      }
    }
  }
  json += R"({"ph": "X", "cat": "cpu_op", "name": "end", "pid": 1, "tid": 2, "ts": 1, "dur": 1}]})";
  want.push_back("end");
  auto open = [&]() -> StatusOr<std::unique_ptr<ByteSource>> { return OpenMemorySource(json); };
  // Every block classifier this CPU runs (portable, AVX2, AVX-512) must agree.
  for (int classifier = 0; classifier <= 2; ++classifier) {
    if (!internal::ClassifierSupported(classifier)) continue;
    for (size_t read : {1, 2, 3, 5, 7, 13, 63, 64, 65, 127, 1000, 1 << 20}) {
      internal::ReaderTuning tuning;
      tuning.read_bytes = read;
      tuning.segment_bytes = read < 100 ? 300 : 4 << 20;
      tuning.classifier = classifier;
      NameSink sink;
      auto st = internal::ReadTraceFrom(open, "esc.json", &sink, {}, tuning);
      ASSERT_TRUE(st.ok()) << classifier << "/" << read << ": " << st.status().message();
      EXPECT_EQ(st->malformed_events, 0u) << read;
      ASSERT_EQ(sink.names, want) << classifier << "/" << read;
      for (size_t i = 0; i + 1 < want.size(); ++i) {
        if (!sink.stacks[i].empty()) {
          EXPECT_EQ(sink.stacks[i], sink.names[i]) << read;
        }
      }
      ASSERT_EQ(sink.meta.profiler_steps.size(), static_cast<size_t>(step)) << read;
    }
  }
}

// torch 2.13's trace writer does not escape the double quotes of names. A pretty-printed Kineto
// trace (as torch writes it) with such names, an even and an odd number of quotes, placed so
// they straddle chunks and segments: every event reads, each quote as ', whether the file is
// mapped or streamed, and the ProfilerStep spans are all found.
TEST(ReaderTest, UnescapedQuotesInNames) {
  struct NameSink : EventSink {
    std::vector<std::string> names;
    TraceMeta meta;
    void OnBegin(const TraceMeta& m) override { meta = m; }
    void OnEvent(const Event& e) override { names.emplace_back(e.name); }
  };
  // {as written, as read}; the second and fourth have an odd number of quotes.
  const std::vector<std::pair<std::string, std::string>> quoted = {
      {"say \"hi\" / back", "say 'hi' / back"},
      {"record \"x", "record 'x"},
      {"\"quoted\"", "'quoted'"},
      {"a \"\" \" b", "a '' ' b"}};
  for (int odd = 0; odd < 2; ++odd) {
    std::string json = "{\n  \"schemaVersion\": 1,\n  \"traceEvents\": [\n";
    std::vector<std::string> want;
    for (int i = 0; i < 60; ++i) {
      std::string raw = "aten::mm", name = raw;
      const size_t k = static_cast<size_t>(i / 7) % quoted.size();
      if (i % 7 == 3 && (odd || k % 2 == 0)) {
        raw = quoted[k].first;
        name = quoted[k].second;
      }
      if (i % 10 == 0) raw = name = "ProfilerStep#" + std::to_string(i / 10);
      json += "  {\n    \"ph\": \"X\", \"cat\": \"" +
              std::string(i % 10 == 0 ? "user_annotation" : "cpu_op") + "\",\n    \"name\": \"" +
              raw + "\", \"pid\": 1, \"tid\": 1,\n    \"ts\": " + std::to_string(i * 10) +
              ", \"dur\": 5\n  },\n";
      want.push_back(name);
    }
    json += "  {\n    \"ph\": \"i\", \"name\": \"Record Window End\", \"ts\": 600\n  }\n  ]\n}\n";
    const std::string plain = TempPath("unescaped_quotes.json");
    WriteFile(plain, json);
    for (int variant = 0; variant < 4; ++variant) {
      internal::ReaderTuning tuning;
      tuning.segment_bytes = (variant & 1) ? 200 : 4 << 20;
      tuning.read_bytes = (variant & 1) ? 7 : 1 << 20;
      NameSink sink;
      auto open = [&]() -> StatusOr<std::unique_ptr<ByteSource>> {
        if (variant & 2) return OpenFileSource(plain);
        return OpenMemorySource(json);
      };
      auto st = internal::ReadTraceFrom(open, "q.json", &sink, {}, tuning);
      ASSERT_TRUE(st.ok()) << odd << "/" << variant << ": " << st.status().message();
      EXPECT_EQ(st->malformed_events, 0u);
      EXPECT_EQ(st->bytes, json.size());
      EXPECT_EQ(sink.names, want) << odd << "/" << variant;
      EXPECT_EQ(sink.meta.profiler_steps.size(), 6u) << odd << "/" << variant;
    }
    std::remove(plain.c_str());
  }
  // A quote followed by a comma cannot be told from the string's end: still an error.
  CountingSink sink;
  auto st = ReadTraceBuffer(R"({"traceEvents": [{"ph": "X", "name": "a", b", "ts": 1}]})", "c.json",
                            &sink);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.status().message(), ::testing::HasSubstr("c.json: malformed JSON at byte"));
}

// Real traces of torch 2.13's profiler (tests/data/torch213, its README): a 2-rank DDP job on
// CPU (gloo), Kineto with stacks and shapes. The job from distributedInfo, the ProfilerStep#N
// spans, Python events with their ids, gloo's collectives (without record_param_comms: torch
// 2.13 writes none for gloo, so no collective metadata); and a trace whose names hold the double
// quotes torch 2.13 leaves unescaped.
TEST(ReaderTest, Torch213Traces) {
  struct Sink : CountingSink {
    uint64_t python = 0, python_with_ids = 0, gloo = 0, c10d = 0;
    std::vector<std::string> quoted;
    void OnEvent(const Event& e) override {
      CountingSink::OnEvent(e);
      if (e.kind == EventKind::kPythonFunction) {
        ++python;
        if (e.python_id >= 0) ++python_with_ids;
      }
      if (e.name == "gloo:all_reduce" && e.kind == EventKind::kUserAnnotation) ++gloo;
      if (e.name == "c10d::allreduce_" && e.kind == EventKind::kCpuOp) ++c10d;
      if (e.name.find('\'') != std::string_view::npos) quoted.emplace_back(e.name);
    }
  };
  const std::string dir = PT_SOURCE_DIR "/tests/data/torch213/";
  for (int rank = 0; rank < 2; ++rank) {
    Sink sink;
    auto st = ReadTrace(dir + "rank-" + std::to_string(rank) + ".json.gz", &sink);
    ASSERT_TRUE(st.ok()) << st.status().message();
    EXPECT_EQ(st->malformed_events, 0u);
    EXPECT_EQ(st->unknown_kind, 0u);
    const TraceMeta& m = sink.meta;
    EXPECT_EQ(m.rank, rank);
    EXPECT_EQ(m.rank_source, "distributedInfo");
    EXPECT_EQ(m.world_size, 2);
    EXPECT_EQ(m.backend, "gloo");
    ASSERT_EQ(m.process_groups.size(), 1u);
    EXPECT_EQ(m.process_groups[0].desc, "default_pg");
    EXPECT_EQ(m.process_groups[0].size, 2);
    EXPECT_EQ(m.process_groups[0].ranks, (std::vector<int>{0, 1}));
    ASSERT_EQ(m.profiler_steps.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(m.profiler_steps[i].step, static_cast<int64_t>(i + 3));
    EXPECT_EQ(m.optimizer_steps.size(), 4u);
    EXPECT_EQ(sink.python, 3466u);
    EXPECT_EQ(sink.python_with_ids, sink.python);
    EXPECT_EQ(sink.gloo, 4u);
    EXPECT_EQ(sink.c10d, 4u);
    EXPECT_TRUE(sink.collectives.empty());  // no "Collective name": no record_param_comms
  }
  Sink sink;
  auto st = ReadTrace(dir + "quoted_names/rank-0.json.gz", &sink);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->malformed_events, 0u);
  EXPECT_EQ(sink.meta.profiler_steps.size(), 3u);
  EXPECT_EQ(sink.quoted,
            (std::vector<std::string>{"say 'hi' / back", "odd 'quote", "say 'hi' / back",
                                      "odd 'quote", "say 'hi' / back", "odd 'quote"}));
}

void ExpectError(const std::string& path, const std::string& needle) {
  CountingSink sink;
  auto st = ReadTrace(path, &sink);
  ASSERT_FALSE(st.ok()) << path;
  EXPECT_NE(st.status().message().find(path), std::string::npos) << st.status().message();
  EXPECT_NE(st.status().message().find(needle), std::string::npos) << st.status().message();
  EXPECT_EQ(st.status().message().find('\n'), std::string::npos);
}

TEST(ReaderTest, BadInputs) {
  std::string gz;
  {
    std::ifstream in(kTraces + "nccl_2rank_rank0.json.gz", std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string cut = TempPath("cut.json.gz");
  WriteFile(cut, gz.substr(0, gz.size() / 2));
  ExpectError(cut, "truncated gzip stream");

  const std::string malformed = TempPath("malformed.json");
  WriteFile(malformed, R"({"traceEvents": [{"ph": "X", "name": tru}]})");
  ExpectError(malformed, "malformed JSON at byte");

  const std::string unbalanced = TempPath("unbalanced.json");
  WriteFile(unbalanced, R"({"traceEvents": [{"ph": "X"]})");
  ExpectError(unbalanced, "malformed JSON at byte");

  const std::string stray = TempPath("stray_backslash.json");
  WriteFile(stray, R"({"traceEvents": [{"ph": "X", "name": "a", \"x": 1}]})");
  ExpectError(stray, "malformed JSON at byte");

  const std::string str = TempPath("string.json");
  WriteFile(str, R"("hello")");
  ExpectError(str, "top-level value is a string");

  const std::string empty = TempPath("empty.json");
  WriteFile(empty, " \n");
  ExpectError(empty, "empty file");

  const std::string none = TempPath("noevents.json");
  WriteFile(none, R"({"schemaVersion": 1})");
  ExpectError(none, "no traceEvents array");

  const std::string trunc = TempPath("trunc.json");
  WriteFile(trunc, R"({"traceEvents": [{"ph": "X", "name": "a")");
  ExpectError(trunc, "unexpected end of input");

  ExpectError(TempPath("does_not_exist.json"), "cannot open");
}

TEST(ReaderTest, RankFromFileName) {
  EXPECT_EQ(RankFromFileName("/a/rank-3.json"), 3);
  EXPECT_EQ(RankFromFileName("rank3.json"), 3);
  EXPECT_EQ(RankFromFileName("x_rank_12.pt.trace.json.gz"), 12);
  EXPECT_EQ(RankFromFileName("RANK.4.json"), 4);
  EXPECT_EQ(RankFromFileName("nccl_2rank_rank0.json.gz"), 0);
  EXPECT_EQ(RankFromFileName("rank1_then_rank-7.json"), 7);
  EXPECT_EQ(RankFromFileName("/rank9/trace.json"), -1);
  EXPECT_EQ(RankFromFileName("trace.json"), -1);
}

TEST(ReaderTest, ExpandTracePaths) {
  auto bad = ExpandTracePaths({"/nonexistent/path.json"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/nonexistent/path.json"), std::string::npos);
  auto empty = ExpandTracePaths({PT_SOURCE_DIR "/src/trace"});
  EXPECT_FALSE(empty.ok());
  auto ok = ExpandTracePaths({kTraces, kTraces + "alexnet_single.json.gz"});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 7u);  // deduplicated, sorted
  EXPECT_TRUE(std::is_sorted(ok->begin(), ok->end()));
}

TEST(EventTest, KindNames) {
  EXPECT_STREQ(EventKindName(EventKind::kKernel), "kernel");
  EXPECT_TRUE(IsGpuKind(EventKind::kMemcpy));
  EXPECT_FALSE(IsGpuKind(EventKind::kCudaRuntime));
}

}  // namespace
}  // namespace perftracker::trace
