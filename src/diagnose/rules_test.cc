// Each expected-pattern rule alone (rules.h): a small job where it fires and one where it does
// not. FindAllRankProblems' order and the GPU idle the earlier rules explain are tested last.
#include "diagnose/rules.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/problem_finders.h"
#include "diagnose/rank_info.h"
#include "diagnose/testing.h"

namespace perftracker::diagnose::internal::rules {
namespace {

using trace::EventKind;

constexpr int kRanks = 4;
constexpr double kIterMs = 100;

// kRanks ranks of a kIterMs step: 60 ms of compute plus what EXTRA(rank) adds; GPU_IDLE_MS > 0
// marks them as GPU ranks with that much idle time.
struct JobBuilder {
  std::function<std::vector<FunctionPattern>(int rank)> extra = [](int) {
    return std::vector<FunctionPattern>{};
  };
  double gpu_idle_ms = -1;
  std::function<void(int rank, RankSummary*)> adjust = [](int, RankSummary*) {};

  pattern::CompactJob Build() const {
    pattern::CompactJob cj;
    for (int r = 0; r < kRanks; ++r) {
      std::vector<FunctionPattern> fns = {
          Fn("aten::mm", FunctionClass::kCompute, 60, 8, EventKind::kCpuOp)};
      for (auto& f : extra(r)) fns.push_back(std::move(f));
      RankSummary rs = Rank(r, kRanks, std::move(fns), kIterMs, "node0");
      if (gpu_idle_ms >= 0) {
        rs.has_gpu = true;
        rs.gpu_idle_us = gpu_idle_ms * 1000;
        rs.gpu_busy_us = (kIterMs - gpu_idle_ms) * 1000;
      }
      adjust(r, &rs);
      cj.Add(std::move(rs));
    }
    cj.SortByRank();
    return cj;
  }
};

// What FindAllRankProblems hands the rules.
double IterUs(const pattern::CompactJob& cj) {
  return BuildJobInfo(Pointers(cj.ranks())).iteration_ms_median * 1000.0;
}

const DiagnoseOptions kOptions;

std::optional<Fired> RunRule(const pattern::CompactJob& cj,
                             std::optional<Fired> (*rule)(const RuleInput&)) {
  return rule(RuleInput{cj, kOptions, IterUs(cj)});
}

TEST(DataLoaderRuleTest, FiresWhenMostRanksWaitForBatches) {
  JobBuilder b;
  b.extra = [](int) {
    return std::vector<FunctionPattern>{
        Fn("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
           FunctionClass::kDataLoader, 30, 1, EventKind::kUserAnnotation)};
  };
  pattern::CompactJob cj = b.Build();
  std::optional<Fired> fired = RunRule(cj, DataLoaderRule);
  ASSERT_TRUE(fired.has_value());
  const Finding& f = fired->finding;
  EXPECT_EQ(f.category, Category::kDataLoader);
  EXPECT_EQ(f.cause, Cause::kSoftware);
  EXPECT_EQ(f.finding_class, FindingClass::kAll);
  EXPECT_EQ(f.ranks, (std::vector<int>{0, 1, 2, 3}));
  // 30 ms less the 1% a healthy loader costs.
  EXPECT_NEAR(fired->impact_us, 29000, 1e-6);
  EXPECT_NEAR(f.impact_ms, 29, 1e-9);
  ASSERT_FALSE(f.functions.empty());
  EXPECT_EQ(f.functions[0].name, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
  EXPECT_NE(f.summary.find("all 4 ranks"), std::string::npos) << f.summary;
}

TEST(DataLoaderRuleTest, QuietForAFastLoaderOrASlowOneOnFewRanks) {
  auto loader = [](double ms) {
    return Fn("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
              FunctionClass::kDataLoader, ms, 1, EventKind::kUserAnnotation);
  };
  JobBuilder fast;
  fast.extra = [&](int) { return std::vector<FunctionPattern>{loader(2)}; };
  EXPECT_FALSE(RunRule(fast.Build(), DataLoaderRule).has_value());
  // Half of the ranks is not most: a subset problem, for the peer comparison.
  JobBuilder half;
  half.extra = [&](int r) { return std::vector<FunctionPattern>{loader(r < 2 ? 30 : 2)}; };
  EXPECT_FALSE(RunRule(half.Build(), DataLoaderRule).has_value());
}

FunctionPattern Sync(double ms) {
  return Fn("cudaDeviceSynchronize", FunctionClass::kSync, ms, 1, EventKind::kCudaRuntime);
}

TEST(SyncRuleTest, FiresAndCostsOnlyTheGpuIdleItCauses) {
  JobBuilder b;
  b.extra = [](int) { return std::vector<FunctionPattern>{Sync(12)}; };
  b.gpu_idle_ms = 8;
  std::optional<Fired> fired = RunRule(b.Build(), SyncRule);
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(fired->finding.category, Category::kSync);
  EXPECT_EQ(fired->finding.cause, Cause::kSoftware);
  EXPECT_NEAR(fired->impact_us, 8000, 1e-6);
  ASSERT_FALSE(fired->finding.functions.empty());
  EXPECT_EQ(fired->finding.functions[0].name, "cudaDeviceSynchronize");
}

TEST(SyncRuleTest, QuietUnderItsShareOfTheStep) {
  JobBuilder b;
  b.extra = [](int) { return std::vector<FunctionPattern>{Sync(1)}; };
  EXPECT_FALSE(RunRule(b.Build(), SyncRule).has_value());
}

TEST(PageableCopyRuleTest, FiresOnCopiesFromPageableMemory) {
  JobBuilder b;
  b.extra = [](int) {
    return std::vector<FunctionPattern>{
        Fn("Memcpy HtoD (Pageable -> Device)", FunctionClass::kMemcpy, 10, 4, EventKind::kMemcpy)};
  };
  std::optional<Fired> fired = RunRule(b.Build(), PageableCopyRule);
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(fired->finding.category, Category::kMemcpy);
  EXPECT_EQ(fired->finding.cause, Cause::kConfiguration);
  EXPECT_NEAR(fired->impact_us, 10000, 1e-6);
}

TEST(PageableCopyRuleTest, QuietForPinnedCopies) {
  JobBuilder b;
  b.extra = [](int) {
    return std::vector<FunctionPattern>{
        Fn("Memcpy HtoD (Pinned -> Device)", FunctionClass::kMemcpy, 10, 4, EventKind::kMemcpy)};
  };
  EXPECT_FALSE(RunRule(b.Build(), PageableCopyRule).has_value());
}

// TINY_CALLS kernels of 2 us, with no launch call measured: issuing one costs the assumed launch
// and dispatch (10 us), so the GPU idles 8 us after each.
JobBuilder TinyKernels(double tiny_calls, double idle_ms) {
  JobBuilder b;
  b.extra = [tiny_calls](int) {
    return std::vector<FunctionPattern>{Fn("fill_kernel", FunctionClass::kCompute,
                                           tiny_calls * 0.002, tiny_calls, EventKind::kKernel)};
  };
  b.gpu_idle_ms = idle_ms;
  return b;
}

TEST(LaunchBoundRuleTest, FiresOnManyTinyKernelsBoundedByTheIdleTime) {
  std::optional<Fired> fired = RunRule(TinyKernels(2000, 30).Build(), LaunchBoundRule);
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(fired->finding.category, Category::kLaunchBound);
  EXPECT_NEAR(fired->impact_us, 2000 * 8, 1e-3);
  EXPECT_NEAR(fired->finding.evidence.at("tiny_kernel_calls_per_iter"), 2000, 1e-6);
  std::optional<Fired> capped = RunRule(TinyKernels(2000, 10).Build(), LaunchBoundRule);
  ASSERT_TRUE(capped.has_value());
  EXPECT_NEAR(capped->impact_us, 10000, 1e-3);
}

TEST(LaunchBoundRuleTest, QuietForFewTinyKernelsOrABusyGpu) {
  EXPECT_FALSE(RunRule(TinyKernels(50, 30).Build(), LaunchBoundRule).has_value());
  EXPECT_FALSE(RunRule(TinyKernels(2000, 0).Build(), LaunchBoundRule).has_value());
}

TEST(GpuIdleRuleTest, FiresOnIdleNotExplainedByTheRulesBefore) {
  pattern::CompactJob cj = JobBuilder{.gpu_idle_ms = 30}.Build();
  const RuleInput in{cj, kOptions, IterUs(cj)};
  std::optional<Fired> fired = GpuIdleRule(in, 0);
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(fired->finding.category, Category::kGpuIdle);
  EXPECT_NEAR(fired->impact_us, 30000, 1e-6);
  EXPECT_EQ(fired->finding.evidence_text.at("suspects"), "aten::mm");
  std::optional<Fired> rest = GpuIdleRule(in, 12000);
  ASSERT_TRUE(rest.has_value());
  EXPECT_NEAR(rest->impact_us, 18000, 1e-6);
  // Explained almost entirely: under --min-impact.
  EXPECT_FALSE(GpuIdleRule(in, 28000).has_value());
}

TEST(GpuIdleRuleTest, QuietForABusyGpuOrNoGpu) {
  pattern::CompactJob busy = JobBuilder{.gpu_idle_ms = 5}.Build();
  EXPECT_FALSE(GpuIdleRule(RuleInput{busy, kOptions, IterUs(busy)}, 0).has_value());
  pattern::CompactJob cpu = JobBuilder{}.Build();
  EXPECT_FALSE(GpuIdleRule(RuleInput{cpu, kOptions, IterUs(cpu)}, 0).has_value());
}

// An all-reduce of 64 MiB at BUSBW_GBPS(rank) GB/s bus bandwidth, in group "dp:0".
JobBuilder AllReduce(std::function<double(int)> busbw_gbps) {
  JobBuilder b;
  b.extra = [busbw_gbps](int r) {
    FunctionPattern f =
        Fn("ncclDevKernel_AllReduce", FunctionClass::kCollective, 20, 1, EventKind::kKernel);
    f.coll.op = "all_reduce";
    f.coll.group = "dp:0";
    f.coll.msg_bytes = 64 << 20;
    f.coll.busbw_gbps = busbw_gbps(r);
    f.cv = 0.1;
    return std::vector<FunctionPattern>{f};
  };
  return b;
}

TEST(LowBandwidthRuleTest, FiresWhenEveryRankIsFarBelowTheExpectedBandwidth) {
  std::optional<Fired> fired = RunRule(AllReduce([](int) { return 5; }).Build(), LowBandwidthRule);
  ASSERT_TRUE(fired.has_value());
  EXPECT_EQ(fired->finding.category, Category::kLowBandwidth);
  EXPECT_EQ(fired->finding.cause, Cause::kHardware);
  // 20 ms at a tenth of the expected 50 GB/s: 90% of it is lost.
  EXPECT_NEAR(fired->impact_us, 18000, 1e-3);
  EXPECT_NEAR(fired->finding.evidence.at("busbw_gbps"), 5, 1e-6);
}

TEST(LowBandwidthRuleTest, QuietWhenOneRankIsFastOrTheGroupSpansHosts) {
  // A rank at full speed: the others were waiting, not capped.
  EXPECT_FALSE(
      RunRule(AllReduce([](int r) { return r == 0 ? 45.0 : 5.0; }).Build(), LowBandwidthRule)
          .has_value());
  // A group across hosts runs at network speed and is not judged by the NVLink-scale number.
  JobBuilder cross = AllReduce([](int) { return 5; });
  cross.adjust = [](int r, RankSummary* rs) {
    rs->host = "node" + std::to_string(r % 2);
    trace::ProcessGroup pg;
    pg.name = "dp";
    pg.desc = "dp:0";
    pg.ranks = {0, 1, 2, 3};
    pg.size = 4;
    rs->process_groups.push_back(pg);
  };
  EXPECT_FALSE(RunRule(cross.Build(), LowBandwidthRule).has_value());
}

TEST(FindAllRankProblemsTest, GpuIdleIsWhatTheEarlierRulesLeaveUnexplained) {
  JobBuilder b;
  b.extra = [](int) { return std::vector<FunctionPattern>{Sync(12)}; };
  b.gpu_idle_ms = 30;
  pattern::CompactJob cj = b.Build();
  std::vector<Finding> out;
  FindAllRankProblems(cj, BuildJobInfo(Pointers(cj.ranks())), kOptions, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].category, Category::kSync);
  EXPECT_NEAR(out[0].impact_ms, 12, 1e-9);
  EXPECT_EQ(out[1].category, Category::kGpuIdle);
  EXPECT_NEAR(out[1].impact_ms, 18, 1e-9);
}

}  // namespace
}  // namespace perftracker::diagnose::internal::rules
