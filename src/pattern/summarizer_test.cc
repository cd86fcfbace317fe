#include "pattern/summarizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "pattern/histogram.h"
#include "pattern/names.h"

namespace perftracker::pattern {
namespace {

using trace::Event;
using trace::EventKind;

Event Ev(EventKind kind, std::string_view name, double ts, double dur, int64_t tid = 1) {
  Event e;
  e.kind = kind;
  e.name = name;
  e.ts_us = ts;
  e.dur_us = dur;
  e.pid = 100;
  e.tid = tid;
  return e;
}

Event Cpu(std::string_view name, double ts, double dur, int64_t tid = 1) {
  return Ev(EventKind::kCpuOp, name, ts, dur, tid);
}

Event Gpu(std::string_view name, double ts, double dur, int64_t corr = -1,
          EventKind kind = EventKind::kKernel) {
  Event e = Ev(kind, name, ts, dur, 7);
  e.pid = 0;
  e.device = 0;
  e.stream = 7;
  e.correlation = corr;
  return e;
}

trace::Span Step(double ts, double dur, int64_t step, int64_t tid = 1) {
  return trace::Span{ts, dur, tid, step};
}

const FunctionPattern* Find(const RankSummary& s, std::string_view name,
                            EventKind kind = EventKind::kCpuOp) {
  for (const auto& f : s.functions) {
    if (f.name == name && f.kind == kind) return &f;
  }
  return nullptr;
}

TEST(SummarizerTest, IterationsFromProfilerSteps) {
  trace::TraceMeta meta;
  meta.rank = 3;
  meta.profiler_steps = {Step(0, 100, 4), Step(100, 120, 5), Step(220, 80, 6),
                         Step(0, 300, 1, /*tid=*/9)};  // a lone marker on another thread
  Summarizer s;
  s.OnBegin(meta);
  s.OnEvent(Cpu("ProfilerStep#4", 0, 100));
  s.OnEvent(Cpu("aten::mm", 10, 30));
  s.OnEvent(Cpu("aten::mm", 50, 10));
  s.OnEvent(Cpu("aten::mm", 110, 50));
  s.OnEvent(Cpu("aten::mm", 230, 20));
  s.OnEvent(Cpu("aten::mm", 400, 20));  // after the last step: outside
  RankSummary r = s.Finish();
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.iteration_source, "ProfilerStep");
  EXPECT_FALSE(r.whole_window);
  EXPECT_THAT(r.iteration_ms, testing::ElementsAre(0.1, 0.12, 0.08));
  EXPECT_THAT(r.iteration_steps, testing::ElementsAre(4, 5, 6));
  EXPECT_EQ(r.events_outside_iterations, 1u);
  EXPECT_EQ(Find(r, "ProfilerStep#4"), nullptr);
  ASSERT_EQ(r.functions.size(), 1u);
  const FunctionPattern& mm = r.functions[0];
  EXPECT_EQ(mm.count, 5u);
  EXPECT_DOUBLE_EQ(mm.total_us, 130);
  EXPECT_DOUBLE_EQ(mm.calls_per_iter, 4.0 / 3);
  EXPECT_DOUBLE_EQ(mm.per_iter_us, 110.0 / 3);
  EXPECT_THAT(mm.iter_us, testing::ElementsAre(40.f, 50.f, 20.f));
  EXPECT_NEAR(mm.share, (110.0 / 3) / 100.0, 1e-12);
  EXPECT_TRUE(mm.main_thread);
  EXPECT_TRUE(mm.top_level);
  EXPECT_EQ(mm.fclass, FunctionClass::kCompute);
  EXPECT_EQ(r.main_tid, 1);
}

TEST(SummarizerTest, IterationsFromOptimizerSteps) {
  trace::TraceMeta meta;
  meta.optimizer_steps = {Step(80, 20, -1), Step(180, 20, -1)};
  Summarizer s;
  s.OnBegin(meta);
  s.OnEvent(Cpu("aten::add", 10, 5));  // first event opens iteration 0
  s.OnEvent(Ev(EventKind::kUserAnnotation, "Optimizer.step#SGD.step", 80, 20));
  s.OnEvent(Cpu("aten::add", 150, 5));
  s.OnEvent(Ev(EventKind::kUserAnnotation, "Optimizer.step#SGD.step", 180, 20));
  s.OnEvent(Cpu("aten::add", 250, 5));  // after the last step
  RankSummary r = s.Finish();
  EXPECT_EQ(r.iteration_source, "optimizer");
  EXPECT_THAT(r.iteration_ms, testing::ElementsAre(0.09, 0.1));
  EXPECT_EQ(r.events_outside_iterations, 1u);
  const FunctionPattern* opt = Find(r, "Optimizer.step#SGD.step", EventKind::kUserAnnotation);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->fclass, FunctionClass::kOptimizer);
  EXPECT_DOUBLE_EQ(opt->calls_per_iter, 1);
  const FunctionPattern* add = Find(r, "aten::add");
  ASSERT_NE(add, nullptr);
  EXPECT_THAT(add->iter_us, testing::ElementsAre(5.f, 5.f));
}

TEST(SummarizerTest, WholeWindowWithoutMarkers) {
  Summarizer s;
  s.OnBegin({});
  s.OnEvent(Cpu("aten::add", 10, 5));
  s.OnEvent(Cpu("aten::add", 1000, 10));
  RankSummary r = s.Finish();
  EXPECT_TRUE(r.whole_window);
  EXPECT_EQ(r.iteration_source, "window");
  EXPECT_THAT(r.iteration_ms, testing::ElementsAre(1.0));
  EXPECT_DOUBLE_EQ(r.window_ms, 1.0);
  EXPECT_EQ(r.events_outside_iterations, 0u);
  ASSERT_EQ(r.functions.size(), 1u);
  EXPECT_DOUBLE_EQ(r.functions[0].per_iter_us, 15);
  EXPECT_FALSE(r.has_gpu);
}

TEST(SummarizerTest, SelfTimeFromOutOfOrderEvents) {
  Summarizer s;
  s.OnBegin({});
  // parent [0,100) > child [10,40) > grandchild [15,25); child2 [50,60); delivered shuffled.
  std::vector<Event> evs = {Cpu("parent", 0, 100), Cpu("child", 10, 30),
                            Cpu("grand", 15, 10),  Cpu("child2", 50, 10),
                            Cpu("next", 100, 10),  Cpu("other_thread", 0, 100, /*tid=*/2)};
  std::mt19937 rng(1);
  std::shuffle(evs.begin(), evs.end(), rng);
  std::reverse(evs.begin(), evs.end());
  for (const Event& e : evs) s.OnEvent(e);
  RankSummary r = s.Finish();
  EXPECT_DOUBLE_EQ(Find(r, "parent")->self_per_iter_us, 60);
  EXPECT_DOUBLE_EQ(Find(r, "child")->self_per_iter_us, 20);
  EXPECT_DOUBLE_EQ(Find(r, "grand")->self_per_iter_us, 10);
  EXPECT_DOUBLE_EQ(Find(r, "next")->self_per_iter_us, 10);
  EXPECT_DOUBLE_EQ(Find(r, "other_thread")->self_per_iter_us, 100);
  EXPECT_TRUE(Find(r, "parent")->top_level);
  EXPECT_FALSE(Find(r, "child")->top_level);
  EXPECT_FALSE(Find(r, "grand")->top_level);
  EXPECT_TRUE(Find(r, "next")->top_level);
  // Thread 1 has 110 us of top-level work, thread 2 100: thread 1 is the main thread.
  EXPECT_EQ(r.main_tid, 1);
  EXPECT_TRUE(Find(r, "parent")->main_thread);
  EXPECT_FALSE(Find(r, "other_thread")->main_thread);
}

// A thread's events arrive in a few sorted runs (merged) or in many (sorted): same nesting.
TEST(SummarizerTest, SelfTimeFromSortedRunsAndManyRuns) {
  for (int order = 0; order < 3; ++order) {
    std::vector<Event> evs;
    for (int i = 0; i < 200; ++i) {
      evs.push_back(Cpu("child", i * 100 + 10, 10));
      evs.push_back(Cpu("parent", i * 100, 50));
    }
    if (order == 1) {  // two runs: every child, then every parent
      std::stable_partition(evs.begin(), evs.end(),
                            [](const Event& e) { return e.name == "child"; });
    } else if (order == 2) {  // three runs: the last parents first
      std::rotate(evs.begin(), evs.begin() + 300, evs.end());
    }
    Summarizer s;
    s.OnBegin({});
    for (const Event& e : evs) s.OnEvent(e);
    RankSummary r = s.Finish();
    EXPECT_DOUBLE_EQ(Find(r, "parent")->self_per_iter_us, 200 * 40) << order;
    EXPECT_DOUBLE_EQ(Find(r, "child")->self_per_iter_us, 200 * 10) << order;
    EXPECT_TRUE(Find(r, "parent")->top_level) << order;
    EXPECT_FALSE(Find(r, "child")->top_level) << order;
  }
}

TEST(SummarizerTest, PercentilesWithinTwoPercent) {
  Summarizer s;
  s.OnBegin({});
  std::vector<double> durs;
  for (int i = 1; i <= 1000; ++i) durs.push_back(i * 1.0);
  std::shuffle(durs.begin(), durs.end(), std::mt19937(7));
  double ts = 0;
  for (double d : durs) {
    s.OnEvent(Cpu("op", ts, d));
    ts += d + 1;
  }
  RankSummary r = s.Finish();
  const FunctionPattern* f = Find(r, "op");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->count, 1000u);
  EXPECT_NEAR(f->p50_us, 500, 500 * 0.02);
  EXPECT_NEAR(f->p99_us, 990, 990 * 0.02);
  EXPECT_DOUBLE_EQ(f->min_us, 1);
  EXPECT_DOUBLE_EQ(f->max_us, 1000);
  EXPECT_NEAR(f->mean_us, 500.5, 1e-9);
  // Uniform 1..1000: sd = sqrt((n^2-1)/12).
  EXPECT_NEAR(f->cv, std::sqrt((1000.0 * 1000 - 1) / 12) / 500.5, 1e-9);
}

TEST(HistogramTest, ConstantValueIsExact) {
  LogHistogram h;
  for (int i = 0; i < 100; ++i) h.Add(42.0);
  EXPECT_DOUBLE_EQ(h.Quantile(0.5, 42, 42), 42);
  EXPECT_DOUBLE_EQ(h.Quantile(0.99, 42, 42), 42);
  h.Add(0);  // zero and tiny durations share the floor bucket
  EXPECT_DOUBLE_EQ(h.Quantile(0.001, 0, 42), 0);
}

TEST(SummarizerTest, CollectiveBytesAndBandwidth) {
  trace::TraceMeta meta;
  meta.world_size = 4;
  Summarizer s;
  s.OnBegin(meta);
  Event comms = Cpu("record_param_comms", 0, 5);
  comms.external_id = 77;
  comms.collective_name = "allreduce";
  comms.in_msg_nelems = 1000000;
  comms.out_msg_nelems = 1000000;
  comms.dtype = "Float";
  comms.group_size = 4;
  comms.pg_ranks = "[0, 1, 2, 3]";
  Event kernel = Gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 10, 100);
  kernel.external_id = 77;
  s.OnEvent(kernel);  // before the CPU op: the link is made at Finish
  s.OnEvent(comms);
  Event gloo = Ev(EventKind::kUserAnnotation, "gloo:all_gather", 200, 50);
  gloo.in_msg_nelems = 1000;
  gloo.out_msg_nelems = 4000;
  gloo.dtype = "BFloat16";
  s.OnEvent(gloo);
  RankSummary r = s.Finish();

  const FunctionPattern* k =
      Find(r, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", EventKind::kKernel);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->fclass, FunctionClass::kCollective);
  EXPECT_EQ(k->coll.op, "all_reduce");
  EXPECT_DOUBLE_EQ(k->coll.msg_bytes, 4e6);
  EXPECT_EQ(k->coll.group_size, 4);
  EXPECT_EQ(k->coll.group, "[0, 1, 2, 3]");
  EXPECT_EQ(k->coll.dtype, "Float");
  EXPECT_DOUBLE_EQ(k->coll.algbw_gbps, 40);        // 4 MB / 100 us
  EXPECT_DOUBLE_EQ(k->coll.busbw_gbps, 40 * 1.5);  // 2(n-1)/n
  EXPECT_EQ(Find(r, "record_param_comms"), nullptr);
  const FunctionPattern* rpc = Find(r, "record_param_comms:all_reduce");
  ASSERT_NE(rpc, nullptr);
  EXPECT_EQ(rpc->coll.op, "all_reduce");
  const FunctionPattern* g = Find(r, "gloo:all_gather", EventKind::kUserAnnotation);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->fclass, FunctionClass::kCollective);
  EXPECT_EQ(g->coll.op, "all_gather");
  EXPECT_DOUBLE_EQ(g->coll.msg_bytes, 8000);  // the gathered buffer, nccl-tests style
  EXPECT_EQ(g->coll.group_size, 4);           // from the world size
  EXPECT_DOUBLE_EQ(g->coll.busbw_gbps, g->coll.algbw_gbps * 0.75);
}

TEST(SummarizerTest, GpuUnionOverlapAndCpuCritical) {
  trace::TraceMeta meta;
  meta.profiler_steps = {Step(0, 200, 1)};
  Summarizer s;
  s.OnBegin(meta);
  s.OnEvent(Gpu("gemm", 0, 50));
  s.OnEvent(Gpu("gemm", 40, 40));
  s.OnEvent(Gpu("ncclKernel_AllReduce_RING_LL_Sum_float", 60, 40));
  s.OnEvent(Gpu("Memcpy HtoD (Pageable -> Device)", 120, 10, -1, EventKind::kMemcpy));
  s.OnEvent(Gpu("## forward ##", 0, 150, -1, EventKind::kGpuUserAnnotation));  // not busy time
  s.OnEvent(Cpu("aten::to", 90, 40));               // GPU idle [100,120): 20 us critical
  s.OnEvent(Cpu("aten::relu", 140, 20));            // GPU idle throughout: 20 us
  s.OnEvent(Cpu("aten::mm", 0, 50));                // GPU busy: none
  s.OnEvent(Cpu("aten::empty", 141, 1));            // nested, adds nothing
  s.OnEvent(Cpu("worker_op", 160, 30, /*tid=*/2));  // another thread: not critical
  RankSummary r = s.Finish();
  EXPECT_TRUE(r.has_gpu);
  EXPECT_DOUBLE_EQ(r.gpu_busy_us, 110);
  // The step's GPU time runs from its first op to its last (no later step): [0, 130).
  EXPECT_DOUBLE_EQ(r.gpu_idle_us, 20);
  EXPECT_DOUBLE_EQ(r.compute_us, 80);
  EXPECT_DOUBLE_EQ(r.comm_us, 40);
  EXPECT_DOUBLE_EQ(r.memcpy_us, 10);
  EXPECT_DOUBLE_EQ(r.comm_compute_overlap_us, 20);
  EXPECT_DOUBLE_EQ(r.cpu_critical_us, 40);
  const FunctionPattern* gemm = Find(r, "gemm", EventKind::kKernel);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->device, 0);
  EXPECT_EQ(gemm->stream, 7);
  EXPECT_FALSE(gemm->top_level);
  EXPECT_EQ(Find(r, "Memcpy HtoD (Pageable -> Device)", EventKind::kMemcpy)->fclass,
            FunctionClass::kMemcpy);
  EXPECT_EQ(Find(r, "## forward ##", EventKind::kGpuUserAnnotation)->fclass,
            FunctionClass::kAnnotation);
}

TEST(SummarizerTest, GpuEventsFollowTheirLaunch) {
  trace::TraceMeta meta;
  meta.profiler_steps = {Step(0, 100, 1), Step(100, 100, 2)};
  Summarizer s;
  s.OnBegin(meta);
  // Launched late in step 1 (correlation 5), runs in step 2's time.
  s.OnEvent(Gpu("late_kernel", 120, 30, /*corr=*/5));
  Event launch = Ev(EventKind::kCudaRuntime, "cudaLaunchKernel", 95, 3);
  launch.correlation = 5;
  s.OnEvent(launch);
  Event launch2 = Ev(EventKind::kCudaRuntime, "cudaLaunchKernel", 110, 3);
  launch2.correlation = 9;
  s.OnEvent(launch2);
  s.OnEvent(Gpu("k2", 160, 10, /*corr=*/9));
  s.OnEvent(Gpu("unlinked", 170, 10));  // no correlation: its own time decides
  RankSummary r = s.Finish();
  EXPECT_THAT(Find(r, "late_kernel", EventKind::kKernel)->iter_us, testing::ElementsAre(30.f, 0.f));
  EXPECT_THAT(Find(r, "k2", EventKind::kKernel)->iter_us, testing::ElementsAre(0.f, 10.f));
  EXPECT_THAT(Find(r, "unlinked", EventKind::kKernel)->iter_us, testing::ElementsAre(0.f, 10.f));
  EXPECT_EQ(Find(r, "cudaLaunchKernel", EventKind::kCudaRuntime)->fclass, FunctionClass::kLaunch);
  // Busy time is by time: the late kernel counts in step 2.
  EXPECT_DOUBLE_EQ(r.gpu_busy_us, (0 + 50) / 2.0);
}

TEST(SummarizerTest, PythonStacks) {
  Summarizer s;
  s.OnBegin({});
  auto py = [](std::string_view name, double ts, double dur, int64_t id, int64_t parent) {
    Event e = Ev(EventKind::kPythonFunction, name, ts, dur);
    e.python_id = id;
    e.python_parent_id = parent;
    return e;
  };
  // Children first: the stack is resolved at Finish.
  s.OnEvent(py("c.py(3): g", 20, 10, 3, 2));
  s.OnEvent(py("c.py(3): g", 40, 10, 4, 5));
  s.OnEvent(py("b.py(2): f", 10, 30, 2, 1));
  s.OnEvent(py("d.py(9): h", 40, 20, 5, 1));
  s.OnEvent(py("a.py(1): main", 0, 100, 1, -1));
  s.OnEvent(Cpu("aten::mm", 22, 5));
  s.OnEvent(py("gc.py(1): <gc>", 60, 5, 6, 1));
  RankSummary r = s.Finish();
  std::vector<std::pair<std::string, std::string>> got;
  for (const auto& f : r.functions) {
    if (f.kind == EventKind::kPythonFunction) got.emplace_back(f.name, f.stack);
  }
  EXPECT_THAT(got,
              testing::UnorderedElementsAre(testing::Pair("a.py(1): main", ""),
                                            testing::Pair("b.py(2): f", "a.py(1): main"),
                                            testing::Pair("d.py(9): h", "a.py(1): main"),
                                            testing::Pair("c.py(3): g", "a.py(1): main;b.py(2): f"),
                                            testing::Pair("c.py(3): g", "a.py(1): main;d.py(9): h"),
                                            testing::Pair("gc.py(1): <gc>", "a.py(1): main")));
  for (const auto& f : r.functions) {
    if (f.name == "a.py(1): main") {
      EXPECT_TRUE(f.top_level);
      EXPECT_DOUBLE_EQ(f.self_per_iter_us, 100 - 30 - 20 - 5);
      EXPECT_EQ(f.fclass, FunctionClass::kPython);
    }
    if (f.name == "c.py(3): g" && f.stack == "a.py(1): main;b.py(2): f") {
      EXPECT_DOUBLE_EQ(f.self_per_iter_us, 5);  // minus aten::mm
      EXPECT_FALSE(f.top_level);
    }
    if (f.name == "gc.py(1): <gc>") {
      EXPECT_EQ(f.fclass, FunctionClass::kGc);
    }
  }
  EXPECT_NE(r.functions[0].Key(), r.functions[1].Key());
}

TEST(SummarizerTest, LegacyCallStack) {
  Summarizer s;
  s.OnBegin({});
  Event e = Cpu("aten::mm", 0, 10);
  e.call_stack = "model.py(10): forward;train.py(5): main";
  s.OnEvent(e);
  s.OnEvent(e);
  RankSummary r = s.Finish();
  ASSERT_EQ(r.functions.size(), 1u);
  EXPECT_EQ(r.functions[0].stack, "train.py(5): main;model.py(10): forward");
  EXPECT_EQ(r.functions[0].count, 2u);
}

TEST(SummarizerTest, InputShapesKeepTheCostliestAndTheMeanElements) {
  Summarizer s;
  s.OnBegin({});
  Event e = Cpu("aten::mm", 0, 10);
  e.input_dims = "[[64, 256], [256, 256]]";
  s.OnEvent(e);
  s.OnEvent(e);
  e.input_dims = "[[512,256],[256,256]]";  // one call, but the most time
  e.dur_us = 30;
  s.OnEvent(e);
  e.input_dims = "[[\"not\", \"dims\"]]";  // counted as a call, not as a shape
  s.OnEvent(e);
  Event plain = Cpu("aten::add_", 0, 1);
  s.OnEvent(plain);
  RankSummary r = s.Finish();
  const FunctionPattern* mm = Find(r, "aten::mm");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->count, 4u);
  EXPECT_EQ(mm->input_dims, "[512, 256], [256, 256]");
  EXPECT_DOUBLE_EQ(mm->input_elements, (2 * 81920.0 + 196608) / 3);
  const FunctionPattern* add = Find(r, "aten::add_");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->input_dims, "");
  EXPECT_EQ(add->input_elements, 0);
}

TEST(SummarizerTest, NoEventsDoesNotCrash) {
  Summarizer s;
  RankSummary r = s.Finish();
  EXPECT_TRUE(r.functions.empty());
  EXPECT_TRUE(r.whole_window);
  EXPECT_THAT(r.iteration_ms, testing::ElementsAre(0.0));
}

TEST(NamesTest, NormalizeName) {
  EXPECT_EQ(NormalizeName("void at::native::vectorized_elementwise_kernel<4, at::native::"
                          "FillFunctor<float>, at::detail::Array<char*, 1> >(int, float)",
                          EventKind::kKernel),
            "void at::native::vectorized_elementwise_kernel<>(int, float)");
  EXPECT_EQ(NormalizeName("<built-in method foo of Tensor object at 0x7f3a2b1c>",
                          EventKind::kPythonFunction),
            "<built-in method foo of Tensor object at 0x>");
  EXPECT_EQ(NormalizeName("nccl:all_reduce#123456", EventKind::kUserAnnotation),
            "nccl:all_reduce#N");
  EXPECT_EQ(NormalizeName("aten::mm", EventKind::kCpuOp), "aten::mm");
  EXPECT_EQ(NormalizeName("layer123", EventKind::kCpuOp), "layer123");
  EXPECT_EQ(NormalizeName("sm80_xmma_s1688gemm_256x128", EventKind::kKernel),
            "sm80_xmma_s1688gemm_256x128");
  EXPECT_EQ(NormalizeName("a<b", EventKind::kKernel), "a<b");
}

TEST(NamesTest, Classify) {
  EXPECT_EQ(ClassifyFunction(EventKind::kKernel, "ncclKernel_AllReduce_RING_LL_Sum_float"),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyFunction(EventKind::kKernel, "volta_sgemm_128x64_nn"), FunctionClass::kCompute);
  EXPECT_EQ(ClassifyFunction(EventKind::kCpuOp, "c10d::allreduce_"), FunctionClass::kCollective);
  EXPECT_EQ(ClassifyFunction(EventKind::kCpuOp, "c10d::something_else"), FunctionClass::kCompute);
  EXPECT_EQ(ClassifyFunction(EventKind::kUserAnnotation,
                             "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
            FunctionClass::kDataLoader);
  EXPECT_EQ(
      ClassifyFunction(EventKind::kPythonFunction, "torch/utils/data/dataloader.py(628): __next__"),
      FunctionClass::kDataLoader);
  EXPECT_EQ(ClassifyFunction(EventKind::kUserAnnotation, "Optimizer.zero_grad#SGD.zero_grad"),
            FunctionClass::kOptimizer);
  EXPECT_EQ(ClassifyFunction(EventKind::kCudaRuntime, "cudaStreamSynchronize"),
            FunctionClass::kSync);
  EXPECT_EQ(ClassifyFunction(EventKind::kCpuOp, "aten::item"), FunctionClass::kSync);
  EXPECT_EQ(ClassifyFunction(EventKind::kCudaSync, "Event Sync"), FunctionClass::kSync);
  EXPECT_EQ(ClassifyFunction(EventKind::kCudaRuntime, "cudaMemcpyAsync"), FunctionClass::kMemcpy);
  EXPECT_EQ(ClassifyFunction(EventKind::kCudaRuntime, "cudaLaunchKernel"), FunctionClass::kLaunch);
  EXPECT_EQ(ClassifyFunction(EventKind::kCudaDriver, "cuLaunchKernel"), FunctionClass::kLaunch);
  EXPECT_EQ(ClassifyFunction(EventKind::kPythonFunction, "gc.collect"), FunctionClass::kGc);
  EXPECT_EQ(ClassifyFunction(EventKind::kPythonFunction, "x.py(1): f"), FunctionClass::kPython);
  EXPECT_EQ(ClassifyFunction(EventKind::kGpuUserAnnotation, "nccl:all_reduce"),
            FunctionClass::kAnnotation);
  EXPECT_EQ(ClassifyFunction(EventKind::kUserAnnotation, "## forward ##"),
            FunctionClass::kAnnotation);
  EXPECT_EQ(ClassifyFunction(EventKind::kCpuOp, "aten::conv2d"), FunctionClass::kCompute);
}

TEST(NamesTest, BuiltinsTorchDistributedCallsAreCommunication) {
  // A pipeline stage waiting for its neighbour's activations: Work.wait() called from
  // torch.distributed's Python is time spent on peers, not the rank's own work.
  const std::string stack =
      "train.py(1): <module>;torch/distributed/pipelining/schedules.py(683): _wait_batch_p2p";
  EXPECT_EQ(ClassifyPythonFunction("<built-in method wait of PyCapsule object at 0x1>", stack),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyPythonFunction("<built-in method recv>",
                                   "a.py(1): f;torch/distributed/distributed_c10d.py(2): recv"),
            FunctionClass::kCollective);
  // The same builtin called from the user's code, or Python code inside torch.distributed, is not.
  EXPECT_EQ(ClassifyPythonFunction("<built-in method wait>", "train.py(1): <module>"),
            FunctionClass::kPython);
  EXPECT_EQ(ClassifyPythonFunction("torch/distributed/x.py(3): helper", stack),
            FunctionClass::kPython);
  // A process group's collective called by torch.distributed's Python is communication; the
  // builtins its pipelining code calls for its own work (measured: 6-13 ms an iteration of a
  // pipeline rank's "wait") are not.
  const std::string c10d = "a.py(1): f;/v/torch/distributed/distributed_c10d.py(N): all_gather";
  EXPECT_EQ(ClassifyPythonFunction("<built-in method _allgather_base>", c10d),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyPythonFunction("<built-in method allreduce>", c10d),
            FunctionClass::kCollective);
  const std::string stage =
      "a.py(1): f;/v/torch/distributed/pipelining/stage.py(483): get_fwd_send_ops";
  EXPECT_EQ(ClassifyPythonFunction("<built-in function isinstance>", stage),
            FunctionClass::kPython);
  EXPECT_EQ(ClassifyPythonFunction("<built-in method detach>", stage), FunctionClass::kPython);
  EXPECT_EQ(ClassifyPythonFunction("<built-in method div_>", stage), FunctionClass::kPython);
}

TEST(NamesTest, FunctionalCollectivesAreCommunication) {
  // Tensor parallel (DTensor) on torch 2.x: the CPU op that waits, and the Python frames below
  // the wait, whose self time holds it when the tracer misses the pybind redispatch call.
  EXPECT_EQ(ClassifyFunction(EventKind::kCpuOp, "_c10d_functional::wait_tensor"),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyFunction(EventKind::kCpuOp, "_c10d_functional::all_reduce"),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyFunction(EventKind::kCpuOp, "_c10d_functional_autograd::all_to_all_single"),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyFunction(EventKind::kCpuOp, "_c10d_functional::_wrap_tensor_autograd"),
            FunctionClass::kCompute);
  EXPECT_EQ(CollectiveOp("_c10d_functional::wait_tensor"), "wait");
  // FSDP2's ranges around its collectives, not its copies.
  EXPECT_EQ(ClassifyFunction(EventKind::kUserAnnotation, "FSDP::all_gather (blocks.1)"),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyFunction(EventKind::kUserAnnotation, "FSDP::post_backward_rs_wait ()"),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyFunction(EventKind::kUserAnnotation, "FSDP::post_backward_reduce"),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyFunction(EventKind::kUserAnnotation, "FSDP::all_gather_copy_in"),
            FunctionClass::kAnnotation);
  EXPECT_EQ(ClassifyFunction(EventKind::kUserAnnotation, "FSDP::pre_forward (blocks.0)"),
            FunctionClass::kAnnotation);
  EXPECT_EQ(CollectiveOp("c10d_functional::all_gather_into_tensor"), "all_gather");
  EXPECT_EQ(CollectiveOp("_c10d_functional::reduce_scatter_tensor"), "reduce_scatter");
  const std::string wait =
      "train.py(1): <module>;/v/torch/distributed/tensor/_redistribute.py(1529): "
      "redistribute_local_tensor;/v/torch/distributed/_functional_collectives.py(1121): wait;"
      "/v/torch/distributed/_functional_collectives.py(136): wait_tensor;/v/torch/_ops.py(1267): "
      "__call__;<built-in method wait_tensor>;/v/torch/_library/autograd.py(108): autograd_impl";
  EXPECT_EQ(ClassifyPythonFunction("/v/torch/_ops.py(879): redispatch", wait),
            FunctionClass::kCollective);
  EXPECT_EQ(ClassifyPythonFunction("<built-in method wait_tensor>",
                                   "a.py(1): f;/v/torch/_ops.py(1267): __call__"),
            FunctionClass::kCollective);
  // The same frames outside a wait are the rank's own Python.
  const std::string issue =
      "train.py(1): <module>;/v/torch/distributed/_functional_collectives.py(161): all_reduce;"
      "/v/torch/_ops.py(1267): __call__;<built-in method all_reduce>;"
      "/v/torch/_library/autograd.py(108): autograd_impl";
  EXPECT_EQ(ClassifyPythonFunction("/v/torch/_ops.py(879): redispatch", issue),
            FunctionClass::kPython);
  EXPECT_FALSE(IsCollectiveWaitFrame("my/_functional_collectives.py(3): wait"));
  EXPECT_FALSE(IsCollectiveWaitFrame("/v/torch/distributed/_functional_collectives.py(9): waiter"));
}

TEST(NamesTest, PipelineGroups) {
  auto pg = [](std::string name, std::string desc) {
    trace::ProcessGroup g;
    g.name = std::move(name);
    g.desc = std::move(desc);
    return g;
  };
  EXPECT_TRUE(IsPipelineGroup(pg("pp", "")));        // Megatron-style name
  EXPECT_TRUE(IsPipelineGroup(pg("4", "mesh_pp")));  // DeviceMesh dimension "pp" (torch 2.x)
  EXPECT_TRUE(IsPipelineGroup(pg("7", "pipeline_stage")));
  EXPECT_FALSE(IsPipelineGroup(pg("1", "mesh_dp")));
  EXPECT_FALSE(IsPipelineGroup(pg("0", "default_pg")));
  EXPECT_FALSE(IsPipelineGroup(pg("2", "mesh_tp")));
  EXPECT_FALSE(IsPipelineGroup(pg("3", "app")));
  EXPECT_TRUE(IsPipelineGroup(pg("5", "PIPELINE_MODEL_PARALLEL_GROUP")));  // Megatron-core
  EXPECT_TRUE(IsEmbeddingGroup(pg("6", "EMBEDDING_GROUP")));
  EXPECT_FALSE(IsEmbeddingGroup(pg("1", "mesh_dp")));
}

TEST(NamesTest, CollectiveOps) {
  EXPECT_EQ(CollectiveOp("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "all_reduce");
  EXPECT_EQ(CollectiveOp("ncclKernel_ReduceScatter_RING_LL_Sum_float"), "reduce_scatter");
  EXPECT_EQ(CollectiveOp("ncclDevKernel_AllGather_RING_LL"), "all_gather");
  EXPECT_EQ(CollectiveOp("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"), "send_recv");
  EXPECT_EQ(CollectiveOp("ncclKernel_Broadcast_RING_LL_Sum_int8_t"), "broadcast");
  EXPECT_EQ(CollectiveOp("ncclDevKernel_Reduce_Sum"), "reduce");
  EXPECT_EQ(CollectiveOp("gloo:all_reduce"), "all_reduce");
  EXPECT_EQ(CollectiveOp("nccl:_all_gather_base"), "all_gather");
  EXPECT_EQ(CollectiveOp("nccl:all_to_all"), "all_to_all");
  EXPECT_EQ(CollectiveOp("c10d::allreduce_"), "all_reduce");
  EXPECT_EQ(CollectiveOp("allreduce"), "all_reduce");
  EXPECT_EQ(CollectiveOp("recv"), "recv");
  EXPECT_EQ(CollectiveOp("record_param_comms"), "");
  EXPECT_EQ(DtypeBytes("Half"), 2);
  EXPECT_EQ(DtypeBytes("Long"), 8);
  EXPECT_EQ(DtypeBytes("Bool"), 1);
  EXPECT_EQ(DtypeBytes("???"), 0);
  EXPECT_DOUBLE_EQ(BusFactor("all_reduce", 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusFactor("reduce_scatter", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusFactor("broadcast", 8), 1);
  EXPECT_DOUBLE_EQ(BusFactor("send", 2), 1);
}

TEST(NamesTest, PointToPointIsBetweenStages) {
  EXPECT_TRUE(IsPointToPoint("gloo:recv", ""));
  EXPECT_TRUE(IsPointToPoint("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", ""));
  EXPECT_FALSE(IsPointToPoint("gloo:all_reduce", ""));
  // A Python wait is a transfer by what called it: a pipeline schedule's batch of sends and
  // receives, or torch.distributed's recv; an all_reduce's wait is the group's.
  constexpr std::string_view kSchedule =
      "pipeline.py(74): pipeline_step;"
      "/venv/lib/python3.11/site-packages/torch/distributed/pipelining/schedules.py(740): step;"
      "/venv/lib/python3.11/site-packages/torch/distributed/pipelining/schedules.py(678): "
      "_wait_batch_p2p";
  EXPECT_TRUE(IsPointToPoint("<built-in method wait>", kSchedule));
  EXPECT_TRUE(IsPointToPoint(
      "<built-in method wait>",
      "train.py(12): "
      "stage;/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py(N): recv"));
  EXPECT_FALSE(IsPointToPoint(
      "<built-in method wait>",
      "common.py(357): allreduce_mean;/venv/torch/distributed/distributed_c10d.py(N): all_reduce"));
  // A user's own function named recv is not torch's.
  EXPECT_FALSE(IsPointToPoint("<built-in method sleep>", "train.py(40): recv"));
}

}  // namespace
}  // namespace perftracker::pattern

namespace perftracker::pattern {
namespace {

Event Launch(double ts, int64_t corr) {
  Event e = Cpu("cudaLaunchKernel", ts, 1);
  e.kind = EventKind::kCudaRuntime;
  e.correlation = corr;
  return e;
}

TEST(SummarizerTest, GpuWorkBelongsToTheStepThatLaunchedItWhereverItRuns) {
  trace::TraceMeta meta;
  meta.profiler_steps = {Step(0, 100, 1), Step(100, 100, 2), Step(200, 100, 3)};
  Summarizer s;
  s.OnBegin(meta);
  // A kernel queued before the profiler started (no launch in the trace), running in step 1.
  s.OnEvent(Gpu("gemm", 5, 10, /*corr=*/3));
  for (int k = 0; k < 3; ++k) {
    const double t0 = 100.0 * k;
    s.OnEvent(Cpu("aten::mm", t0 + 10, 20));
    s.OnEvent(Launch(t0 + 20, 10 + k));
    // Each step's kernel runs 60 us and ends 50 us after the step's CPU end: the GPU lags.
    s.OnEvent(Gpu("gemm", t0 + 90, 60, /*corr=*/10 + k));
  }
  RankSummary r = s.Finish();
  ASSERT_EQ(r.iteration_ms.size(), 3u);
  EXPECT_EQ(r.pre_profiler_gpu_ops, 1u);
  EXPECT_DOUBLE_EQ(r.pre_profiler_gpu_us, 10);
  // 60 us of compute per step (the last step's tail after the trace's CPU end included); by
  // time inside the CPU steps it would be 10, 60, 60 plus the early kernel.
  EXPECT_DOUBLE_EQ(r.compute_us, 60);
  EXPECT_DOUBLE_EQ(r.gpu_busy_us, 60);
  // Steps 1 and 2 span 100 us on the GPU (first op to the next step's first op), step 3 its own
  // 60: idle (40 + 40 + 0) / 3.
  EXPECT_NEAR(r.gpu_idle_us, 80.0 / 3, 1e-9);
  const FunctionPattern* gemm = Find(r, "gemm", EventKind::kKernel);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->count, 4u);
  EXPECT_DOUBLE_EQ(gemm->calls_per_iter, 1.0);  // not 4/3: the early kernel is no step's
  EXPECT_DOUBLE_EQ(gemm->per_iter_us, 60);
}

TEST(SummarizerTest, PartialAndWarmupStepsAreLeftOutOfPerIterationValues) {
  trace::TraceMeta meta;
  // Steps of 30 (warm-up), 100, 100, 100 and a last one of 2 cut by the trace's end.
  meta.profiler_steps = {Step(0, 30, 1), Step(30, 100, 2), Step(130, 100, 3), Step(230, 100, 4),
                         Step(330, 2, 5)};
  Summarizer s;
  s.OnBegin(meta);
  s.OnEvent(Cpu("aten::mm", 1, 20));  // warm-up: not counted per iteration
  for (int k = 0; k < 3; ++k) s.OnEvent(Cpu("aten::mm", 40 + 100.0 * k, 50));
  s.OnEvent(Cpu("aten::mm", 330, 1));
  RankSummary r = s.Finish();
  EXPECT_EQ(r.iteration_ms, (std::vector<double>{0.1, 0.1, 0.1}));
  EXPECT_EQ(r.iteration_steps, (std::vector<int64_t>{2, 3, 4}));
  ASSERT_EQ(r.excluded_iterations.size(), 2u);
  EXPECT_EQ(r.excluded_iterations[0].reason, ExcludedIteration::kWarmup);
  EXPECT_EQ(r.excluded_iterations[0].step, 1);
  EXPECT_EQ(r.excluded_iterations[1].reason, ExcludedIteration::kPartial);
  EXPECT_EQ(r.excluded_iterations[1].step, 5);
  EXPECT_DOUBLE_EQ(r.excluded_iterations[1].ms, 0.002);
  const FunctionPattern* mm = Find(r, "aten::mm");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->count, 5u);
  EXPECT_DOUBLE_EQ(mm->calls_per_iter, 1.0);
  EXPECT_DOUBLE_EQ(mm->per_iter_us, 50);
  EXPECT_DOUBLE_EQ(mm->share, 0.5);
  EXPECT_EQ(mm->iter_us.size(), 3u);
}

}  // namespace
}  // namespace perftracker::pattern
