#include "pattern/function_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "pattern/names.h"

namespace perftracker::pattern {
namespace {

using trace::EventKind;

TEST(FunctionTableTest, OneFunctionPerKindNameAndStack) {
  FunctionTable t;
  const uint32_t mm = t.NameId("aten::mm", EventKind::kCpuOp);
  const uint32_t a = t.Intern(EventKind::kCpuOp, mm, 0);
  EXPECT_EQ(t.Intern(EventKind::kCpuOp, mm, 0), a);
  // The raw name's shortcut lands on the same function, first time and again.
  EXPECT_EQ(t.OfRawName("aten::mm", EventKind::kCpuOp), a);
  EXPECT_EQ(t.OfRawName("aten::mm", EventKind::kCpuOp), a);
  // Another kind, or another stack, is another function.
  EXPECT_NE(t.Intern(EventKind::kUserAnnotation, mm, 0), a);
  const uint32_t stack = t.CallStackId("b.py(2): g;a.py(1): f");
  EXPECT_NE(t.Intern(EventKind::kCpuOp, mm, stack), a);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.Name(t.at(a).name_id), "aten::mm");
  EXPECT_EQ(t.at(a).fclass, ClassifyFunction(EventKind::kCpuOp, "aten::mm"));
}

TEST(FunctionTableTest, KernelNamesLoseTheirTemplateArguments) {
  FunctionTable t;
  const uint32_t a = t.OfRawName("void k<4, float>(int)", EventKind::kKernel);
  const uint32_t b = t.OfRawName("void k<8, double>(int)", EventKind::kKernel);
  EXPECT_EQ(a, b);
  EXPECT_EQ(t.Name(t.at(a).name_id), "void k<>(int)");
  // A CPU op keeps its name as it is.
  EXPECT_NE(t.NameId("k<4>", EventKind::kCpuOp), t.NameId("k<8>", EventKind::kCpuOp));
}

TEST(FunctionTableTest, CallStacksAreStoredOutermostFirst) {
  FunctionTable t;
  const uint32_t s = t.CallStackId("b.py(2): g;a.py(1): f");
  EXPECT_EQ(t.Stack(s), "a.py(1): f;b.py(2): g");
  EXPECT_EQ(t.CallStackId("b.py(2): g;a.py(1): f"), s);
  const uint32_t top = t.ChildStack(0, t.NameId("main", EventKind::kPythonFunction));
  EXPECT_EQ(t.Stack(top), "main");
  EXPECT_EQ(t.Stack(t.ChildStack(top, t.NameId("step", EventKind::kPythonFunction))), "main;step");
}

TEST(FunctionTableTest, CallsAddUpPerIterationAndThread) {
  FunctionTable t;
  t.SetIterations(3);
  const uint32_t f = t.OfRawName("aten::add", EventKind::kCpuOp);
  t.AddCall(f, 10, 0, 7);
  t.AddCall(f, 30, 2, 7);
  t.AddCall(f, 20, 2, 8);
  t.AddCall(f, 5, -1, FunctionTable::kNoThread);  // outside every iteration, no thread
  t.AddSelf(f, 2, 4);
  t.AddSelf(f, -1, 100);  // outside: not counted
  const FnAcc& a = t.at(f);
  EXPECT_EQ(a.count, 4u);
  EXPECT_DOUBLE_EQ(a.total, 65);
  EXPECT_DOUBLE_EQ(a.min, 5);
  EXPECT_DOUBLE_EQ(a.max, 30);
  EXPECT_DOUBLE_EQ(a.mean, 16.25);
  EXPECT_THAT(a.iter_us, testing::ElementsAre(10, 0, 50));
  EXPECT_THAT(a.iter_calls, testing::ElementsAre(1u, 0u, 2u));
  EXPECT_THAT(a.iter_self, testing::ElementsAre(0, 0, 4));
  EXPECT_EQ(a.thread_us.size(), 2u);
}

TEST(FunctionTableTest, CollectiveArgumentsAreAveragedAndSplitByOperation) {
  FunctionTable t;
  trace::Event e;
  e.kind = EventKind::kCpuOp;
  e.name = "record_param_comms";
  e.collective_name = "allreduce";
  e.in_msg_nelems = 1024;
  e.out_msg_nelems = 1024;
  e.dtype = "Float";
  e.group_size = 4;
  ASSERT_TRUE(FunctionTable::HasCollArgs(e));
  const uint32_t f = t.OfCommsRecord(e.kind, e.collective_name, 0);
  EXPECT_EQ(t.Name(t.at(f).name_id), "record_param_comms:" + CollectiveOp("allreduce"));
  t.AddColl(f, t.CollArgsOf(e));
  e.in_msg_nelems = e.out_msg_nelems = 3072;
  t.AddColl(f, t.CollArgsOf(e));
  EXPECT_DOUBLE_EQ(t.at(f).coll_bytes / static_cast<double>(t.at(f).coll_bytes_n),
                   2048.0 * DtypeBytes("Float"));
  EXPECT_EQ(t.at(f).group_size, 4);
  e.collective_name = "broadcast";
  EXPECT_NE(t.OfCommsRecord(e.kind, e.collective_name, 0), f);
}

TEST(FunctionTableTest, PatternsAreMeansOverSteadyIterationsCostliestFirst) {
  FunctionTable t;
  t.SetIterations(4);
  const uint32_t small = t.OfRawName("aten::add", EventKind::kCpuOp);
  const uint32_t big = t.OfRawName("aten::mm", EventKind::kCpuOp);
  t.OfRawName("aten::never_called", EventKind::kCpuOp);  // interned, no calls: no pattern
  for (int i = 0; i < 4; ++i) {
    t.AddCall(small, 1, i, 1);
    t.AddCall(big, i == 0 ? 100 : 10, i, 1);  // iteration 0 is warm-up
  }
  const std::vector<size_t> steady = {1, 2, 3};
  trace::TraceMeta meta;
  const std::vector<FunctionPattern> p =
      t.Patterns({.steady = &steady, .mean_iter_us = 20, .main_tid = 1, .meta = &meta});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "aten::mm");
  EXPECT_DOUBLE_EQ(p[0].per_iter_us, 10);
  EXPECT_DOUBLE_EQ(p[0].share, 0.5);
  EXPECT_DOUBLE_EQ(p[0].calls_per_iter, 1);
  EXPECT_TRUE(p[0].main_thread);
  EXPECT_THAT(p[0].iter_us, testing::ElementsAre(10.0f, 10.0f, 10.0f));
  EXPECT_EQ(p[1].name, "aten::add");
}

TEST(FunctionTableTest, ACollectivesGroupFallsBackToTheOnlyProcessGroupThenTheWorld) {
  FunctionTable t;
  t.SetIterations(1);
  const uint32_t f = t.OfRawName("ncclKernel_AllReduce_RING_LL_Sum_float", EventKind::kKernel);
  ASSERT_EQ(t.at(f).fclass, FunctionClass::kCollective);
  t.AddCall(f, 10, 0, FunctionTable::kNoThread);
  const std::vector<size_t> steady = {0};
  trace::TraceMeta meta;
  meta.world_size = 8;
  EXPECT_EQ(t.Patterns({.steady = &steady, .meta = &meta})[0].coll.group_size, 8);
  meta.process_groups.resize(1);
  meta.process_groups[0].size = 2;
  EXPECT_EQ(t.Patterns({.steady = &steady, .meta = &meta})[0].coll.group_size, 2);
}

}  // namespace
}  // namespace perftracker::pattern
