#include "pattern/python_window.h"

#include <gtest/gtest.h>

namespace perftracker::pattern {
namespace {

const FunctionPattern* Find(const RankSummary& s, const std::string& name,
                            const std::string& stack) {
  for (const FunctionPattern& f : s.functions)
    if (f.name == name && f.stack == stack) return &f;
  return nullptr;
}

// Two iterations of 10 ms; main -> step (once per iteration) -> tok (1000 calls per iteration),
// a collection below tok, and 5 calls of the overflow node.
constexpr char kWindow[] = R"({"schema":"perftracker.python_window/1","pid":1,"tid":42,
"start_ns":0,"end_ns":25000000,
"iterations":[[7,0,10000000],[8,10000000,20000000]],
"names":["","<gc>","t.py(1): main","t.py(5): step","t.py(9): tok",
         "/x/torch/utils/data/dataloader.py(620): __next__","t.py(30): collate"],
"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],
[0,0,0,5,500,500,100,100,50000,26,[5],[[0,5,500,500]]],
[0,2,0,1,25000000,100000,25000000,25000000,6.25e14,98,[1],[[0,1,25000000,100000]]],
[2,3,0,2,19000000,9000000,9000000,10000000,1.81e14,92,[1,0,1],[[0,1,9000000,4000000],[1,1,10000000,5000000]]],
[3,4,0,2000,8000000,7000000,3000,5000,3.4e10,45,[1000,0,0,0,0,0,1000],[[0,1000,4000000,3500000],[1,1000,4000000,3500000]]],
[4,1,1,10,1000000,1000000,100000,100000,1e11,66,[10],[[0,4,400000,400000],[1,6,600000,600000]]],
[2,5,0,2,2000000,1000000,1000000,1000000,2e12,80,[2],[[0,1,1000000,500000],[1,1,1000000,500000]]],
[6,6,0,2,1000000,1000000,500000,500000,5e11,76,[2],[[0,1,500000,500000],[1,1,500000,500000]]]],
"long_calls":[[2,0,25000000]],
"stats":{"calls":2024}})";

TEST(PythonWindowTest, NodesBecomePatternsWithTheirCallerStacks) {
  ASSERT_TRUE(python_window::LooksLikePythonWindow(kWindow));
  auto s = SummarizePythonWindowBuffer(kWindow, "w/rank-3.python.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->rank, 3);
  EXPECT_EQ(s->main_tid, 42);
  EXPECT_EQ(s->iteration_source, "ProfilerStep");
  ASSERT_EQ(s->iteration_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(s->iteration_ms[0], 10.0);
  EXPECT_EQ(s->iteration_steps, (std::vector<int64_t>{7, 8}));
  EXPECT_DOUBLE_EQ(s->window_ms, 25.0);
  EXPECT_EQ(s->read_stats.events, 2024u);

  const FunctionPattern* tok = Find(*s, "t.py(9): tok", "t.py(1): main;t.py(5): step");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->count, 2000u);
  EXPECT_DOUBLE_EQ(tok->calls_per_iter, 1000.0);
  EXPECT_DOUBLE_EQ(tok->per_iter_us, 4000.0);
  EXPECT_DOUBLE_EQ(tok->self_per_iter_us, 3500.0);
  EXPECT_DOUBLE_EQ(tok->mean_us, 4.0);
  EXPECT_NEAR(tok->share, 0.4, 1e-9);
  EXPECT_EQ(tok->iter_us, (std::vector<float>{4000.0f, 4000.0f}));
  EXPECT_TRUE(tok->main_thread);
  EXPECT_FALSE(tok->top_level);
  EXPECT_EQ(tok->fclass, FunctionClass::kPython);
  // Half the calls take ~3 us, half ~5 us: the median sits in the lower bucket, p99 in the upper.
  EXPECT_GE(tok->p50_us, 3.0);
  EXPECT_LT(tok->p50_us, 3.6);
  EXPECT_GE(tok->p99_us, 4.0);
  EXPECT_LE(tok->p99_us, 5.0);
  EXPECT_NEAR(tok->cv, 0.25, 0.01);

  const FunctionPattern* gc = Find(*s, "<gc>", "t.py(1): main;t.py(5): step;t.py(9): tok");
  ASSERT_NE(gc, nullptr);
  EXPECT_EQ(gc->fclass, FunctionClass::kGc);
  EXPECT_DOUBLE_EQ(gc->calls_per_iter, 5.0);

  const FunctionPattern* main = Find(*s, "t.py(1): main", "");
  ASSERT_NE(main, nullptr);
  EXPECT_TRUE(main->top_level);
  // Python code below the DataLoader's next() is data loading.
  const FunctionPattern* collate = Find(
      *s, "t.py(30): collate", "t.py(1): main;/x/torch/utils/data/dataloader.py(620): __next__");
  ASSERT_NE(collate, nullptr);
  EXPECT_EQ(collate->fclass, FunctionClass::kDataLoader);
  const FunctionPattern* other = Find(*s, "<other: tracer node or depth cap reached>", "");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->count, 5u);
  // Sorted like the summarizer's output: time per iteration, descending.
  EXPECT_EQ(s->functions.front().name, "t.py(1): main");
}

TEST(PythonWindowTest, NoIterationMakesTheWindowOneFlaggedIteration) {
  constexpr char kNoIterations[] = R"({"schema":"perftracker.python_window/1","pid":1,"tid":1,
"start_ns":0,"end_ns":4000000,"iterations":[],"names":["","<gc>","t.py(1): f"],
"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],[0,0,0,0,0,0,0,0,0,0,[],[]],
[0,2,0,3,3000000,3000000,1000000,1000000,3e12,80,[3],[[0,3,3000000,3000000]]]],
"long_calls":[],"stats":{"calls":3}})";
  auto s = SummarizePythonWindowBuffer(kNoIterations, "w.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->whole_window);
  EXPECT_EQ(s->iteration_source, "window");
  ASSERT_EQ(s->functions.size(), 1u);
  EXPECT_DOUBLE_EQ(s->functions[0].calls_per_iter, 3.0);
  EXPECT_DOUBLE_EQ(s->functions[0].share, 0.75);
}

// Three iterations; main -> step -> remember, which keeps a list of floats (its comprehension
// allocates) and appends it (a builtin), step's torch module call keeps a little, and scratch()
// allocated outside the iterations.
constexpr char kKeptHeap[] = R"({"schema":"perftracker.python_window/1","pid":1,"tid":1,
"start_ns":0,"end_ns":30,"iterations":[[4,0,10],[5,10,20],[6,20,30]],
"names":["","<gc>","t.py(1): main","t.py(5): step","t.py(12): remember","t.py(13): <listcomp>",
         "<built-in method append of list object>","torch/nn/modules/module.py(1736): _call_impl",
         "t.py(20): scratch"],
"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],[0,0,0,0,0,0,0,0,0,0,[],[]],
[0,2,0,1,30,1,30,30,900,0,[1],[]],[2,3,0,3,30,3,10,10,300,0,[3],[]],
[3,4,0,3,9,3,3,3,27,0,[3],[]],[4,5,0,3,6,6,2,2,12,0,[3],[]],[4,6,0,3,3,3,1,1,3,0,[3],[]],
[3,7,0,3,9,9,3,3,27,0,[3],[]],[2,8,0,1,1,1,1,1,1,0,[1],[]]],
"kept_memory":{"sample_bytes":65536,"samples":40,"dropped":0,
 "cells":[[5,0,1000000,15],[5,1,1100000,17],[5,2,900000,14],[6,0,1000,1],[7,1,500,1],
          [8,-1,70000,1]]},
"long_calls":[],"stats":{"calls":19}})";

TEST(PythonWindowTest, TheSampledHeapKeptIsPlacedAtTheProgramsFunction) {
  auto s = SummarizePythonWindowBuffer(kKeptHeap, "w/rank-0.python.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->memory_sites.size(), 2u);
  // The comprehension and the builtin are remember()'s work; the last iteration's objects are
  // not counted (the next one may free them), nor what was made outside the iterations.
  const MemorySite& r = s->memory_sites[0];
  EXPECT_EQ(r.device, "cpu");
  EXPECT_EQ(r.function, "t.py(12): remember");
  EXPECT_EQ(r.stack, "t.py(1): main;t.py(5): step");
  EXPECT_EQ(r.op, kPythonHeapOp);
  EXPECT_DOUBLE_EQ(r.kept_bytes, 2101000);
  EXPECT_EQ(r.kept_iterations, 2u);
  EXPECT_EQ(r.counted_iterations, 2u);
  EXPECT_EQ(r.allocations, 33u);
  // torch's own frames are walked up from too: step() kept that.
  const MemorySite& t = s->memory_sites[1];
  EXPECT_EQ(t.function, "t.py(5): step");
  EXPECT_EQ(t.stack, "t.py(1): main");
  EXPECT_DOUBLE_EQ(t.kept_bytes, 500);
  EXPECT_EQ(t.kept_iterations, 1u);
}

// A window that followed tensors whole where the torch records no allocations (torch 1.13):
// step() calls torch.ones (a builtin) and the collector's recorder runs under it for the op.
constexpr char kKeptTensors[] = R"({"schema":"perftracker.python_window/1","pid":1,"tid":1,
"start_ns":0,"end_ns":30,"iterations":[[4,0,10],[5,10,20],[6,20,30]],
"names":["","<gc>","t.py(1): main","t.py(5): step","<built-in method ones of type object>",
         "/site-packages/perftracker/kept_tensors.py(131): __torch_dispatch__","aten::ones"],
"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],[0,0,0,0,0,0,0,0,0,0,[],[]],
[0,2,0,1,30,1,30,30,900,0,[1],[]],[2,3,0,3,30,3,10,10,300,0,[3],[]],
[3,4,0,3,9,9,3,3,27,0,[3],[]],[4,5,0,3,1,1,1,1,1,0,[3],[]]],
"kept_memory":{"sample_bytes":65536,"samples":4,"dropped":0,
 "cells":[[4,0,1048576,1,6],[5,1,1048576,1,6],[4,2,1048576,1,6],[3,0,80000,1]]},
"long_calls":[],"stats":{"calls":10}})";

TEST(PythonWindowTest, FollowedTensorsArePlacedAtTheProgramsCallWithTheirOp) {
  auto s = SummarizePythonWindowBuffer(kKeptTensors, "w/rank-0.python.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->memory_sites.size(), 2u);
  const MemorySite& t = s->memory_sites[0];
  EXPECT_EQ(t.function, "t.py(5): step");  // past the builtin and the recorder's frame
  EXPECT_EQ(t.op, "aten::ones");
  EXPECT_DOUBLE_EQ(t.kept_bytes, 2 * 1048576);  // the last iteration's is not counted
  EXPECT_EQ(t.kept_iterations, 2u);
  // The Python objects sampled in the same function stay apart.
  EXPECT_EQ(s->memory_sites[1].function, "t.py(5): step");
  EXPECT_EQ(s->memory_sites[1].op, kPythonHeapOp);
}

TEST(PythonWindowTest, BadFilesAreOneLineErrorsNamingTheFile) {
  const std::string head =
      R"({"schema":"perftracker.python_window/1","pid":1,"tid":1,"start_ns":0,"end_ns":10,)";
  struct Case {
    std::string json;
    std::string says;
  } cases[] = {
      {"{\"schema\":\"other/1\"}", "schema"},
      {head + R"("iterations":[[1,5]],"names":[],"nodes":[]})", "iteration 0"},
      {head + R"("iterations":[],"names":[""],"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],
          [0,0,0,0,0,0,0,0,0,0,[],[]],[5,0,0,1,1,1,1,1,1,0,[1],[]]]})",
       "node 2: parent 5 comes later"},
      {head + R"("iterations":[],"names":[""],"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],
          [0,0,0,0,0,0,0,0,0,0,[],[]],[0,9,0,1,1,1,1,1,1,0,[1],[]]]})",
       "node 2: name 9 out of range"},
      {head + R"("iterations":[],"names":[""],"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],
          [0,0,0,0,0,0,0,0,0,0,[],[]],[0,0,0,"x",1,1,1,1,1,0,[1],[]]]})",
       "node 2 is not"},
      {head + R"("iterations":[], "names":[1]})", "name 0 is not a string"},
      {head + R"("iterations":[[1,0,5]],"names":[""],"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],
          [0,0,0,0,0,0,0,0,0,0,[],[]]],"kept_memory":{"sample_bytes":65536,
          "cells":[[7,0,100,1]]}})",
       "kept_memory cell 0 is not"},
      {head + R"("iterations":[[1,0,5]],"names":[""],"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],
          [0,0,0,0,0,0,0,0,0,0,[],[]]],"kept_memory":{"sample_bytes":65536,
          "cells":[[1,1,100,1]]}})",
       "kept_memory cell 0 is not"},
      {head + R"("iterations":[[1,0,5]],"names":[""],"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],
          [0,0,0,0,0,0,0,0,0,0,[],[]]],"kept_memory":{"sample_bytes":65536,
          "cells":[[1,0,100,1,3]]}})",
       "kept_memory cell 0 is not"},  // an op name out of range
      {head + R"("iterations":[[1,0,5]],"names":[""],"nodes":[[0,0,0,0,0,0,0,0,0,0,[],[]],
          [0,0,0,0,0,0,0,0,0,0,[],[]]],"kept_memory":{"sample_bytes":65536,
          "cells":[[1,0,100,1,0,0]]}})",
       "kept_memory cell 0 is not"},
      {"{\"schema\":\"perftracker.python_window/1\", trunc", "bad Python window file"},
  };
  for (const Case& c : cases) {
    auto s = SummarizePythonWindowBuffer(c.json, "dir/rank-1.python.json");
    ASSERT_FALSE(s.ok()) << c.json;
    EXPECT_NE(s.status().message().find("dir/rank-1.python.json: "), std::string::npos)
        << s.status().message();
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << s.status().message();
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace perftracker::pattern
