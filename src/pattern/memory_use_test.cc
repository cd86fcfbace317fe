#include "pattern/memory_use.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pattern/summarizer.h"

namespace perftracker::pattern {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

trace::MemoryEvent Mem(double ts, int64_t bytes, double total_mib, int32_t type = 0,
                       int32_t id = -1) {
  trace::MemoryEvent e;
  e.ts_us = ts;
  e.device_type = type;
  e.device_id = id;
  e.bytes = bytes;
  e.total_allocated = static_cast<int64_t>(total_mib * kMiB);
  return e;
}

TEST(MemoryUseTest, DeviceNames) {
  EXPECT_EQ(MemoryDeviceName(0, -1), "cpu");
  EXPECT_EQ(MemoryDeviceName(0, 3), "cpu");
  EXPECT_EQ(MemoryDeviceName(1, 2), "cuda:2");
  EXPECT_EQ(MemoryDeviceName(9, 0), "device9:0");
}

TEST(MemoryUseTest, LevelsPeaksAndOutOfOrderRecords) {
  MemoryUseBuilder b(4);
  const auto mib = static_cast<int64_t>(kMiB);
  // Iteration 0: from 10 MiB, ending at 16 MiB (its last record in time); out of time order.
  b.Add(Mem(5, 2 * mib, 16), 0);
  b.Add(Mem(1, 4 * mib, 14), 0);  // before the trace's first record: 10 MiB
  b.Add(Mem(4, -2 * mib, 14), 0);
  // Iteration 1: nothing; iteration 2: ends at 20 MiB; a record outside any iteration.
  b.Add(Mem(25, 6 * mib, 20), 2);
  b.Add(Mem(40, -20 * mib, 0), -1);
  // A failed allocation on the GPU: counted, no level moves.
  trace::MemoryEvent oom = Mem(30, 1024 * mib, 900, 1, 0);
  oom.total_reserved = static_cast<int64_t>(1000 * kMiB);
  oom.out_of_memory = true;
  b.Add(oom, 3);
  std::vector<DeviceMemory> m = b.Build({1, 2, 3});  // iteration 0 is warm-up
  ASSERT_EQ(m.size(), 2u);
  const DeviceMemory& cpu = m[0];
  EXPECT_EQ(cpu.device, "cpu");
  EXPECT_DOUBLE_EQ(cpu.peak_allocated_bytes, 20 * kMiB);
  EXPECT_DOUBLE_EQ(cpu.peak_reserved_bytes, -1);
  EXPECT_DOUBLE_EQ(cpu.start_allocated_bytes, 10 * kMiB);
  EXPECT_DOUBLE_EQ(cpu.end_allocated_bytes, 0);
  EXPECT_EQ(cpu.allocations, 3u);
  EXPECT_DOUBLE_EQ(cpu.allocated_bytes, 12 * kMiB);
  // Iteration 1 keeps iteration 0's end (16 MiB); 3 keeps 2's (20): the record at 40 lies
  // outside every iteration.
  EXPECT_THAT(cpu.iteration_end_bytes, testing::ElementsAre(16 * kMiB, 20 * kMiB, 20 * kMiB));
  EXPECT_THAT(cpu.iteration_peak_bytes, testing::ElementsAre(16 * kMiB, 20 * kMiB, 20 * kMiB));
  const DeviceMemory& gpu = m[1];
  EXPECT_EQ(gpu.device, "cuda:0");
  EXPECT_EQ(gpu.failed_allocations, 1u);
  EXPECT_DOUBLE_EQ(gpu.largest_failed_bytes, 1024 * kMiB);
  EXPECT_DOUBLE_EQ(gpu.peak_allocated_bytes, 900 * kMiB);
  EXPECT_DOUBLE_EQ(gpu.peak_reserved_bytes, 1000 * kMiB);
  EXPECT_EQ(gpu.allocations, 0u);
}

TEST(MemoryUseTest, DevicesAreBounded) {
  MemoryUseBuilder b(1);
  for (int i = 0; i < 40; ++i) b.Add(Mem(i, 1, 1, 1, i), 0);
  EXPECT_EQ(b.Build({0}).size(), MemoryUseBuilder::kMaxDevices);
  EXPECT_EQ(b.dropped(), 40 - MemoryUseBuilder::kMaxDevices);
}

TEST(MemoryUseTest, TheSummarizerCarriesEachDevicesTimeline) {
  trace::TraceMeta meta;
  for (int i = 0; i < 4; ++i) meta.profiler_steps.push_back(trace::Span{i * 100.0, 100, 1, i});
  Summarizer s;
  s.OnBegin(meta);
  for (int i = 0; i < 4; ++i) {
    trace::Event e;
    e.kind = trace::EventKind::kCpuOp;
    e.name = "aten::mm";
    e.ts_us = i * 100.0 + 10;
    e.dur_us = 50;
    e.tid = 1;
    s.OnEvent(e);
    // 8 MiB more at every step's end.
    s.OnMemory(Mem(i * 100.0 + 20, 8 * static_cast<int64_t>(kMiB), 8.0 * (i + 1)));
  }
  RankSummary r = s.Finish();
  ASSERT_EQ(r.memory.size(), 1u);
  ASSERT_EQ(r.memory[0].iteration_end_bytes.size(), r.iteration_ms.size());
  EXPECT_DOUBLE_EQ(r.memory[0].iteration_end_bytes.back(), 32 * kMiB);
  EXPECT_DOUBLE_EQ(r.memory[0].peak_allocated_bytes, 32 * kMiB);
}

}  // namespace
}  // namespace perftracker::pattern
