#include "pattern/summary_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <array>
#include <cstdio>
#include <limits>
#include <random>

#include "base/limits.h"
#include "pattern/summary_codec.h"

namespace perftracker::pattern {
namespace {

RankSummary Sample() {
  RankSummary s;
  s.rank = 5;
  s.world_size = 8;
  s.host = "node-3";
  s.network_switch = "switch-1";
  s.source = "/traces/rank5.json.gz";
  s.legacy_format = false;
  s.has_gpu = true;
  s.process_groups.push_back({"0", "default_pg", "nccl", 8, {0, 1, 2, 3, 4, 5, 6, 7}});
  // Not one run: version 5 writes it as three (pattern/rank_runs.h).
  s.process_groups.push_back({"1", "odd", "nccl", 5, {1, 3, 5, 2, 9}});
  s.devices.push_back({0, "NVIDIA A100", 108, 8, 0});
  s.iteration_source = "ProfilerStep";
  s.iteration_ms = {101.5, 99.25, 100.125};
  s.iteration_steps = {10, 11, 12};
  s.window_ms = 320.5;
  s.events_outside_iterations = 17;
  s.main_tid = 4242;
  s.gpu_busy_us = 1;
  s.gpu_idle_us = 2;
  s.compute_us = 3;
  s.comm_us = 4;
  s.memcpy_us = 5;
  s.comm_compute_overlap_us = 6;
  s.cpu_critical_us = 7;
  FunctionPattern f;
  f.name = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)";
  f.kind = trace::EventKind::kKernel;
  f.fclass = FunctionClass::kCollective;
  f.device = 0;
  f.stream = 21;
  f.count = 15;
  f.total_us = 45000.5;
  f.mean_us = 3000.0333;
  f.p50_us = 2900;
  f.p99_us = 6000;
  f.max_us = 6100;
  f.min_us = 1600;
  f.cv = 0.4;
  f.calls_per_iter = 5;
  f.per_iter_us = 15000;
  f.share = 0.15;
  f.self_per_iter_us = 15000;
  f.iter_us = {14000.5f, 15000.25f, 16000};
  f.coll = {"all_reduce", 2.5e7, "Float", 8, "[0, 1, 2, 3, 4, 5, 6, 7]", 8.3, 14.5};
  s.functions.push_back(f);
  FunctionPattern g;
  g.name = "c.py(3): g";
  g.kind = trace::EventKind::kPythonFunction;
  g.fclass = FunctionClass::kPython;
  g.stack = "a.py(1): main;b.py(2): f";
  g.main_thread = true;
  g.top_level = false;
  g.count = 3;
  g.iter_us = {1, 2, 3};
  s.functions.push_back(g);
  FunctionPattern h = g;
  h.stack = "a.py(1): main";
  h.top_level = true;
  h.in_python = true;
  h.input_dims = "[64, 256], [256, 256]";
  h.input_elements = 81920;
  s.functions.push_back(h);
  s.read_stats.bytes = 123456789;
  s.read_stats.events = 40000;
  s.read_stats.flow_events = 12;
  s.read_stats.metadata_events = 3;
  s.read_stats.unknown_kind = 2;
  s.read_stats.malformed_events = 1;
  s.read_stats.unknown_cats = {{"weird", 2}};
  s.excluded_iterations = {{ExcludedIteration::kWarmup, 101, 0, 35.1},
                           {ExcludedIteration::kPartial, 106, 6, 0.049}};
  s.pre_profiler_gpu_ops = 614;
  s.pre_profiler_gpu_us = 56517.25;
  s.backend = "nccl";
  s.nccl_version = "2.17.1";
  DeviceMemory m;
  m.device = "cuda:0";
  m.peak_allocated_bytes = 3.5e9;
  m.peak_reserved_bytes = 4e9;
  m.start_allocated_bytes = 1e9;
  m.end_allocated_bytes = 1.5e9;
  m.allocations = 1234;
  m.allocated_bytes = 9e10;
  m.failed_allocations = 1;
  m.largest_failed_bytes = 2e9;
  m.iteration_end_bytes = {1.1e9, 1.2e9, 1.3e9};
  m.iteration_peak_bytes = {3.1e9, 3.2e9, 3.5e9};
  s.memory.push_back(m);
  m = {};
  m.device = "cpu";
  s.memory.push_back(m);
  return s;
}

void ExpectEqual(const RankSummary& a, const RankSummary& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.network_switch, b.network_switch);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.legacy_format, b.legacy_format);
  EXPECT_EQ(a.has_gpu, b.has_gpu);
  ASSERT_EQ(a.process_groups.size(), b.process_groups.size());
  for (size_t i = 0; i < a.process_groups.size(); ++i) {
    EXPECT_EQ(a.process_groups[i].name, b.process_groups[i].name);
    EXPECT_EQ(a.process_groups[i].desc, b.process_groups[i].desc);
    EXPECT_EQ(a.process_groups[i].backend, b.process_groups[i].backend);
    EXPECT_EQ(a.process_groups[i].size, b.process_groups[i].size);
    EXPECT_EQ(a.process_groups[i].ranks, b.process_groups[i].ranks);
  }
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (size_t i = 0; i < a.devices.size(); ++i) {
    EXPECT_EQ(a.devices[i].id, b.devices[i].id);
    EXPECT_EQ(a.devices[i].name, b.devices[i].name);
    EXPECT_EQ(a.devices[i].num_sms, b.devices[i].num_sms);
    EXPECT_EQ(a.devices[i].compute_major, b.devices[i].compute_major);
    EXPECT_EQ(a.devices[i].compute_minor, b.devices[i].compute_minor);
  }
  EXPECT_EQ(a.iteration_source, b.iteration_source);
  EXPECT_EQ(a.whole_window, b.whole_window);
  EXPECT_EQ(a.iteration_ms, b.iteration_ms);
  EXPECT_EQ(a.iteration_steps, b.iteration_steps);
  EXPECT_EQ(a.window_ms, b.window_ms);
  EXPECT_EQ(a.events_outside_iterations, b.events_outside_iterations);
  EXPECT_EQ(a.main_tid, b.main_tid);
  EXPECT_EQ(a.gpu_busy_us, b.gpu_busy_us);
  EXPECT_EQ(a.gpu_idle_us, b.gpu_idle_us);
  EXPECT_EQ(a.compute_us, b.compute_us);
  EXPECT_EQ(a.comm_us, b.comm_us);
  EXPECT_EQ(a.memcpy_us, b.memcpy_us);
  EXPECT_EQ(a.comm_compute_overlap_us, b.comm_compute_overlap_us);
  EXPECT_EQ(a.cpu_critical_us, b.cpu_critical_us);
  ASSERT_EQ(a.functions.size(), b.functions.size());
  for (size_t i = 0; i < a.functions.size(); ++i) {
    const FunctionPattern& x = a.functions[i];
    const FunctionPattern& y = b.functions[i];
    EXPECT_EQ(x.Key(), y.Key());
    EXPECT_EQ(x.fclass, y.fclass);
    EXPECT_EQ(x.device, y.device);
    EXPECT_EQ(x.stream, y.stream);
    EXPECT_EQ(x.main_thread, y.main_thread);
    EXPECT_EQ(x.top_level, y.top_level);
    EXPECT_EQ(x.in_python, y.in_python);
    EXPECT_EQ(x.input_dims, y.input_dims);
    EXPECT_EQ(x.input_elements, y.input_elements);
    EXPECT_EQ(x.count, y.count);
    EXPECT_EQ(x.total_us, y.total_us);
    EXPECT_EQ(x.mean_us, y.mean_us);
    EXPECT_EQ(x.p50_us, y.p50_us);
    EXPECT_EQ(x.p99_us, y.p99_us);
    EXPECT_EQ(x.max_us, y.max_us);
    EXPECT_EQ(x.min_us, y.min_us);
    EXPECT_EQ(x.cv, y.cv);
    EXPECT_EQ(x.calls_per_iter, y.calls_per_iter);
    EXPECT_EQ(x.per_iter_us, y.per_iter_us);
    EXPECT_EQ(x.share, y.share);
    EXPECT_EQ(x.self_per_iter_us, y.self_per_iter_us);
    EXPECT_EQ(x.iter_us, y.iter_us);
    EXPECT_EQ(x.coll.op, y.coll.op);
    EXPECT_EQ(x.coll.msg_bytes, y.coll.msg_bytes);
    EXPECT_EQ(x.coll.dtype, y.coll.dtype);
    EXPECT_EQ(x.coll.group_size, y.coll.group_size);
    EXPECT_EQ(x.coll.group, y.coll.group);
    EXPECT_EQ(x.coll.algbw_gbps, y.coll.algbw_gbps);
    EXPECT_EQ(x.coll.busbw_gbps, y.coll.busbw_gbps);
  }
  EXPECT_EQ(a.read_stats.bytes, b.read_stats.bytes);
  EXPECT_EQ(a.read_stats.events, b.read_stats.events);
  EXPECT_EQ(a.read_stats.flow_events, b.read_stats.flow_events);
  EXPECT_EQ(a.read_stats.metadata_events, b.read_stats.metadata_events);
  EXPECT_EQ(a.read_stats.unknown_kind, b.read_stats.unknown_kind);
  EXPECT_EQ(a.read_stats.malformed_events, b.read_stats.malformed_events);
  EXPECT_EQ(a.read_stats.unknown_cats, b.read_stats.unknown_cats);
  ASSERT_EQ(a.excluded_iterations.size(), b.excluded_iterations.size());
  for (size_t i = 0; i < a.excluded_iterations.size(); ++i) {
    EXPECT_EQ(a.excluded_iterations[i].reason, b.excluded_iterations[i].reason);
    EXPECT_EQ(a.excluded_iterations[i].step, b.excluded_iterations[i].step);
    EXPECT_EQ(a.excluded_iterations[i].index, b.excluded_iterations[i].index);
    EXPECT_EQ(a.excluded_iterations[i].ms, b.excluded_iterations[i].ms);
  }
  EXPECT_EQ(a.pre_profiler_gpu_ops, b.pre_profiler_gpu_ops);
  EXPECT_EQ(a.pre_profiler_gpu_us, b.pre_profiler_gpu_us);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.nccl_version, b.nccl_version);
  ASSERT_EQ(a.memory.size(), b.memory.size());
  for (size_t i = 0; i < a.memory.size(); ++i) {
    const DeviceMemory& x = a.memory[i];
    const DeviceMemory& y = b.memory[i];
    EXPECT_EQ(x.device, y.device);
    EXPECT_EQ(x.peak_allocated_bytes, y.peak_allocated_bytes);
    EXPECT_EQ(x.peak_reserved_bytes, y.peak_reserved_bytes);
    EXPECT_EQ(x.start_allocated_bytes, y.start_allocated_bytes);
    EXPECT_EQ(x.end_allocated_bytes, y.end_allocated_bytes);
    EXPECT_EQ(x.allocations, y.allocations);
    EXPECT_EQ(x.allocated_bytes, y.allocated_bytes);
    EXPECT_EQ(x.failed_allocations, y.failed_allocations);
    EXPECT_EQ(x.largest_failed_bytes, y.largest_failed_bytes);
    EXPECT_EQ(x.iteration_end_bytes, y.iteration_end_bytes);
    EXPECT_EQ(x.iteration_peak_bytes, y.iteration_peak_bytes);
  }
}

TEST(SummaryIoTest, RoundTrip) {
  const RankSummary s = Sample();
  const std::string bytes = SerializeSummary(s);
  EXPECT_EQ(bytes.substr(0, 8), "PTSUMMRY");
  StatusOr<RankSummary> back = ParseSummary(bytes, "x.summary");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ExpectEqual(s, *back);
  EXPECT_EQ(SerializeSummary(*back), bytes);
}

// Summaries of earlier releases stay readable: version 4 lists a process group's ranks where 5
// writes runs, version 3 is version 4 without input shapes, version 2 deflated the same payload
// with zlib, version 1 stored it as is.
TEST(SummaryIoTest, ReadsVersionsOneAndTwo) {
  const RankSummary s = Sample();
  const std::string v3 = SerializeSummary(s, 4);
  ASSERT_EQ(v3[8], 4);
  StatusOr<RankSummary> four = ParseSummary(v3, "v4.summary");
  ASSERT_TRUE(four.ok()) << four.status().message();
  ExpectEqual(s, *four);
  EXPECT_NE(v3, SerializeSummary(s));
  size_t pos = 12;
  uint64_t size = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<uint8_t>(v3[pos++]);
    size |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  std::string payload(size, '\0');
  ASSERT_EQ(ZSTD_decompress(payload.data(), size, v3.data() + pos, v3.size() - pos), size);

  std::string v1 = v3.substr(0, 12) + payload;
  v1[8] = 1;
  StatusOr<RankSummary> one = ParseSummary(v1, "v1.summary");
  ASSERT_TRUE(one.ok()) << one.status().message();
  ExpectEqual(s, *one);

  uLongf n = compressBound(size);
  std::string z(n, '\0');
  ASSERT_EQ(compress2(reinterpret_cast<Bytef*>(z.data()), &n,
                      reinterpret_cast<const Bytef*>(payload.data()), size, 6),
            Z_OK);
  std::string v2 = v3.substr(0, pos) + z.substr(0, n);
  v2[8] = 2;
  StatusOr<RankSummary> two = ParseSummary(v2, "v2.summary");
  ASSERT_TRUE(two.ok()) << two.status().message();
  ExpectEqual(s, *two);
  StatusOr<RankSummary> cut = ParseSummary(v2.substr(0, v2.size() - 3), "v2.summary");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().message(),
            "v2.summary: truncated summary at byte " + std::to_string(v2.size() - 3));
}

// The payload step alone: a version-1 file is read in place after its 12-byte header, a
// version-3 one from its inflated copy; a file cut inside the header stops there.
TEST(SummaryIoTest, UnwrapSummaryFindsThePayload) {
  const std::string v3 = SerializeSummary(Sample());
  std::string inflated;
  StatusOr<SummaryPayload> p3 = UnwrapSummary(v3, "x.summary", &inflated);
  ASSERT_TRUE(p3.ok()) << p3.status().message();
  EXPECT_EQ(p3->start, 0u);
  EXPECT_EQ(p3->bytes.data(), inflated.data());
  EXPECT_EQ(p3->bytes.size(), inflated.size());
  EXPECT_GT(inflated.size(), 0u);

  std::string v1 = v3.substr(0, 12) + inflated;
  v1[8] = 1;
  std::string unused;
  StatusOr<SummaryPayload> p1 = UnwrapSummary(v1, "v1.summary", &unused);
  ASSERT_TRUE(p1.ok()) << p1.status().message();
  EXPECT_EQ(p1->start, 12u);
  EXPECT_EQ(p1->bytes.data(), v1.data());
  EXPECT_EQ(p1->bytes.substr(p1->start), inflated);
  EXPECT_TRUE(unused.empty());

  StatusOr<SummaryPayload> cut = UnwrapSummary(v3.substr(0, 10), "x.summary", &unused);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().message(), "x.summary: truncated summary at byte 10");
  std::string v0 = v3;
  v0[8] = 0;
  StatusOr<SummaryPayload> zero = UnwrapSummary(v0, "x.summary", &unused);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(), "x.summary: corrupt summary: version 0");
}

TEST(SummaryIoTest, EmptySummaryRoundTrips) {
  StatusOr<RankSummary> back = ParseSummary(SerializeSummary(RankSummary{}), "e.summary");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ExpectEqual(RankSummary{}, *back);
}

TEST(SummaryIoTest, FileRoundTrip) {
  const std::string path = testing::TempDir() + "/pattern_io_test.summary";
  ASSERT_TRUE(WriteSummaryFile(Sample(), path).ok());
  EXPECT_TRUE(LooksLikeSummaryFile(path));
  StatusOr<RankSummary> back = ReadSummaryFile(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ExpectEqual(Sample(), *back);
  std::remove(path.c_str());
  EXPECT_FALSE(LooksLikeSummaryFile(path));
  StatusOr<RankSummary> missing = ReadSummaryFile(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), testing::StartsWith(path + ": "));
}

TEST(SummaryIoTest, NotASummary) {
  for (std::string_view junk : {"", "PTSUM", "{\"traceEvents\": []}", "PTSUMMRX\x01\0\0\0"}) {
    StatusOr<RankSummary> r = ParseSummary(junk, "x.summary");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "x.summary: not a perftracker summary");
  }
}

TEST(SummaryIoTest, NewerVersion) {
  std::string bytes = SerializeSummary(Sample());
  bytes[8] = 7;
  StatusOr<RankSummary> r = ParseSummary(bytes, "x.summary");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "x.summary: summary version 7 is newer than this perftracker (5)");
}

TEST(SummaryIoTest, EveryTruncationFailsCleanly) {
  const std::string bytes = SerializeSummary(Sample());
  for (size_t n = 8; n < bytes.size(); ++n) {
    StatusOr<RankSummary> r = ParseSummary(std::string_view(bytes).substr(0, n), "x.summary");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().message(), "x.summary: truncated summary at byte " + std::to_string(n));
  }
}

TEST(SummaryIoTest, GarbageNeverCrashes) {
  const std::string good = SerializeSummary(Sample());
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = 12 + rng() % (bytes.size() - 12);
      bytes[pos] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) bytes.resize(12 + rng() % (bytes.size() - 12));
    StatusOr<RankSummary> r = ParseSummary(bytes, "g.summary");
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), testing::StartsWith("g.summary: "));
      EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
    }
  }
  // Pure noise after a valid header.
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = good.substr(0, 12);
    const size_t n = rng() % 300;
    for (size_t k = 0; k < n; ++k) bytes.push_back(static_cast<char>(rng()));
    (void)ParseSummary(bytes, "g.summary").ok();
  }
}

// A version-3 summary around PAYLOAD (what a hostile or broken writer could send).
std::string Wrap(const std::string& payload) {
  std::string out = "PTSUMMRY";
  out += std::string("\x03\0\0\0", 4);
  uint64_t n = payload.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>(n | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  std::string z(ZSTD_compressBound(payload.size()), '\0');
  const size_t zn = ZSTD_compress(z.data(), z.size(), payload.data(), payload.size(), 1);
  return out + z.substr(0, zn);
}

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

TEST(SummaryIoTest, ACompressionBombIsRefusedWithoutExpanding) {
  // More than the payload limit of zeros, a few KB compressed (tests/data/bomb has the 256 MiB
  // one of issue 14, for the command line).
  const std::string bomb = Wrap(Varint(17u << 20) + std::string(17u << 20, '\0'));
  ASSERT_LT(bomb.size(), 64u << 10);
  StatusOr<RankSummary> r = ParseSummary(bomb, "bomb.summary");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              testing::StartsWith("bomb.summary: corrupt summary: its body would inflate to"));
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  // Within the size limit, 16 million strings would still take 256 MiB as a table.
  const size_t n = limits::kMaxSummaryPayload - 8;
  r = ParseSummary(Wrap(Varint(n) + std::string(n, '\0')), "bomb.summary");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), testing::HasSubstr("expands past the 64 MiB"));
}

TEST(SummaryIoTest, ADeclaredSizeThatIsNotDeliveredCostsLittle) {
  // The header claims the limit; the frame holds 10 bytes.
  std::string small = Wrap(std::string(10, '\0'));
  std::string header = small.substr(0, 12) + Varint(limits::kMaxSummaryPayload);
  const size_t old_len = Varint(10).size();
  StatusOr<RankSummary> r = ParseSummary(header + small.substr(12 + old_len), "liar.summary");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "liar.summary: corrupt summary: the compressed payload does not inflate");
}

TEST(SummaryIoTest, ABodyThatExpandsPastTheMemoryLimitIsRefused) {
  // One 8 KB name, then as many strings as fit in the payload limit that each repeat it: a
  // small body that would hold gigabytes once every function copies its name.
  const std::string name(8192, 'x');
  std::string payload = Varint(1) + Varint(name.size()) + name;
  payload += std::string(6, '\0');  // rank 0, world size unknown, host, source, two flags
  payload += std::string(2, '\0');  // no process groups, no devices
  payload += std::string(4, '\0');  // iteration source, whole window, no iterations, no steps
  payload += std::string(8 + 1 + 1 + 7 * 8, '\0');  // window, outside, main tid, GPU totals
  const size_t n = 100000;
  payload += Varint(n);
  for (size_t i = 0; i < n; ++i)
    payload += std::string(1, '\0') + std::string(7, '\0') + std::string(11 * 8, '\0') +
               std::string(2, '\0');
  StatusOr<RankSummary> r = ParseSummary(Wrap(payload), "wide.summary");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), testing::HasSubstr("expands past the 64 MiB"));
}

TEST(SummaryIoTest, RanksBeyondAMillionAreCorrupt) {
  RankSummary s = Sample();
  s.world_size = 2000000000;
  StatusOr<RankSummary> r = ParseSummary(SerializeSummary(s), "w.summary");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "w.summary: corrupt summary: rank 5 of world size 2000000000 (a job has at most "
            "1048576 ranks)");
  s.world_size = 8;
  s.rank = -7;
  EXPECT_FALSE(ParseSummary(SerializeSummary(s), "w.summary").ok());
  s.rank = -1;  // unknown
  s.world_size = 0;
  EXPECT_TRUE(ParseSummary(SerializeSummary(s), "w.summary").ok());
}

TEST(SummaryIoTest, NonFiniteNumbersBecomeZero) {
  RankSummary s = Sample();
  s.window_ms = std::numeric_limits<double>::quiet_NaN();
  s.iteration_ms[0] = std::numeric_limits<double>::infinity();
  StatusOr<RankSummary> r = ParseSummary(SerializeSummary(s), "n.summary");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->window_ms, 0);
  EXPECT_EQ(r->iteration_ms[0], 0);
}

// A version-3 summary whose header declares DECLARED bytes around a frame of PAYLOAD.
std::string WrapDeclaring(const std::string& payload, uint64_t declared) {
  const std::string honest = Wrap(payload);
  return honest.substr(0, 12) + Varint(declared) +
         honest.substr(12 + Varint(payload.size()).size());
}

RankSummary FromViews(const SummaryViews& v) {
  RankSummary s = v.summary;
  for (const FunctionView& f : v.functions) s.functions.push_back(f.ToPattern());
  return s;
}

// A summary as large as a real one: a few hundred functions with long Python stacks.
RankSummary Large(int rank) {
  RankSummary s = Sample();
  s.rank = rank;
  for (int i = 0; i < 400; ++i) {
    FunctionPattern f = s.functions[1];
    f.name = "nn.Module: Layer_" + std::to_string(i);
    f.stack = "train.py(241): <module>;train.py(120): train_step;model.py(" + std::to_string(i) +
              "): forward";
    f.per_iter_us = 1000 - i;
    f.iter_us.assign(20, static_cast<float>(i));
    s.functions.push_back(f);
  }
  return s;
}

// The compact job's decoder: every function as a view, the rest of the summary as ParseSummary
// gives it, whatever the version.
TEST(SummaryIoTest, ViewsHoldWhatParseSummaryDecodes) {
  const RankSummary s = Sample();
  const std::string v3 = SerializeSummary(s);
  StatusOr<SummaryViews> views = ParseSummaryViews(v3, "x.summary");
  ASSERT_TRUE(views.ok()) << views.status().message();
  EXPECT_TRUE(views->summary.functions.empty());
  ASSERT_EQ(views->functions.size(), s.functions.size());
  EXPECT_EQ(views->functions[0].name, s.functions[0].name);
  EXPECT_EQ(views->functions[0].coll_group, s.functions[0].coll.group);
  EXPECT_EQ(views->functions[2].stack, "a.py(1): main");
  ExpectEqual(s, FromViews(*views));

  std::string inflated;
  const std::string v4 = SerializeSummary(s, 4);
  ASSERT_TRUE(UnwrapSummary(v4, "x.summary", &inflated).ok());
  std::string v1 = v4.substr(0, 12) + inflated;
  v1[8] = 1;
  views = ParseSummaryViews(v1, "v1.summary");
  ASSERT_TRUE(views.ok()) << views.status().message();
  ExpectEqual(s, FromViews(*views));
}

// Whatever ParseSummary refuses, the views decoder refuses with the same message.
TEST(SummaryIoTest, ViewsRefuseWhatParseSummaryRefuses) {
  const std::string good = SerializeSummary(Sample());
  auto same = [](std::string_view bytes) {
    StatusOr<RankSummary> full = ParseSummary(bytes, "g.summary");
    StatusOr<SummaryViews> views = ParseSummaryViews(bytes, "g.summary");
    ASSERT_EQ(full.ok(), views.ok());
    if (full.ok()) {
      EXPECT_EQ(SerializeSummary(*full), SerializeSummary(FromViews(*views)));
    } else {
      EXPECT_EQ(full.status().message(), views.status().message());
    }
  };
  for (size_t n = 0; n <= good.size(); ++n) same(std::string_view(good).substr(0, n));
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) {
      bytes[12 + rng() % (bytes.size() - 12)] = static_cast<char>(rng());
    }
    same(bytes);
  }
  same(WrapDeclaring(std::string(10, '\0'), limits::kMaxSummaryPayload));
  same(Wrap(Varint(17u << 20) + std::string(17u << 20, '\0')));
}

// One thread through files of different sizes, good and bad, as a loader thread goes through a
// folder: its buffers are reused, and every file still decodes, or fails, on its own.
TEST(SummaryIoTest, FilesOfDifferentSizesInARowOnOneThread) {
  const std::string dir = testing::TempDir();
  const RankSummary large = Large(3);
  const RankSummary small = Sample();
  const std::string large_path = dir + "/pattern_io_large.summary";
  const std::string small_path = dir + "/pattern_io_small.summary";
  const std::string liar_path = dir + "/pattern_io_liar.summary";
  const std::string long_path = dir + "/pattern_io_long.summary";
  const std::string cut_path = dir + "/pattern_io_cut.summary";
  ASSERT_TRUE(WriteSummaryFile(large, large_path).ok());
  ASSERT_TRUE(WriteSummaryFile(small, small_path).ok());
  auto write = [](const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  std::string payload;
  ASSERT_TRUE(UnwrapSummary(SerializeSummary(small), "s", &payload).ok());
  // Declares 16 MiB, delivers a small frame; declares less than its frame holds; cut short.
  write(liar_path, WrapDeclaring(payload, limits::kMaxSummaryPayload));
  write(long_path, WrapDeclaring(payload, payload.size() - 1));
  const std::string whole = SerializeSummary(large);
  write(cut_path, whole.substr(0, whole.size() / 2));

  const std::string not_inflating = ": corrupt summary: the compressed payload does not inflate";
  for (int round = 0; round < 2; ++round) {
    for (const std::string* path : {&large_path, &small_path, &liar_path, &large_path, &long_path,
                                    &cut_path, &small_path, &large_path}) {
      const RankSummary& want = *path == large_path ? large : small;
      // The views are read before the next read on this thread replaces them.
      StatusOr<SummaryViews> v = ReadSummaryFileViews(*path);
      const StatusOr<RankSummary> from_views =
          v.ok() ? StatusOr<RankSummary>(FromViews(*v)) : StatusOr<RankSummary>(v.status());
      StatusOr<RankSummary> r = ReadSummaryFile(*path);
      if (*path == liar_path || *path == long_path) {
        ASSERT_FALSE(v.ok());
        EXPECT_EQ(v.status().message(), *path + not_inflating);
        EXPECT_EQ(r.status().message(), *path + not_inflating);
      } else if (*path == cut_path) {
        ASSERT_FALSE(v.ok());
        EXPECT_EQ(v.status().message(),
                  *path + ": truncated summary at byte " + std::to_string(whole.size() / 2));
        EXPECT_EQ(r.status().message(), v.status().message());
      } else {
        ASSERT_TRUE(from_views.ok()) << from_views.status().message();
        ASSERT_TRUE(r.ok()) << r.status().message();
        ExpectEqual(want, *from_views);
        ExpectEqual(want, *r);
      }
    }
  }
  StatusOr<SummaryViews> missing = ReadSummaryFileViews(dir + "/pattern_io_none.summary");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), testing::HasSubstr(": cannot open summary: "));
  for (const std::string* p : {&large_path, &small_path, &liar_path, &long_path, &cut_path})
    std::remove(p->c_str());
}

}  // namespace
}  // namespace perftracker::pattern

namespace perftracker::pattern {
namespace {

// A version-5 summary whose one process group's ranks are the runs RUNS ({start, stride,
// length}), cut short after them.
std::string WithRuns(const std::vector<std::array<int64_t, 3>>& runs) {
  summary_codec::Writer w;
  w.S(0);  // rank
  w.S(8);  // world size
  w.Str("host");
  w.Str("source");
  w.B(false);
  w.B(true);
  w.U(1);  // process groups
  w.Str("0");
  w.Str("default_pg");
  w.Str("nccl");
  w.S(8);
  w.U(runs.size());
  for (const auto& [start, stride, length] : runs) {
    w.S(start);
    w.S(stride);
    w.U(static_cast<uint64_t>(length));
  }
  const std::string payload = w.Payload();
  std::string out = SerializeSummary(RankSummary{}).substr(0, 12);
  summary_codec::Writer size;
  size.U(payload.size());
  out += size.Take();
  std::string z(ZSTD_compressBound(payload.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), payload.data(), payload.size(), 3));
  return out + z;
}

TEST(SummaryIoTest, RunsOfRanksAreBoundedBeforeTheyAreHeld) {
  // Well-formed runs decode to the list (the file then ends early: truncated, not corrupt).
  StatusOr<RankSummary> ok = ParseSummary(WithRuns({{0, 2, 4}, {1, 0, 1}}), "ok.summary");
  ASSERT_FALSE(ok.ok());
  EXPECT_NE(ok.status().message().find("truncated"), std::string::npos) << ok.status().message();
  for (const auto& [runs, why] :
       std::vector<std::pair<std::vector<std::array<int64_t, 3>>, const char*>>{
           {{{0, 1, int64_t{1} << 40}}, "a run longer than a job"},
           {{{0, 1, 0}}, "an empty run"},
           {{{INT32_MAX, 1, 2}}, "a run past the largest rank"},
           {{{0, int64_t{1} << 40, 2}}, "a step no two ranks make"},
           {std::vector<std::array<int64_t, 3>>(40, {0, 1, 1 << 20}),
            "runs that together pass the memory a summary may hold"},
       }) {
    StatusOr<RankSummary> bad = ParseSummary(WithRuns(runs), "bad.summary");
    ASSERT_FALSE(bad.ok()) << why;
    EXPECT_NE(bad.status().message().find("corrupt"), std::string::npos)
        << why << ": " << bad.status().message();
  }
}

}  // namespace
}  // namespace perftracker::pattern
