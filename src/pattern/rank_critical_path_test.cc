#include "pattern/rank_critical_path.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perftracker::pattern {
namespace {

using trace::EventKind;

// Feeds a sink one trace: its ProfilerSteps, then its events.
class Trace {
 public:
  Trace& Step(int64_t n, double ts, double dur) {
    meta_.profiler_steps.push_back({ts, dur, 1, n});
    return *this;
  }
  Trace& Cpu(const std::string& name, double ts, double dur, int64_t corr = -1, int64_t tid = 1,
             EventKind kind = EventKind::kCpuOp) {
    trace::Event e;
    e.kind = kind;
    e.ts_us = ts;
    e.dur_us = dur;
    e.tid = tid;
    e.correlation = corr;
    Keep(e, name);
    return *this;
  }
  Trace& Runtime(const std::string& name, double ts, double dur, int64_t corr) {
    return Cpu(name, ts, dur, corr, 1, EventKind::kCudaRuntime);
  }
  Trace& Kernel(const std::string& name, double ts, double dur, int64_t corr, int32_t stream = 7) {
    trace::Event e;
    e.kind = EventKind::kKernel;
    e.ts_us = ts;
    e.dur_us = dur;
    e.correlation = corr;
    e.stream = stream;
    e.pid = 0;
    e.tid = stream;
    Keep(e, name);
    return *this;
  }
  Trace& Sync(const std::string& name, double ts, double dur, int64_t corr, int32_t stream = -1,
              int32_t wait_stream = -1, int64_t wait_record = -1) {
    trace::Event e;
    e.kind = EventKind::kCudaSync;
    e.ts_us = ts;
    e.dur_us = dur;
    e.correlation = corr;
    e.stream = stream;
    e.wait_on_stream = wait_stream;
    e.wait_on_record_correlation = wait_record;
    Keep(e, name);
    return *this;
  }

  RankCriticalPath Path(const std::vector<int64_t>& steps = {}) { return Sink().Compute(steps, 3); }
  // The path without the function REMOVED.
  RankCriticalPath Without(const std::string& removed) { return Sink().Compute({}, 3, removed); }

  CriticalPathSink Sink() {
    CriticalPathSink sink;
    sink.OnBegin(meta_);
    for (size_t i = 0; i < events_.size(); ++i) {
      trace::Event e = events_[i];
      e.name = names_[i];
      sink.OnEvent(e);
    }
    return sink;
  }

 private:
  void Keep(const trace::Event& e, const std::string& name) {
    events_.push_back(e);
    names_.push_back(name);
  }

  trace::TraceMeta meta_;
  std::vector<trace::Event> events_;
  std::vector<std::string> names_;
};

double Us(const RankCriticalPath& p, PathBound b) { return p.bound_us[static_cast<size_t>(b)]; }

TEST(RankCriticalPath, ACpuOnlyStepIsItsTopLevelOpsTime) {
  // A [10, 40] holds B [15, 25]; C [50, 60] follows after 10 us idle, which weighs nothing.
  RankCriticalPath p =
      Trace().Step(1, 0, 100).Cpu("A", 10, 30).Cpu("B", 15, 10).Cpu("C", 50, 10).Path();
  ASSERT_EQ(p.iterations, 1);
  EXPECT_DOUBLE_EQ(p.path_us, 40);
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kCpu), 40);
  ASSERT_EQ(p.top.size(), 3u);
  EXPECT_EQ(p.top[0].name, "A");  // its own 20 us, B's 10 are B's
  EXPECT_DOUBLE_EQ(p.top[0].us, 20);
  EXPECT_EQ(p.steps, std::vector<int64_t>{1});
}

TEST(RankCriticalPath, AGpuBoundStepRunsThroughItsLaunchKernelsAndSync) {
  // K1 waits on its launch (20 us), K2 queued behind it follows 0.5 us later, and the CPU waits
  // in cudaDeviceSynchronize (weightless) until K2's end reaches it through the context sync.
  RankCriticalPath p = Trace()
                           .Step(1, 0, 250)
                           .Runtime("cudaLaunchKernel", 0, 5, 1)
                           .Kernel("k1", 20, 90, 1)
                           .Runtime("cudaLaunchKernel", 25, 5, 2)
                           .Kernel("k2", 110.5, 89.5, 2)
                           .Runtime("cudaDeviceSynchronize", 30, 180, 3)
                           .Sync("Context Sync", 30, 180, 3)
                           .Path();
  EXPECT_DOUBLE_EQ(p.path_us, 200);
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kLaunchDelay), 20);
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kGpuCompute), 179.5);
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kKernelGap), 0.5);
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kCpu), 0);
  EXPECT_EQ(p.top[0].name, "k1");
}

// The GPU-bound step above, with a CPU op between the launches that the path does not cross.
Trace GpuBoundStep() {
  Trace t;
  t.Step(1, 0, 250)
      .Runtime("cudaLaunchKernel", 0, 5, 1)
      .Kernel("k1", 20, 90, 1)
      .Cpu("aten::add", 12, 5)
      .Runtime("cudaLaunchKernel", 25, 5, 2)
      .Kernel("k2", 110.5, 89.5, 2)
      .Runtime("cudaDeviceSynchronize", 30, 180, 3)
      .Sync("Context Sync", 30, 180, 3);
  return t;
}

TEST(RankCriticalPath, RemovingAKernelOnThePathTakesItsTimeAndItsWaitOff) {
  Trace t = GpuBoundStep();
  EXPECT_DOUBLE_EQ(t.Path().path_us, 200);
  // k2 gone, and the 0.5 us it waited for k1: the path ends with k1.
  EXPECT_DOUBLE_EQ(t.Without("k2").path_us, 110);
  EXPECT_TRUE(t.Sink().Holds("k2"));
  EXPECT_FALSE(t.Sink().Holds("k3"));
}

TEST(RankCriticalPath, RemovingWorkOffThePathGivesNothing) {
  Trace t = GpuBoundStep();
  EXPECT_DOUBLE_EQ(t.Without("aten::add").path_us, 200);
  EXPECT_DOUBLE_EQ(t.Without("no such function").path_us, 200);
}

TEST(RankCriticalPath, RemovingAnOpRemovesWhatItCallsAndTheKernelsItLaunches) {
  // aten::mm launches k, and the CPU waits for it in cudaDeviceSynchronize: all of the step is
  // aten::mm's (2 us of its own, 18 us of launch, 80 us of kernel), and without it nothing is left.
  Trace t;
  t.Step(1, 0, 150)
      .Cpu("aten::mm", 0, 10)
      .Runtime("cudaLaunchKernel", 2, 1, 1)
      .Kernel("k", 20, 80, 1)
      .Runtime("cudaDeviceSynchronize", 10, 100, 2)
      .Sync("Context Sync", 10, 100, 2);
  const RankCriticalPath before = t.Path();
  EXPECT_DOUBLE_EQ(before.path_us, 100);
  EXPECT_DOUBLE_EQ(t.Without("aten::mm").path_us, 0);
  // Without k the CPU side is the path: aten::mm's own 9 us and its launch call's 1.
  EXPECT_DOUBLE_EQ(t.Without("k").path_us, 10);
}

TEST(RankCriticalPath, ABlockingCallsWaitIsNotCpuTime) {
  // The same step without the sync record: nothing links the GPU to the call's end, and the call
  // weighs nothing, so the kernels' chain is still the longest path, not the CPU's 190 us.
  RankCriticalPath p = Trace()
                           .Step(1, 0, 250)
                           .Runtime("cudaLaunchKernel", 0, 5, 1)
                           .Kernel("k1", 20, 90, 1)
                           .Runtime("cudaDeviceSynchronize", 10, 180, 3)
                           .Path();
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kCpu), 0);
  EXPECT_DOUBLE_EQ(p.path_us, 110);
}

TEST(RankCriticalPath, NcclKernelsAreCommunication) {
  RankCriticalPath p = Trace()
                           .Step(1, 0, 300)
                           .Runtime("cudaLaunchKernel", 0, 5, 1)
                           .Kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 10, 250, 1, 20)
                           .Path();
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kGpuCommunication), 250);
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kLaunchDelay), 10);
}

TEST(RankCriticalPath, AStreamWaitEventHoldsTheWaitingKernelUntilTheRecordedOne) {
  // a (stream 7) is recorded in a CUDA event that stream 20 waits for: b runs after a, reached
  // through the wait, not through its own launch (b waited on a, not on its launch).
  RankCriticalPath p = Trace()
                           .Step(1, 0, 200)
                           .Runtime("cudaLaunchKernel", 0, 5, 1)
                           .Kernel("a", 10, 100, 1, 7)
                           .Runtime("cudaEventRecord", 5, 1, 2)
                           .Runtime("cudaStreamWaitEvent", 6, 1, 3)
                           .Sync("Stream Wait Event", 6, 1, 3, 20, 7, 2)
                           .Runtime("cudaLaunchKernel", 7, 2, 4)
                           .Kernel("b", 110, 20, 4, 20)
                           .Path();
  EXPECT_DOUBLE_EQ(p.path_us, 130);
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kLaunchDelay), 10);
  EXPECT_DOUBLE_EQ(Us(p, PathBound::kGpuCompute), 120);
}

TEST(RankCriticalPath, TheBackwardThreadIsLaidOnTheForwardThread) {
  // Two threads, forward then backward (HTA's fold): 50 + 40 us, not the longer one alone.
  RankCriticalPath p = Trace()
                           .Step(1, 0, 120)
                           .Cpu("forward", 0, 50, -1, 1)
                           .Cpu("autograd::engine::evaluate_function: MmBackward0", 60, 40, -1, 2)
                           .Path();
  EXPECT_DOUBLE_EQ(p.path_us, 90);
}

TEST(RankCriticalPath, OnlyTheStepsAskedForAreAnalysed) {
  Trace t;
  t.Step(1, 0, 100).Step(2, 100, 100).Cpu("A", 10, 30).Cpu("B", 110, 60);
  RankCriticalPath p = t.Path({2});
  EXPECT_EQ(p.iterations, 1);
  EXPECT_EQ(p.steps, std::vector<int64_t>{2});
  EXPECT_DOUBLE_EQ(p.MeanMs(), 0.06);
  RankCriticalPath both = t.Path();
  EXPECT_EQ(both.iterations, 2);
  EXPECT_DOUBLE_EQ(both.path_us, 90);
}

TEST(RankCriticalPath, WithoutProfilerStepsTheWholeTraceIsOneIteration) {
  RankCriticalPath p = Trace().Cpu("A", 10, 30).Cpu("B", 100, 20).Path();
  EXPECT_EQ(p.iterations, 1);
  EXPECT_TRUE(p.steps.empty());
  EXPECT_DOUBLE_EQ(p.path_us, 50);
}

TEST(RankCriticalPath, ATraceWithoutEventsHasNoPath) {
  RankCriticalPath p = Trace().Step(1, 0, 100).Path();
  EXPECT_EQ(p.iterations, 0);
  EXPECT_DOUBLE_EQ(p.MeanMs(), 0);
}

TEST(RankCriticalPath, EveryBoundHasAKeyAndAText) {
  for (size_t b = 0; b < kPathBounds; ++b) {
    const PathBoundInfo& info = PathBoundOf(static_cast<PathBound>(b));
    EXPECT_NE(std::string(info.key), "");
    EXPECT_NE(std::string(info.hta_name), "");
    EXPECT_NE(std::string(info.text), "");
  }
}

}  // namespace
}  // namespace perftracker::pattern
