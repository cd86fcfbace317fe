// Golden values on the shared real traces. Expected numbers were computed once, independently,
// with a short Python script over the JSON (ProfilerStep spans, kernels assigned to the
// iteration of their cuda_runtime launch by correlation id, NCCL kernels linked to
// record_param_comms by External id) and hard-coded here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "pattern/summarizer.h"
#include "pattern/summary_io.h"
#include "trace/reader.h"

namespace perftracker::pattern {
namespace {

using trace::EventKind;

std::string Shared(const std::string& rel) { return std::string(PT_SHARED_TRACES) + "/" + rel; }

const FunctionPattern* FindPrefix(const RankSummary& s, std::string_view prefix, EventKind kind) {
  for (const auto& f : s.functions) {
    if (f.kind == kind && std::string_view(f.name).substr(0, prefix.size()) == prefix) return &f;
  }
  return nullptr;
}

std::vector<const FunctionPattern*> Kernels(const RankSummary& s) {
  std::vector<const FunctionPattern*> out;
  for (const auto& f : s.functions) {
    if (f.kind == EventKind::kKernel) out.push_back(&f);
  }
  return out;  // already sorted by per_iter_us
}

#define SKIP_IF_MISSING(path) \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present"

TEST(TraceGoldenTest, Nccl2RankRank0) {
  const std::string path = Shared("kineto/nccl_2rank_rank0.json.gz");
  SKIP_IF_MISSING(path);
  StatusOr<RankSummary> r = SummarizeTrace(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const RankSummary& s = *r;
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.world_size, 2);
  EXPECT_TRUE(s.has_gpu);
  EXPECT_EQ(s.iteration_source, "ProfilerStep");
  EXPECT_THAT(s.iteration_steps, testing::ElementsAre(4, 5, 6));
  ASSERT_EQ(s.iteration_ms.size(), 3u);
  EXPECT_NEAR(s.iteration_ms[0], 222.442191, 1e-6);
  EXPECT_NEAR(s.iteration_ms[1], 219.726905, 1e-6);
  EXPECT_NEAR(s.iteration_ms[2], 224.936243, 1e-6);
  EXPECT_NEAR(s.gpu_busy_us, 52500.026, 0.5);
  EXPECT_NEAR(s.comm_us, 15625.497, 0.5);

  std::vector<const FunctionPattern*> k = Kernels(s);
  ASSERT_GE(k.size(), 2u);
  EXPECT_EQ(k[0]->name,
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)");
  EXPECT_EQ(k[0]->count, 15u);
  EXPECT_NEAR(k[0]->per_iter_us, 15587.386, 0.5);
  EXPECT_THAT(k[1]->name, testing::StartsWith("void cudnn::bn_bw_1C11_kernel_new<>(float, float"));
  EXPECT_EQ(k[1]->count, 132u);
  EXPECT_NEAR(k[1]->per_iter_us, 6500.413, 0.5);

  const FunctionPattern* ar = k[0];
  EXPECT_EQ(ar->fclass, FunctionClass::kCollective);
  EXPECT_EQ(ar->coll.op, "all_reduce");
  EXPECT_NEAR(ar->coll.msg_bytes, 20445625.6, 1);
  EXPECT_EQ(ar->coll.group_size, 2);
  EXPECT_EQ(ar->coll.group, "[0, 1]");
  EXPECT_EQ(ar->coll.dtype, "Float");
  EXPECT_NEAR(ar->mean_us, 3117.4773, 0.01);
  EXPECT_NEAR(ar->coll.algbw_gbps, 6.558388, 1e-4);
  EXPECT_NEAR(ar->coll.busbw_gbps, 6.558388, 1e-4);  // 2(n-1)/n = 1 for n = 2
  const FunctionPattern* bc = FindPrefix(s, "ncclKernel_Broadcast_RING_LL", EventKind::kKernel);
  ASSERT_NE(bc, nullptr);
  EXPECT_EQ(bc->coll.op, "broadcast");
  EXPECT_EQ(bc->count, 6u);
  EXPECT_NEAR(bc->coll.msg_bytes, 106452.0, 1);

  const FunctionPattern* rpc = FindPrefix(s, "record_param_comms:all_reduce", EventKind::kCpuOp);
  ASSERT_NE(rpc, nullptr);
  EXPECT_EQ(rpc->fclass, FunctionClass::kCollective);
  EXPECT_EQ(FindPrefix(s, "ProfilerStep", EventKind::kUserAnnotation), nullptr);
  EXPECT_EQ(FindPrefix(s, "Optimizer.step#SGD.step", EventKind::kUserAnnotation)->fclass,
            FunctionClass::kOptimizer);

  // Sanity of the breakdown.
  // GPU time is the steps' GPU spans (first op to the next step's first op): close to the CPU
  // steps in a steady job. HTA (temporal breakdown, include_last_profiler_step=True, no ns
  // rounding) gives 38.552 ms of compute, 13.948 ms of other GPU work and 167.684 ms idle per
  // iteration.
  EXPECT_NEAR(s.gpu_busy_us + s.gpu_idle_us, s.MeanIterationMs() * 1000,
              0.02 * s.MeanIterationMs() * 1000);
  EXPECT_NEAR(s.compute_us, 115655.847 / 3, 0.01 * 115655.847 / 3);
  EXPECT_NEAR(s.gpu_busy_us - s.compute_us, 41844.167 / 3, 0.01 * 41844.167 / 3);
  EXPECT_NEAR(s.gpu_idle_us, 503050.991 / 3, 0.01 * 503050.991 / 3);
  EXPECT_LE(s.comm_compute_overlap_us, std::min(s.comm_us, s.compute_us));
  EXPECT_GE(s.cpu_critical_us, 0);

  const std::string bytes = SerializeSummary(s);
  EXPECT_LT(bytes.size(), 100u * 1024);
  StatusOr<RankSummary> back = ParseSummary(bytes, "nccl.summary");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->functions.size(), s.functions.size());
  EXPECT_EQ(SerializeSummary(*back), bytes);
}

TEST(TraceGoldenTest, ResnetRank0) {
  const std::string path = Shared("kineto/resnet_ns_rank-0.pt.trace.json.gz");
  SKIP_IF_MISSING(path);
  StatusOr<RankSummary> r = SummarizeTrace(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const RankSummary& s = *r;
  EXPECT_EQ(s.iteration_source, "ProfilerStep");
  // Steps 101 and 102 (35 and 72 ms) are warm-up; the job runs at 95.7 ms.
  EXPECT_THAT(s.iteration_steps, testing::ElementsAre(103, 104, 105));
  ASSERT_EQ(s.iteration_ms.size(), 3u);
  ASSERT_EQ(s.excluded_iterations.size(), 2u);
  EXPECT_EQ(s.excluded_iterations[0].reason, ExcludedIteration::kWarmup);
  EXPECT_EQ(s.excluded_iterations[0].step, 101);
  // Absolute microsecond timestamps near 1.7e15 keep only ~0.25 us in a double.
  EXPECT_NEAR(s.excluded_iterations[0].ms, 35.115869, 1e-3);
  EXPECT_NEAR(s.iteration_ms[2], 95.699037, 1e-3);
  // The GPU runs 89 ms past the last step's CPU end: that tail is the steps' own work (by
  // launch). HTA: 468.154 ms of compute over its 5 steps, 93.63 ms per step; every step
  // launches the same kernels, so the steady steps' mean is the same.
  EXPECT_NEAR(s.compute_us, 468153.602 / 5, 0.01 * 468153.602 / 5);
  EXPECT_EQ(s.pre_profiler_gpu_ops, 0u);
  EXPECT_DOUBLE_EQ(s.comm_us, 0);
  std::vector<const FunctionPattern*> k = Kernels(s);
  ASSERT_GE(k.size(), 2u);
  EXPECT_THAT(k[0]->name, testing::StartsWith("void cudnn::bn_bw_1C11_kernel_new<>("));
  EXPECT_EQ(k[0]->count, 220u);
  EXPECT_NEAR(k[0]->per_iter_us, 10833.375, 0.5);  // steps 103-105
  EXPECT_THAT(k[1]->name,
              testing::StartsWith("void at::native::vectorized_elementwise_kernel<>(int, "
                                  "at::native::CUDAFunctor_add<>"));
  EXPECT_EQ(k[1]->count, 160u);
  EXPECT_NEAR(k[1]->per_iter_us, 5260.795, 0.5);
  EXPECT_LT(SerializeSummary(s).size(), 100u * 1024);
}

TEST(TraceGoldenTest, EveryKinetoTraceSummarizes) {
  for (const char* rel :
       {"kineto/single_rank_triton.json.gz", "kineto/cpu_only_rank-34.pt.trace.json.gz",
        "kineto/job128_rank-0.json.gz", "kineto/alexnet_single.json.gz",
        "kineto/compare_pair/base.json.gz"}) {
    const std::string path = Shared(rel);
    if (!std::filesystem::exists(path)) continue;
    StatusOr<RankSummary> r = SummarizeTrace(path);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_FALSE(r->iteration_ms.empty()) << rel;
    for (const auto& f : r->functions) {
      EXPECT_GE(f.self_per_iter_us, 0) << rel << " " << f.name;
      EXPECT_LE(f.self_per_iter_us, f.per_iter_us + 1e-6) << rel << " " << f.name;
      EXPECT_LE(f.min_us, f.p50_us) << rel << " " << f.name;
      EXPECT_LE(f.p50_us, f.p99_us) << rel << " " << f.name;
      EXPECT_LE(f.p99_us, f.max_us) << rel << " " << f.name;
    }
  }
}

TEST(TraceGoldenTest, LegacyBufferEndToEnd) {
  // torch 1.x list-of-events, as export_chrome_trace writes it for CPU jobs.
  const std::string json = R"([
    {"name": "ProfilerStep#0", "ph": "X", "ts": 100, "dur": 100, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::empty", "ph": "X", "ts": 115, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::mm", "ph": "X", "ts": 110, "dur": 30, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "ProfilerStep#1", "ph": "X", "ts": 200, "dur": 100, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::mm", "ph": "X", "ts": 210, "dur": 50, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "gloo:all_reduce", "ph": "X", "ts": 220, "dur": 40, "tid": 2, "pid": "CPU functions", "args": {}},
    {"name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ph": "X", "ts": 50, "dur": 40, "tid": 1, "pid": "CPU functions", "args": {}}
  ])";
  Summarizer s;
  StatusOr<trace::ReadStats> st = trace::ReadTraceBuffer(json, "legacy_rank1.json", &s);
  ASSERT_TRUE(st.ok()) << st.status().message();
  s.OnEnd(*st);
  RankSummary r = s.Finish();
  EXPECT_TRUE(r.legacy_format);
  EXPECT_EQ(r.iteration_source, "ProfilerStep");
  EXPECT_THAT(r.iteration_ms, testing::ElementsAre(0.1, 0.1));
  EXPECT_EQ(r.events_outside_iterations, 1u);  // the DataLoader call before step 0
  EXPECT_FALSE(r.has_gpu);
  const FunctionPattern* mm = FindPrefix(r, "aten::mm", EventKind::kCpuOp);
  ASSERT_NE(mm, nullptr);
  EXPECT_DOUBLE_EQ(mm->per_iter_us, 40);
  EXPECT_DOUBLE_EQ(mm->self_per_iter_us, (25 + 50) / 2.0);
  EXPECT_TRUE(mm->main_thread);
  const FunctionPattern* gloo = nullptr;
  for (const auto& f : r.functions) {
    if (f.name == "gloo:all_reduce") gloo = &f;
  }
  ASSERT_NE(gloo, nullptr);
  EXPECT_EQ(gloo->fclass, FunctionClass::kCollective);
  EXPECT_EQ(gloo->coll.op, "all_reduce");
  EXPECT_FALSE(gloo->main_thread);
}

}  // namespace
}  // namespace perftracker::pattern
