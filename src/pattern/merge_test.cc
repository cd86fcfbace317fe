#include "pattern/merge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pattern/summarizer.h"
#include "trace/reader.h"

namespace perftracker::pattern {
namespace {

using trace::EventKind;

FunctionPattern Fn(std::string name, EventKind kind, uint64_t count, double total_us,
                   size_t iterations, double self_fraction = 1.0) {
  FunctionPattern f;
  f.name = std::move(name);
  f.kind = kind;
  f.count = count;
  f.total_us = total_us;
  const double n = iterations ? static_cast<double>(iterations) : 1.0;
  f.per_iter_us = total_us / n;
  f.calls_per_iter = static_cast<double>(count) / n;
  f.self_per_iter_us = f.per_iter_us * self_fraction;
  f.iter_us.assign(iterations, static_cast<float>(total_us / n));
  return f;
}

const FunctionPattern* Find(const RankSummary& s, std::string_view name) {
  for (const auto& f : s.functions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The Python tracer's view: 4 iterations of 10 ms.
RankSummary Primary() {
  RankSummary p;
  p.rank = 2;
  p.iteration_source = "ProfilerStep";
  p.iteration_ms = {10, 10, 10, 10};
  p.iteration_steps = {5, 6, 7, 8};
  p.functions.push_back(Fn("train.py(5): step", EventKind::kPythonFunction, 4, 36000, 4));
  p.functions.push_back(Fn("aten::mm", EventKind::kCpuOp, 8, 800, 4));
  p.functions[0].main_thread = true;
  p.read_stats.bytes = 100;
  p.read_stats.events = 10;
  p.read_stats.unknown_cats["x"] = 1;
  return p;
}

// torch.profiler's view of the same window: no markers, the whole window is one iteration.
RankSummary Secondary() {
  RankSummary s;
  s.rank = 2;
  s.world_size = 8;
  s.iteration_source = "window";
  s.whole_window = true;
  s.iteration_ms = {41};
  s.functions.push_back(Fn("aten::mm", EventKind::kCpuOp, 8, 9999, 1));  // PRIMARY's wins
  s.functions.push_back(Fn("aten::conv2d", EventKind::kCpuOp, 12, 20000, 1, 0.25));
  s.functions.push_back(Fn("aten::add", EventKind::kCpuOp, 40, 400, 1));
  s.functions[1].main_thread = true;
  s.read_stats.bytes = 50;
  s.read_stats.events = 5;
  s.read_stats.unknown_cats["x"] = 2;
  s.read_stats.unknown_cats["y"] = 3;
  return s;
}

TEST(MergeTest, AddsMissingFunctionsRebasedOnPrimaryIterations) {
  RankSummary p = Primary();
  MergeWindowSummary(&p, Secondary());
  ASSERT_EQ(p.functions.size(), 4u);
  EXPECT_THAT(p.iteration_ms, testing::ElementsAre(10, 10, 10, 10));

  const FunctionPattern* mm = Find(p, "aten::mm");
  ASSERT_NE(mm, nullptr);
  EXPECT_DOUBLE_EQ(mm->total_us, 800);  // the primary's own figures stay

  const FunctionPattern* conv = Find(p, "aten::conv2d");
  ASSERT_NE(conv, nullptr);
  EXPECT_DOUBLE_EQ(conv->per_iter_us, 5000);
  EXPECT_DOUBLE_EQ(conv->calls_per_iter, 3);
  EXPECT_DOUBLE_EQ(conv->self_per_iter_us, 1250);
  EXPECT_DOUBLE_EQ(conv->share, 0.5);
  // 1 iteration there, 4 here: its own per-iteration values stay (the noise estimate's).
  EXPECT_EQ(conv->iter_us.size(), 1u);
  EXPECT_TRUE(conv->main_thread);
  // On the training thread, which the Python tracer's frames cover: its time is in them.
  EXPECT_TRUE(conv->in_python);

  const FunctionPattern* add = Find(p, "aten::add");
  ASSERT_NE(add, nullptr);
  EXPECT_DOUBLE_EQ(add->per_iter_us, 100);
  EXPECT_FALSE(add->main_thread);
  EXPECT_FALSE(add->in_python);  // another thread: the tracer did not see it
  EXPECT_FALSE(Find(p, "train.py(5): step")->in_python);

  for (size_t i = 1; i < p.functions.size(); ++i) {
    EXPECT_GE(p.functions[i - 1].per_iter_us, p.functions[i].per_iter_us);
  }
  EXPECT_EQ(p.functions[0].name, "train.py(5): step");
  EXPECT_EQ(p.functions[1].name, "aten::conv2d");

  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.read_stats.bytes, 150u);
  EXPECT_EQ(p.read_stats.events, 15u);
  EXPECT_EQ(p.read_stats.unknown_cats.at("x"), 3u);
  EXPECT_EQ(p.read_stats.unknown_cats.at("y"), 3u);
}

TEST(MergeTest, SameIterationCountKeepsIterUs) {
  RankSummary p = Primary();
  RankSummary s;
  s.iteration_ms = {9, 9, 9, 9};
  s.functions.push_back(Fn("aten::relu", EventKind::kCpuOp, 4, 40, 4));
  MergeWindowSummary(&p, s);
  const FunctionPattern* relu = Find(p, "aten::relu");
  ASSERT_NE(relu, nullptr);
  EXPECT_THAT(relu->iter_us, testing::ElementsAre(10.f, 10.f, 10.f, 10.f));
  EXPECT_DOUBLE_EQ(relu->per_iter_us, 10);
}

TEST(MergeTest, PerIterationValuesFollowThePrimarysIterations) {
  // Both traces split the window into 5 iterations; the primary left its first out (warm-up).
  RankSummary p = Primary();
  p.excluded_iterations.push_back({ExcludedIteration::kWarmup, 4, 0, 30});
  // The secondary kept all five (a window's torch trace: Summarizer::LeaveWarmupIn): its values
  // of iterations 1-4 are the primary's four.
  RankSummary all;
  all.iteration_ms = {30, 10, 10, 10, 10};
  all.functions.push_back(Fn("gloo:all_reduce", EventKind::kCpuOp, 5, 30, 5));
  all.functions.back().iter_us = {20, 1, 2, 3, 4};
  RankSummary picked = p;
  MergeWindowSummary(&picked, all);
  EXPECT_THAT(Find(picked, "gloo:all_reduce")->iter_us, testing::ElementsAre(1.f, 2.f, 3.f, 4.f));
  // The secondary cut its last, which the primary kept: its values are not the primary's
  // iterations', and stay its own.
  RankSummary cut = all;
  cut.iteration_ms = {30, 10, 10, 10};
  cut.excluded_iterations.push_back({ExcludedIteration::kPartial, -1, 4, 2});
  cut.functions.back().iter_us = {20, 1, 2, 3};
  RankSummary own = p;
  MergeWindowSummary(&own, cut);
  EXPECT_THAT(Find(own, "gloo:all_reduce")->iter_us, testing::ElementsAre(20.f, 1.f, 2.f, 3.f));
  // Nor where the two split the window differently (4 iterations there, 5 here).
  RankSummary other = all;
  other.iteration_ms = {10, 10, 10, 10};
  other.functions.back().iter_us = {1, 2, 3, 4};
  RankSummary apart = p;
  MergeWindowSummary(&apart, other);
  EXPECT_THAT(Find(apart, "gloo:all_reduce")->iter_us, testing::ElementsAre(1.f, 2.f, 3.f, 4.f));
}

TEST(MergeTest, GpuFiguresFromSecondaryWhenPrimaryHasNone) {
  RankSummary p = Primary();
  RankSummary s = Secondary();
  s.iteration_ms = {20, 21};  // two iterations there, four here
  s.has_gpu = true;
  s.gpu_busy_us = 10000;
  s.gpu_idle_us = 10500;
  s.compute_us = 8000;
  s.comm_us = 3000;
  s.memcpy_us = 500;
  s.comm_compute_overlap_us = 1000;
  s.cpu_critical_us = 200;
  s.devices = {trace::DeviceInfo{0, "H100", 132, 9, 0}};
  s.process_groups = {trace::ProcessGroup{"0", "default_pg", "nccl", 8, {}}};
  MergeWindowSummary(&p, s);
  EXPECT_TRUE(p.has_gpu);
  EXPECT_DOUBLE_EQ(p.gpu_busy_us, 5000);
  EXPECT_DOUBLE_EQ(p.gpu_idle_us, 5000);  // against the primary's 10 ms iterations
  EXPECT_DOUBLE_EQ(p.compute_us, 4000);
  EXPECT_DOUBLE_EQ(p.comm_us, 1500);
  EXPECT_DOUBLE_EQ(p.memcpy_us, 250);
  EXPECT_DOUBLE_EQ(p.comm_compute_overlap_us, 500);
  EXPECT_DOUBLE_EQ(p.cpu_critical_us, 100);
  ASSERT_EQ(p.devices.size(), 1u);
  EXPECT_EQ(p.devices[0].name, "H100");
  ASSERT_EQ(p.process_groups.size(), 1u);
  EXPECT_EQ(p.process_groups[0].backend, "nccl");
}

TEST(MergeTest, SecondaryOfPartOfTheWindowKeepsItsOwnMeans) {
  // The Python tracer's 10 iterations of 10 ms; torch.profiler recorded the first 4 of them
  // (base/window_defaults.h kTorchProfilerIterations), 45 ms with its slower first one.
  RankSummary p = Primary();
  p.iteration_ms.assign(10, 10);
  p.iteration_steps.clear();
  p.window_ms = 100;
  RankSummary part;
  part.iteration_source = "optimizer";
  part.iteration_ms = {15, 10, 10, 10};
  part.window_ms = 45;
  part.functions.push_back(Fn("gloo:all_reduce", EventKind::kCpuOp, 4, 8000, 4));
  part.has_gpu = true;
  part.gpu_busy_us = 6000;  // a mean over its 4 iterations
  RankSummary merged = p;
  MergeWindowSummary(&merged, part);
  const FunctionPattern* ar = Find(merged, "gloo:all_reduce");
  ASSERT_NE(ar, nullptr);
  EXPECT_DOUBLE_EQ(ar->per_iter_us, 2000);  // over its 4 iterations, not the window's 10
  EXPECT_DOUBLE_EQ(ar->calls_per_iter, 1);
  EXPECT_EQ(ar->iter_us.size(), 4u);  // its own iterations' values (the window's first four)
  EXPECT_DOUBLE_EQ(merged.gpu_busy_us, 6000);
  EXPECT_THAT(merged.iteration_ms, testing::Each(10.0));  // the window's times stay the tracer's

  // Without iterations of its own, a part spread over as many of the window's as it spans.
  RankSummary whole = part;
  whole.iteration_source = "window";
  whole.whole_window = true;
  whole.iteration_ms = {30};
  whole.window_ms = 30;
  whole.functions.back().iter_us = {6000};
  RankSummary spread = p;
  MergeWindowSummary(&spread, whole);
  EXPECT_DOUBLE_EQ(Find(spread, "gloo:all_reduce")->per_iter_us, 8000.0 / 3);

  // One spanning nearly the whole window recorded all of it: over the window's 10.
  RankSummary all = part;
  all.window_ms = 96;
  RankSummary over_all = p;
  MergeWindowSummary(&over_all, all);
  EXPECT_DOUBLE_EQ(Find(over_all, "gloo:all_reduce")->per_iter_us, 800);
  EXPECT_DOUBLE_EQ(over_all.gpu_busy_us, 2400);
}

TEST(MergeTest, PrimaryGpuFiguresWin) {
  RankSummary p = Primary();
  p.has_gpu = true;
  p.gpu_busy_us = 7;
  p.devices = {trace::DeviceInfo{1, "A100", 108, 8, 0}};
  RankSummary s = Secondary();
  s.has_gpu = true;
  s.gpu_busy_us = 10000;
  s.devices = {trace::DeviceInfo{0, "H100", 132, 9, 0}};
  MergeWindowSummary(&p, s);
  EXPECT_DOUBLE_EQ(p.gpu_busy_us, 7);
  EXPECT_EQ(p.devices[0].name, "A100");
}

TEST(MergeTest, PrimaryWithoutIterationsTakesSecondarys) {
  RankSummary p;
  p.functions.push_back(Fn("x.py(1): f", EventKind::kPythonFunction, 2, 60, 0));
  p.functions[0].per_iter_us = 0;  // counted against no iteration
  RankSummary s;
  s.iteration_source = "optimizer";
  s.iteration_ms = {0.02, 0.04};
  s.window_ms = 0.07;
  s.functions.push_back(Fn("aten::mm", EventKind::kCpuOp, 4, 40, 2));
  MergeWindowSummary(&p, s);
  EXPECT_EQ(p.iteration_source, "optimizer");
  EXPECT_THAT(p.iteration_ms, testing::ElementsAre(0.02, 0.04));
  EXPECT_DOUBLE_EQ(p.window_ms, 0.07);
  const FunctionPattern* mm = Find(p, "aten::mm");
  ASSERT_NE(mm, nullptr);
  EXPECT_DOUBLE_EQ(mm->per_iter_us, 20);
  EXPECT_EQ(mm->iter_us.size(), 2u);
  EXPECT_DOUBLE_EQ(mm->share, 20 / 30.0);
  const FunctionPattern* f = Find(p, "x.py(1): f");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f->per_iter_us, 30);
  EXPECT_EQ(p.functions[0].name, "x.py(1): f");
}

TEST(MergeTest, EmptySecondaryChangesNothingButOrder) {
  RankSummary p = Primary();
  MergeWindowSummary(&p, RankSummary{});
  ASSERT_EQ(p.functions.size(), 2u);
  EXPECT_DOUBLE_EQ(p.functions[0].per_iter_us, 9000);
  EXPECT_FALSE(p.has_gpu);
  EXPECT_EQ(p.world_size, -1);
}

RankSummary Summarize(const std::string& json, const std::string& name) {
  Summarizer s;
  StatusOr<trace::ReadStats> st = trace::ReadTraceBuffer(json, name, &s);
  EXPECT_TRUE(st.ok()) << st.status().message();
  if (st.ok()) s.OnEnd(*st);
  return s.Finish();
}

TEST(MergeTest, PythonTraceWithTorchTrace) {
  // The Python tracer's file: ProfilerStep markers and python_function events.
  const std::string python = R"({"traceEvents": [
    {"name": "ProfilerStep#3", "ph": "X", "cat": "user_annotation", "ts": 1000, "dur": 100, "pid": 7, "tid": 7},
    {"name": "ProfilerStep#4", "ph": "X", "cat": "user_annotation", "ts": 1100, "dur": 100, "pid": 7, "tid": 7},
    {"name": "train.py(10): step", "ph": "X", "cat": "python_function", "ts": 1010, "dur": 80, "pid": 7, "tid": 7,
     "args": {"Python id": 1, "Python parent id": null}},
    {"name": "train.py(10): step", "ph": "X", "cat": "python_function", "ts": 1110, "dur": 80, "pid": 7, "tid": 7,
     "args": {"Python id": 2, "Python parent id": null}}
  ]})";
  // torch.profiler's file of the same window, on another clock and without markers.
  const std::string torch = R"({"traceEvents": [
    {"name": "aten::mm", "ph": "X", "cat": "cpu_op", "ts": 5000020, "dur": 30, "pid": 7, "tid": 7},
    {"name": "aten::mm", "ph": "X", "cat": "cpu_op", "ts": 5000120, "dur": 50, "pid": 7, "tid": 7},
    {"name": "aten::add", "ph": "X", "cat": "cpu_op", "ts": 5000180, "dur": 10, "pid": 7, "tid": 7}
  ]})";
  RankSummary p = Summarize(python, "rank-0.python.json");
  const RankSummary t = Summarize(torch, "rank-0.python.json.torch.json");
  ASSERT_EQ(p.iteration_ms.size(), 2u);
  ASSERT_TRUE(t.whole_window);
  MergeWindowSummary(&p, t);
  EXPECT_THAT(p.iteration_steps, testing::ElementsAre(3, 4));
  const FunctionPattern* mm = Find(p, "aten::mm");
  ASSERT_NE(mm, nullptr);
  EXPECT_DOUBLE_EQ(mm->per_iter_us, 40);
  EXPECT_DOUBLE_EQ(mm->calls_per_iter, 1);
  EXPECT_DOUBLE_EQ(mm->share, 0.4);
  const FunctionPattern* step = Find(p, "train.py(10): step");
  ASSERT_NE(step, nullptr);
  EXPECT_DOUBLE_EQ(step->per_iter_us, 80);
  EXPECT_EQ(p.functions[0].name, "train.py(10): step");
  EXPECT_EQ(p.read_stats.events, 7u);
}

TEST(MergeTest, KeptMemoryComesFromBothTheSampledHeapAndTheTorchTrace) {
  const std::string trace = R"({"traceEvents": [
    {"name": "ProfilerStep#3", "ph": "X", "cat": "user_annotation", "ts": 1000, "dur": 100, "pid": 7, "tid": 7},
    {"name": "train.py(10): step", "ph": "X", "cat": "python_function", "ts": 1010, "dur": 80, "pid": 7, "tid": 7}
  ]})";
  RankSummary p = Summarize(trace, "rank-0.python.json");
  RankSummary t = Summarize(trace, "rank-0.python.json.torch.json");
  MemorySite heap, torch_site;
  heap.function = "train.py(20): remember";
  heap.op = "Python objects";
  torch_site.function = "train.py(10): step";
  torch_site.op = "aten::ones";
  p.memory_sites = {heap};
  t.memory_sites = {torch_site};
  MergeWindowSummary(&p, t);
  ASSERT_EQ(p.memory_sites.size(), 2u);
  EXPECT_EQ(p.memory_sites[0].op, "Python objects");
  EXPECT_EQ(p.memory_sites[1].op, "aten::ones");
}

}  // namespace
}  // namespace perftracker::pattern
