// Unit tests of the simulator's workload table: which functions each pipeline stage runs, how
// often, and the collectives each layout has.
#include "sim/workload.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sim/timing.h"

namespace perftracker::sim {
namespace {

Config Job(Layout layout, int layers = 2, std::vector<FaultKind> all_rank_faults = {}) {
  Config c;
  c.layout = layout;
  c.workers = layout.tp * layout.pp * layout.dp;
  c.layers = layers;
  for (FaultKind k : all_rank_faults) {
    Fault f;
    f.kind = k;
    c.faults.push_back(f);
  }
  return c;
}

const Spec* Find(const std::vector<Spec>& specs, std::string_view prefix) {
  for (const Spec& s : specs) {
    if (s.raw.substr(0, prefix.size()) == prefix) return &s;
  }
  return nullptr;
}

int Calls(const std::vector<Spec>& specs, std::string_view prefix) {
  const Spec* s = Find(specs, prefix);
  return s ? s->calls : -1;
}

constexpr int kM = kMicrobatches;

TEST(StageSpecs, FunctionsPerStage) {
  // Per stage: 3 step functions, 21 a layer (layer, 8 submodules, 12 CPU ops), 7 autograd
  // ops, 14 kernels, 5 runtime and optimizer calls, 4 collectives (tp, pp, dp x 2); the first
  // stage 8 more (loader, embedding), the last 5 (loss).
  Config c = Job({.tp = 2, .pp = 3, .dp = 2}, 2);
  EXPECT_EQ(StageSpecs(c, 0).size(), 3u + 8 + 2 * 21 + 7 + 14 + 5 + 4);
  EXPECT_EQ(StageSpecs(c, 1).size(), 3u + 2 * 21 + 7 + 14 + 5 + 4);
  EXPECT_EQ(StageSpecs(c, 2).size(), 3u + 2 * 21 + 7 + 14 + 5 + 5 + 4);
}

TEST(StageSpecs, DataLoaderFirstLossLast) {
  Config c = Job({.tp = 2, .pp = 3, .dp = 2});
  const std::string loader = "enumerate(DataLoader)";
  const std::string loss = "nn.Module: ParallelLMHead_0";
  EXPECT_NE(Find(StageSpecs(c, 0), loader), nullptr);
  EXPECT_EQ(Find(StageSpecs(c, 0), loss), nullptr);
  EXPECT_EQ(Find(StageSpecs(c, 1), loader), nullptr);
  EXPECT_EQ(Find(StageSpecs(c, 1), loss), nullptr);
  EXPECT_EQ(Find(StageSpecs(c, 2), loader), nullptr);
  EXPECT_NE(Find(StageSpecs(c, 2), loss), nullptr);
  EXPECT_EQ(Find(StageSpecs(c, 0), loader)->role, Role::kLoader);
  // One pipeline stage is both.
  Config one = Job({.tp = 2, .pp = 1, .dp = 2});
  EXPECT_NE(Find(StageSpecs(one, 0), loader), nullptr);
  EXPECT_NE(Find(StageSpecs(one, 0), loss), nullptr);
}

TEST(StageSpecs, LayersAreNumberedAcrossStages) {
  Config c = Job({.tp = 1, .pp = 2, .dp = 1}, 3);
  std::vector<Spec> s1 = StageSpecs(c, 1);
  for (const char* want :
       {"nn.Module: ParallelTransformerLayer_3", "nn.Module: ParallelTransformerLayer_5",
        "nn.Module: RowParallelLinear_11"}) {
    EXPECT_NE(Find(s1, want), nullptr) << want;
  }
  EXPECT_EQ(Find(s1, "nn.Module: ParallelTransformerLayer_2"), nullptr);
  const Spec* qkv = nullptr;
  for (const Spec& s : s1) {
    if (s.raw == "aten::linear" && s.stack.find("ColumnParallelLinear_6") != std::string::npos) {
      qkv = &s;
    }
  }
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->stack,
            "train.py(241): <module>;train.py(120): train_step;"
            "megatron/core/pipeline_parallel/schedules.py(196): forward_step;"
            "nn.Module: ParallelTransformerLayer_3;nn.Module: ParallelAttention_3;"
            "nn.Module: ColumnParallelLinear_6");
  EXPECT_EQ(qkv->calls, kM);
  EXPECT_EQ(Find(s1, "nn.Module: SwitchMLP_3"), nullptr);
  Config moe = Job({.tp = 1, .pp = 1, .dp = 4, .ep = 2}, 1);
  EXPECT_NE(Find(StageSpecs(moe, 0), "nn.Module: SwitchMLP_0"), nullptr);
}

TEST(StageSpecs, CallCounts) {
  const int layers = 3, per = layers * kM;
  Config c = Job({.tp = 4, .pp = 3, .dp = 2}, layers);
  std::vector<Spec> first = StageSpecs(c, 0), mid = StageSpecs(c, 1), last = StageSpecs(c, 2);
  const char* gemm_tn = "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn";
  EXPECT_EQ(Calls(mid, gemm_tn), per * 3);
  EXPECT_EQ(Calls(last, gemm_tn), per * 3 + kM);
  EXPECT_EQ(Calls(mid, "autograd::engine::evaluate_function: MmBackward0"), per * 4);
  EXPECT_EQ(Calls(mid, "cudaStreamWaitEvent"), per * 2 + 8);
  const char* ar = "ncclDevKernel_AllReduce";
  EXPECT_EQ(Calls(first, ar), per * 4 + 2 * kM);
  EXPECT_EQ(Calls(mid, ar), per * 4);
  EXPECT_EQ(Calls(last, ar), per * 4 + 3 * kM);
  // Send/recv with each pipeline neighbour.
  EXPECT_EQ(Calls(first, "ncclDevKernel_SendRecv"), 2 * kM);
  EXPECT_EQ(Calls(mid, "ncclDevKernel_SendRecv"), 4 * kM);
  EXPECT_EQ(Calls(last, "ncclDevKernel_SendRecv"), 2 * kM);
  EXPECT_EQ(Calls(mid, "ncclDevKernel_ReduceScatter"), kDpBuckets);
  EXPECT_EQ(Calls(mid, "ncclDevKernel_AllGather"), kDpBuckets);
}

// One cudaLaunchKernel per compute kernel, except the first stage's two embedding kernels.
TEST(StageSpecs, LaunchesCountTheKernels) {
  Config c = Job({.tp = 2, .pp = 2, .dp = 2}, 2, {FaultKind::kTinyKernels, FaultKind::kSync});
  for (int stage : {0, 1}) {
    std::vector<Spec> specs = StageSpecs(c, stage);
    int kernels = 0;
    for (const Spec& s : specs) {
      if (s.kind == trace::EventKind::kKernel && !IsCollective(s.role)) kernels += s.calls;
    }
    const int embedding = stage == 0 ? 2 * kM : 0;
    EXPECT_EQ(Calls(specs, "cudaLaunchKernel"), kernels - embedding) << stage;
  }
}

TEST(StageSpecs, AllRankFaultsAddTheirFunctions) {
  Config clean = Job({.tp = 2, .pp = 1, .dp = 2});
  Config faulty = Job({.tp = 2, .pp = 1, .dp = 2}, 2, {FaultKind::kTinyKernels, FaultKind::kSync});
  EXPECT_EQ(Find(StageSpecs(clean, 0), "aten::fill_"), nullptr);
  EXPECT_EQ(Find(StageSpecs(clean, 0), "cudaDeviceSynchronize"), nullptr);
  std::vector<Spec> s = StageSpecs(faulty, 0);
  EXPECT_EQ(Calls(s, "aten::fill_"), kTinyKernels);
  EXPECT_EQ(Calls(s, "cudaDeviceSynchronize"), kSyncCalls);
  EXPECT_EQ(Find(s, "cudaDeviceSynchronize")->role, Role::kSync);
  EXPECT_EQ(Find(s, "aten::item")->role, Role::kSync);
  EXPECT_EQ(StageSpecs(faulty, 0).size(), StageSpecs(clean, 0).size() + 5);
}

TEST(StageSpecs, CollectivesOnlyForGroupsThatExist) {
  auto ops = [](const Config& c, int stage) {
    std::multiset<std::string> out;
    for (const Spec& s : StageSpecs(c, stage)) {
      if (IsCollective(s.role)) out.insert(s.op);
    }
    return out;
  };
  EXPECT_TRUE(ops(Job({.tp = 1, .pp = 1, .dp = 1}), 0).empty());
  EXPECT_EQ(ops(Job({.tp = 2, .pp = 1, .dp = 1}), 0), std::multiset<std::string>{"all_reduce"});
  EXPECT_EQ(ops(Job({.tp = 1, .pp = 2, .dp = 1}), 1), std::multiset<std::string>{"send_recv"});
  EXPECT_EQ(ops(Job({.tp = 1, .pp = 1, .dp = 2}), 0),
            (std::multiset<std::string>{"all_gather", "reduce_scatter"}));
  EXPECT_EQ(ops(Job({.tp = 1, .pp = 1, .dp = 2, .ep = 2}), 0),
            (std::multiset<std::string>{"all_gather", "all_to_all", "reduce_scatter"}));
}

// The collective class, the roles and the groups agree, and every collective spans at least
// two ranks: the cases where pattern::BusFactor reports algbw (n <= 0, broadcast, other ops)
// never arise in a simulated job.
TEST(StageSpecs, CollectivesHaveGroupsOfTwoOrMore) {
  const std::set<std::string> ops = {"all_reduce", "send_recv", "reduce_scatter", "all_gather",
                                     "all_to_all"};
  for (Layout l : {Layout{.tp = 2, .pp = 2, .dp = 2, .ep = 2}, Layout{.tp = 8, .pp = 4, .dp = 4},
                   Layout{.tp = 1, .pp = 2, .dp = 2}, Layout{.tp = 2, .pp = 1, .dp = 1}}) {
    Config c = Job(l);
    for (int stage = 0; stage < l.pp; ++stage) {
      for (const Spec& s : StageSpecs(c, stage)) {
        EXPECT_EQ(s.fclass == pattern::FunctionClass::kCollective, IsCollective(s.role)) << s.raw;
        if (!IsCollective(s.role)) continue;
        EXPECT_EQ(ops.count(s.op), 1u) << s.op;
        EXPECT_GE(CollectiveGroupSize(l, s.role), 2) << s.raw;
        EXPECT_NE(std::string(GroupName(s.role)), "");
        EXPECT_TRUE(s.gpu);
      }
    }
  }
}

}  // namespace
}  // namespace perftracker::sim
