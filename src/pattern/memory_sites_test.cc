#include "pattern/memory_sites.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pattern/summarizer.h"

namespace perftracker::pattern {
namespace {

constexpr int64_t kMiB = 1 << 20;

trace::MemoryEvent Mem(double ts, int64_t addr, int64_t bytes, int64_t tid = 1,
                       int32_t device_type = 0) {
  trace::MemoryEvent e;
  e.ts_us = ts;
  e.addr = addr;
  e.bytes = bytes;
  e.tid = tid;
  e.device_type = device_type;
  e.device_id = device_type == 0 ? -1 : 0;
  return e;
}

TEST(MemorySiteBuilder, ProgramFrames) {
  EXPECT_TRUE(IsProgramFrame("train.py(42): keep"));
  EXPECT_TRUE(IsProgramFrame("/home/me/job/model.py(7): forward"));
  EXPECT_FALSE(IsProgramFrame("<built-in method ones of type object at 0x7f00>"));
  EXPECT_FALSE(IsProgramFrame("train.py(43): <listcomp>"));
  EXPECT_FALSE(IsProgramFrame("train.py(44): <genexpr>"));
  EXPECT_TRUE(IsProgramFrame("train.py(1): <module>"));  // a script's top-level loop
  EXPECT_TRUE(IsProgramFrame("<string>(5): step"));      // python -c
  EXPECT_FALSE(IsProgramFrame("<gc>"));
  EXPECT_FALSE(IsProgramFrame("aten::ones"));
  EXPECT_FALSE(IsProgramFrame("torch/nn/modules/module.py(1736): _call_impl"));
  EXPECT_FALSE(IsProgramFrame("/venv/lib/python3.11/site-packages/torch/optim/sgd.py(80): step"));
  EXPECT_FALSE(IsProgramFrame(""));
  // The collector's tensor recorder, wherever the package is installed.
  EXPECT_FALSE(IsProgramFrame(
      "/venv/lib/python3.11/site-packages/perftracker/kept_tensors.py(131): __torch_dispatch__"));
  EXPECT_TRUE(IsProgramFrame("/home/me/perftracker/train.py(5): step"));
}

// Five iterations of a leaking step: a temporary freed in its iteration, a gradient freed in
// the next one, and 1 MiB kept for good; a free of memory from before the trace.
TEST(MemorySiteBuilder, KeepsWhatOutlivesItsIterationAndNamesItsPlace) {
  MemorySiteBuilder b;
  b.Add(Mem(1, 999, -64), 0);  // allocated before the trace
  for (int i = 0; i < 5; ++i) {
    const double t = 100.0 * i;
    b.Add(Mem(t + 1, 10, 4096), i);                     // temporary
    b.Add(Mem(t + 2, 10, -4096), i);                    // freed
    if (i > 0) b.Add(Mem(t + 3, 20 + i - 1, -512), i);  // last iteration's gradient
    b.Add(Mem(t + 4, 20 + i, 512), i);                  // this one's
    b.Add(Mem(t + 5, 1000 + i, kMiB), i);               // kept
  }
  b.Pair();
  ASSERT_EQ(b.live().size(), 6u);  // five kept, the last gradient
  std::span<MemorySiteBuilder::Live> t1 = b.OfThread(1);
  ASSERT_EQ(t1.size(), 6u);
  EXPECT_TRUE(b.OfThread(2).empty());
  for (MemorySiteBuilder::Live& l : t1) l.site = l.bytes == kMiB ? 7 : 9;
  std::vector<MemorySite> sites = b.Build({0, 1, 2, 3, 4}, [](uint32_t site) {
    return std::pair{std::string(site == 7 ? "train.py(20): keep" : "grad"),
                     std::string("train.py(10): step")};
  });
  // The last iteration's allocations are not counted: its gradient is not kept memory.
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].device, "cpu");
  EXPECT_EQ(sites[0].function, "train.py(20): keep");
  EXPECT_EQ(sites[0].stack, "train.py(10): step");
  EXPECT_DOUBLE_EQ(sites[0].kept_bytes, 4.0 * kMiB);
  EXPECT_EQ(sites[0].kept_iterations, 4u);
  EXPECT_EQ(sites[0].counted_iterations, 4u);
  EXPECT_EQ(sites[0].allocations, 4u);
  // Warm-up iterations (not steady) are not counted either.
  EXPECT_DOUBLE_EQ(
      b.Build({2, 3, 4}, [](uint32_t) { return std::pair{std::string("f"), std::string()}; })[0]
          .kept_bytes,
      2.0 * kMiB);
}

// A free whose allocation came in an earlier batch still pairs after the records were
// compacted; an address allocated again without a recorded free is not kept twice; devices
// are told apart by their type.
TEST(MemorySiteBuilder, PairsAcrossCompactionsAndDevices) {
  MemorySiteBuilder b;
  b.Add(Mem(0, 1, 100), 0);           // freed much later
  b.Add(Mem(1, 2, 100), 0);           // its free went unrecorded: allocated again below
  b.Add(Mem(2, 1, 300, 1, 1), 0);     // cuda: same address, another device, kept
  for (int i = 0; i < 200000; ++i) {  // past the first compaction
    b.Add(Mem(10 + i, 5000 + i % 7, 64), 1);
    b.Add(Mem(10.5 + i, 5000 + i % 7, -64), 1);
  }
  b.Add(Mem(300000, 1, -100), 1);
  b.Add(Mem(300001, 2, 200), 1);  // kept
  b.Pair();
  EXPECT_FALSE(b.gave_up());
  ASSERT_EQ(b.live().size(), 2u);
  for (MemorySiteBuilder::Live& l : b.live()) l.site = 0;
  std::vector<MemorySite> sites =
      b.Build({0, 1, 2}, [](uint32_t) { return std::pair{std::string("f"), std::string()}; });
  ASSERT_EQ(sites.size(), 2u);
  std::map<std::string, double> kept;
  for (const MemorySite& s : sites) kept[s.device] = s.kept_bytes;
  EXPECT_THAT(kept, testing::ElementsAre(testing::Pair("cpu", 200), testing::Pair("cuda:0", 300)));
}

// A trace that never frees past the bound: the builder gives up rather than name places from
// part of the records.
TEST(MemorySiteBuilder, GivesUpPastItsBound) {
  MemorySiteBuilder b;
  for (size_t i = 0; i <= MemorySiteBuilder::kMaxRecords; ++i)
    b.Add(Mem(static_cast<double>(i), static_cast<int64_t>(i), 8), 0);
  b.Pair();
  EXPECT_TRUE(b.gave_up());
  EXPECT_TRUE(b.live().empty());
  EXPECT_GT(b.dropped(), MemorySiteBuilder::kMaxRecords / 2);
}

trace::Event Ev(trace::EventKind kind, std::string_view name, double ts, double dur,
                int64_t id = -1, int64_t parent = -1) {
  trace::Event e;
  e.kind = kind;
  e.name = name;
  e.ts_us = ts;
  e.dur_us = dur;
  e.pid = 1;
  e.tid = 1;
  e.python_id = id;
  e.python_parent_id = parent;
  return e;
}

// Through the summarizer: a kept allocation's place is the innermost of the program's Python
// frames around it (with its callers as the stack, and the op it called); without Python
// frames, the outermost op.
TEST(MemorySiteBuilder, TheSummarizerPlacesKeptMemory) {
  using trace::EventKind;
  for (bool python : {true, false}) {
    SCOPED_TRACE(python ? "python frames" : "ops only");
    trace::TraceMeta meta;
    for (int i = 0; i < 6; ++i) meta.profiler_steps.push_back({100.0 * i, 100, 1, i});
    Summarizer s;
    s.OnBegin(meta);
    int64_t id = 1;
    for (int i = 0; i < 6; ++i) {
      const double t = 100.0 * i;
      s.OnEvent(Ev(EventKind::kUserAnnotation, "ProfilerStep#" + std::to_string(i), t, 100));
      if (python) {
        const int64_t step = id++;
        s.OnEvent(Ev(EventKind::kPythonFunction, "train.py(10): step", t + 1, 90, step));
        const int64_t keep = id++;
        s.OnEvent(Ev(EventKind::kPythonFunction, "train.py(20): keep", t + 50, 20, keep, step));
        // The C function it called, and torch's Python: not the program's place.
        const int64_t builtin = id++;
        s.OnEvent(Ev(EventKind::kPythonFunction, "<built-in method clone of Tensor object>", t + 54,
                     8, builtin, keep));
        s.OnEvent(Ev(EventKind::kPythonFunction, "torch/_tensor.py(9): __torch_function__",
                     t + 54.5, 7, id++, builtin));
      }
      s.OnEvent(Ev(EventKind::kCpuOp, "aten::mm", t + 5, 10));
      s.OnEvent(Ev(EventKind::kCpuOp, "aten::empty", t + 6, 1));
      s.OnMemory(Mem(t + 6.5, 10, 4096));  // aten::mm's temporary
      s.OnMemory(Mem(t + 12, 10, -4096));
      s.OnEvent(Ev(EventKind::kCpuOp, "aten::clone", t + 55, 5));
      s.OnEvent(Ev(EventKind::kCpuOp, "aten::empty", t + 56, 1));
      s.OnMemory(Mem(t + 56.5, 1000 + i, kMiB));  // kept
    }
    RankSummary r = s.Finish();
    ASSERT_EQ(r.memory_sites.size(), 1u);
    const MemorySite& site = r.memory_sites[0];
    EXPECT_EQ(site.function, python ? "train.py(20): keep" : "aten::clone");
    EXPECT_EQ(site.stack, python ? "train.py(10): step" : "");
    EXPECT_EQ(site.op, python ? "aten::clone" : "");
    EXPECT_EQ(site.kept_iterations, site.counted_iterations);
    EXPECT_DOUBLE_EQ(site.kept_bytes, static_cast<double>(site.counted_iterations) * kMiB);
    EXPECT_GE(site.counted_iterations, 3u);
  }
}

}  // namespace
}  // namespace perftracker::pattern
