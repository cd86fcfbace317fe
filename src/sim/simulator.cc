// The simulator: job layout, topology, per-stage function sets, timing model, faults, output.
//
// Timing model (per iteration, microseconds). Each rank has its own work ("own"): compute
// kernels, its collectives' transfer time (message size over the slowest link its group uses)
// and CPU-side stalls that leave the GPU idle (data loader, GC, CPU contention, syncs). Training
// is synchronous, so every rank finishes an iteration at the same time T; the difference is
// spent waiting inside collectives for the group's slowest member. Waits are attributed in the
// order groups synchronize: first the TP group (a TP peer of a slow GPU waits in its TP
// all-reduce), then the PP group (send/recv), then DP (reduce-scatter / all-gather), so a slow
// rank has short collectives and its peers long ones. A slow link instead lengthens the
// transfer of every member of every group that crosses it.
#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "base/json_writer.h"
#include "pattern/names.h"
#include "pattern/summarizer.h"
#include "pattern/summary_io.h"

namespace perftracker::sim {

namespace fs = std::filesystem;
using pattern::FunctionClass;
using trace::EventKind;

namespace {

// Model constants. Chosen to look like a mid-size GPT on H100s: a few hundred ms per iteration,
// compute-dominated, with NVLink ~8x faster than the NIC.
constexpr int kMicrobatches = 4;
constexpr double kNvlinkGBps = 200;  // bus bandwidth inside a node
constexpr double kNicGBps = 25;      // 200 Gb/s per GPU across nodes
constexpr double kTpMsgBytes = 16.0 * (1 << 20);
constexpr double kPpMsgBytes = 16.0 * (1 << 20);
constexpr double kDpMsgBytes = 64.0 * (1 << 20);
constexpr int kDpBuckets = 4;
constexpr double kEpMsgBytes = 2.0 * (1 << 20);
constexpr double kRankNoise = 0.025;  // lognormal sigma of a function's mean on one rank
constexpr double kIterJitter = 0.012;

// Fault magnitudes.
constexpr double kSlowGpuFactor = 1.4;
constexpr double kSlowNvlinkFactor = 4;
constexpr double kSlowNicFactor = 4;
constexpr double kSlowSwitchFactor = 3;
constexpr double kSlowLoaderUs = 80000;
constexpr double kCpuContentionFactor = 2.5;
constexpr double kCpuContentionStall = 0.2;  // GPU idle added, as a share of compute
constexpr double kGcUs = 60000;
constexpr int kTinyKernels = 3000;
constexpr double kTinyKernelUs = 2;  // GPU time of one tiny kernel
constexpr double kTinyFillUs = 9;    // CPU time of the aten::fill_ that issues it
constexpr double kLaunchUs = 6;      // CPU time of one cudaLaunchKernel
constexpr int kSyncCalls = 16;
constexpr double kSyncIdleUs = 1500;  // GPU idle each sync leaves behind

enum class Role : uint8_t {
  kComputeKernel,
  kMemcpy,
  kCollTp,
  kCollPp,
  kCollDp,
  kCollEp,
  kCpuOp,
  kLaunch,
  kPython,
  kTrainStep,
  kLoader,
  kOptimizer,
  kGc,
  kSync,
  kTinyKernel,
};

struct Spec {
  std::string raw;   // as a trace would spell it
  std::string name;  // normalized, as the summarizer would
  EventKind kind = EventKind::kCpuOp;
  FunctionClass fclass = FunctionClass::kOther;
  Role role = Role::kCpuOp;
  std::string stack;
  int stream = -1;
  bool gpu = false;
  double base_us = 0;  // per call, before noise and faults
  int calls = 0;       // per iteration
  double self_frac = 1;
  // Collectives.
  std::string op;
  double msg_bytes = 0;
};

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

Spec MakeSpec(std::string raw, EventKind kind, Role role, double base_us, int calls,
              std::string stack = "") {
  Spec s;
  s.raw = std::move(raw);
  s.kind = kind;
  s.name = pattern::NormalizeName(s.raw, kind);
  s.fclass = pattern::ClassifyFunction(kind, s.raw);
  s.role = role;
  s.stack = std::move(stack);
  s.gpu = kind == EventKind::kKernel || kind == EventKind::kMemcpy;
  s.stream = s.gpu ? 7 : -1;
  s.base_us = base_us;
  s.calls = calls;
  return s;
}

const char* kGemmTn = "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn";
const char* kGemmSmall = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn";
const char* kGemmNn = "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn";
const char* kGemmNt = "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nt";
const char* kFlashFwd =
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, true, true, false>(Flash_fwd_params)";
const char* kFlashBwd =
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, "
    "2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, "
    "cutlass::bfloat16_t> >, true, false, false, false, true>(Flash_bwd_params)";
const char* kLayerNorm =
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
    "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
    "float*, float*, c10::BFloat16*)";
const char* kLayerNormGrad =
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<c10::BFloat16, "
    "float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
    "c10::BFloat16 const*, c10::BFloat16*, int)";
const char* kGelu =
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, "
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)";
const char* kGeluBwd =
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, "
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3>)";
const char* kAdd =
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, "
    "at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)";
const char* kMul =
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)";
const char* kDropout =
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, "
    "unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
    "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
    "at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, "
    "at::PhiloxCudaState)";
const char* kTiny =
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)";

// The function set of one pipeline stage (ranks of a stage share it; TP ranks run the same
// kernels). Faults that hit every rank (tiny kernels, syncs) are part of the set.
std::vector<Spec> StageSpecs(const Config& cfg, int stage) {
  const Layout& l = cfg.layout;
  const bool first = stage == 0, last = stage == l.pp - 1;
  const int m = kMicrobatches;
  const int per = cfg.layers * m;  // per-layer kernels per iteration
  bool tiny = false, sync = false;
  for (const Fault& f : cfg.faults) {
    tiny |= f.kind == FaultKind::kTinyKernels;
    sync |= f.kind == FaultKind::kSync;
  }
  std::vector<Spec> s;
  const std::string top = "train.py(241): <module>;train.py(120): train_step";
  const std::string fwd = top + ";megatron/core/pipeline_parallel/schedules.py(196): forward_step";
  const std::string bwd = top + ";megatron/core/pipeline_parallel/schedules.py(302): backward_step";

  // Python and the main loop.
  Spec step = MakeSpec("train.py(120): train_step", EventKind::kPythonFunction, Role::kTrainStep, 0,
                       1, "train.py(241): <module>");
  step.self_frac = 0.01;
  s.push_back(step);
  Spec fs_ = MakeSpec("megatron/core/pipeline_parallel/schedules.py(196): forward_step",
                      EventKind::kPythonFunction, Role::kPython, 900, m, top);
  fs_.self_frac = 0.05;
  s.push_back(fs_);
  Spec bs = MakeSpec("megatron/core/pipeline_parallel/schedules.py(302): backward_step",
                     EventKind::kPythonFunction, Role::kPython, 700, m, top);
  bs.self_frac = 0.05;
  s.push_back(bs);
  if (first) {
    Spec dl = MakeSpec("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                       EventKind::kUserAnnotation, Role::kLoader, 2500, 1, top);
    s.push_back(dl);
    s.push_back(MakeSpec("nn.Module: VocabParallelEmbedding_0", EventKind::kPythonFunction,
                         Role::kPython, 60, m, fwd));
    s.push_back(MakeSpec("aten::embedding", EventKind::kCpuOp, Role::kCpuOp, 35, m,
                         fwd + ";nn.Module: VocabParallelEmbedding_0"));
    s.push_back(
        MakeSpec("void at::native::(anonymous namespace)::indexSelectLargeIndex<"
                 "c10::BFloat16, long, unsigned int, 2, 2, -2, true>("
                 "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
                 "at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
                 "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, "
                 "unsigned int, unsigned int, long)",
                 EventKind::kKernel, Role::kComputeKernel, 150, m));
    s.push_back(
        MakeSpec("void at::native::(anonymous namespace)::embedding_backward_feature_"
                 "kernel<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, "
                 "c10::BFloat16*, int, long, int)",
                 EventKind::kKernel, Role::kComputeKernel, 400, m));
    s.push_back(
        MakeSpec("Memcpy HtoD (Pinned -> Device)", EventKind::kMemcpy, Role::kMemcpy, 90, 2));
    s.push_back(MakeSpec("aten::to", EventKind::kCpuOp, Role::kCpuOp, 40, 2, top));
    s.push_back(MakeSpec("cudaMemcpyAsync", EventKind::kCudaRuntime, Role::kLaunch, 12, 2));
  }
  // Per-layer Python modules and CPU ops: distinct per layer through their stacks, so stages
  // differ by their layer numbers.
  for (int i = 0; i < cfg.layers; ++i) {
    const int k = stage * cfg.layers + i;
    const std::string layer = fmt::format("nn.Module: ParallelTransformerLayer_{}", k);
    const std::string ls = fwd + ";" + layer;
    const std::string attn = fmt::format("nn.Module: ParallelAttention_{}", k);
    const std::string mlp = l.ep > 1 ? fmt::format("nn.Module: SwitchMLP_{}", k)
                                     : fmt::format("nn.Module: ParallelMLP_{}", k);
    const std::string ln1 = fmt::format("nn.Module: FusedLayerNorm_{}", 2 * k);
    const std::string ln2 = fmt::format("nn.Module: FusedLayerNorm_{}", 2 * k + 1);
    const std::string qkv = fmt::format("nn.Module: ColumnParallelLinear_{}", 2 * k);
    const std::string proj = fmt::format("nn.Module: RowParallelLinear_{}", 2 * k);
    const std::string fc1 = fmt::format("nn.Module: ColumnParallelLinear_{}", 2 * k + 1);
    const std::string fc2 = fmt::format("nn.Module: RowParallelLinear_{}", 2 * k + 1);
    Spec ly = MakeSpec(layer, EventKind::kPythonFunction, Role::kPython, 620, m, fwd);
    ly.self_frac = 0.06;
    s.push_back(ly);
    for (const auto& [mod, parent, us] :
         std::vector<std::tuple<std::string, std::string, double>>{{attn, layer, 260},
                                                                   {mlp, layer, 210},
                                                                   {ln1, layer, 40},
                                                                   {ln2, layer, 40},
                                                                   {qkv, attn, 70},
                                                                   {proj, attn, 70},
                                                                   {fc1, mlp, 70},
                                                                   {fc2, mlp, 70}}) {
      std::string st = parent == layer ? ls : ls + ";" + parent;
      Spec p = MakeSpec(mod, EventKind::kPythonFunction, Role::kPython, us, m, st);
      p.self_frac = 0.15;
      s.push_back(p);
    }
    auto op = [&](const char* name, const std::string& where, double us) {
      s.push_back(MakeSpec(name, EventKind::kCpuOp, Role::kCpuOp, us, m, where));
    };
    op("aten::layer_norm", ls + ";" + ln1, 30);
    op("aten::layer_norm", ls + ";" + ln2, 30);
    op("aten::linear", ls + ";" + attn + ";" + qkv, 45);
    op("aten::linear", ls + ";" + attn + ";" + proj, 45);
    op("aten::_scaled_dot_product_flash_attention", ls + ";" + attn, 60);
    op("aten::add", ls, 15);
    op("aten::dropout", ls + ";" + attn, 25);
    op("aten::linear", ls + ";" + mlp + ";" + fc1, 45);
    op("aten::gelu", ls + ";" + mlp, 20);
    op("aten::linear", ls + ";" + mlp + ";" + fc2, 45);
    op("aten::copy_", ls + ";" + attn, 18);
    op("aten::view", ls + ";" + attn, 4);
  }
  // Backward CPU ops run on the autograd thread: no Python stack, one function per op.
  for (const auto& [name, us, n] : std::vector<std::tuple<const char*, double, int>>{
           {"autograd::engine::evaluate_function: MmBackward0", 70, 4},
           {"autograd::engine::evaluate_function: NativeLayerNormBackward0", 40, 2},
           {"autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", 80, 1},
           {"autograd::engine::evaluate_function: GeluBackward0", 30, 1},
           {"autograd::engine::evaluate_function: AddBackward0", 12, 2},
           {"autograd::engine::evaluate_function: NativeDropoutBackward0", 20, 1},
           {"autograd::engine::evaluate_function: ViewBackward0", 8, 3}}) {
    Spec b = MakeSpec(name, EventKind::kCpuOp, Role::kCpuOp, us, per * n);
    b.stack = "";
    s.push_back(b);
  }
  // GPU kernels: one function per kernel name (kernels carry no stack).
  int kernels = 0;
  auto kernel = [&](const char* name, double us, int calls) {
    s.push_back(MakeSpec(name, EventKind::kKernel, Role::kComputeKernel, us, calls));
    kernels += calls;
  };
  kernel(kGemmTn, 180, per * 3 + (last ? m : 0));
  kernel(kGemmSmall, 90, per);
  kernel(kFlashFwd, 220, per);
  kernel(kLayerNorm, 25, per * 2);
  kernel(kGelu, 40, per);
  kernel(kAdd, 15, per * 2);
  kernel(kDropout, 20, per);
  kernel(kGemmNn, 180, per * 4 + (last ? m : 0));
  kernel(kGemmNt, 170, per * 4 + (last ? m : 0));
  kernel(kFlashBwd, 500, per);
  kernel(kLayerNormGrad, 45, per * 2);
  kernel(kGeluBwd, 60, per);
  kernel(kMul, 15, per * 2);
  kernel(
      "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<c10::BFloat16, float, "
      "int>, float, float, float, float, float, float, adamMode_t, float>(long, int volatile*, "
      "TensorListMetadata<4>&, AdamFunctor<c10::BFloat16, float, int>, float, float, float, "
      "float, float, float, adamMode_t, float)",
      60, 40);
  if (last) {
    const std::string head = fwd + ";nn.Module: GPTModel_0";
    s.push_back(MakeSpec("nn.Module: ParallelLMHead_0", EventKind::kPythonFunction, Role::kPython,
                         90, m, head));
    s.push_back(MakeSpec("megatron/core/tensor_parallel/cross_entropy.py(27): forward",
                         EventKind::kPythonFunction, Role::kPython, 140, m, head));
    s.push_back(MakeSpec("aten::_log_softmax", EventKind::kCpuOp, Role::kCpuOp, 30, m,
                         head + ";megatron/core/tensor_parallel/cross_entropy.py(27): forward"));
    kernel(
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, "
        "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(c10::BFloat16*, "
        "c10::BFloat16 const*, int)",
        300, m);
    kernel(
        "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, "
        "float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>("
        "c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, int)",
        320, m);
  }
  if (tiny) {
    // Per-parameter work launched one tensor at a time: launch-bound.
    s.push_back(
        MakeSpec(kTiny, EventKind::kKernel, Role::kTinyKernel, kTinyKernelUs, kTinyKernels));
    s.push_back(MakeSpec("aten::fill_", EventKind::kCpuOp, Role::kCpuOp, kTinyFillUs, kTinyKernels,
                         top + ";megatron/core/optimizer/clip_grads.py(54): clip_grad_norm_fp32"));
    kernels += kTinyKernels;
  }
  if (sync) {
    Spec a =
        MakeSpec("cudaDeviceSynchronize", EventKind::kCudaRuntime, Role::kSync, 0, kSyncCalls, top);
    s.push_back(a);
    s.push_back(MakeSpec("aten::item", EventKind::kCpuOp, Role::kSync, 0, kSyncCalls,
                         top + ";train.py(151): report_loss"));
    s.push_back(MakeSpec("aten::_local_scalar_dense", EventKind::kCpuOp, Role::kCpuOp, 12,
                         kSyncCalls, top + ";train.py(151): report_loss;aten::item"));
  }
  // Runtime calls: one launch per kernel.
  s.push_back(
      MakeSpec("cudaLaunchKernel", EventKind::kCudaRuntime, Role::kLaunch, kLaunchUs, kernels));
  s.push_back(
      MakeSpec("cudaStreamWaitEvent", EventKind::kCudaRuntime, Role::kLaunch, 3, per * 2 + 8));
  s.push_back(MakeSpec("cudaEventRecord", EventKind::kCudaRuntime, Role::kLaunch, 3, per * 2 + 8));
  Spec opt = MakeSpec("Optimizer.step#FusedAdam.step", EventKind::kUserAnnotation, Role::kOptimizer,
                      4000, 1, top);
  opt.self_frac = 0.3;
  s.push_back(opt);
  s.push_back(MakeSpec("Optimizer.zero_grad#FusedAdam.zero_grad", EventKind::kUserAnnotation,
                       Role::kOptimizer, 500, 1, top));

  // Collectives. Each group has its own stream, as NCCL communicators do.
  auto coll = [&](const char* name, Role role, const char* op, double bytes, int calls,
                  int stream) {
    Spec c = MakeSpec(name, EventKind::kKernel, role, 0, calls);
    c.fclass = FunctionClass::kCollective;
    c.op = op;
    c.msg_bytes = bytes;
    c.stream = stream;
    s.push_back(c);
  };
  if (l.tp > 1) {
    coll("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", Role::kCollTp, "all_reduce", kTpMsgBytes,
         per * 4 + (first ? 2 * m : 0) + (last ? 3 * m : 0), 13);
  }
  if (l.pp > 1) {
    const int neighbours = (first ? 0 : 1) + (last ? 0 : 1);
    coll("ncclDevKernel_SendRecv", Role::kCollPp, "send_recv", kPpMsgBytes, 2 * m * neighbours, 17);
  }
  if (l.dp > 1) {
    coll("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", Role::kCollDp, "reduce_scatter",
         kDpMsgBytes, kDpBuckets, 21);
    coll("ncclDevKernel_AllGather_RING_LL", Role::kCollDp, "all_gather", kDpMsgBytes, kDpBuckets,
         21);
  }
  if (l.ep > 1) {
    coll("ncclDevKernel_AllToAll_RING_LL", Role::kCollEp, "all_to_all", kEpMsgBytes, per * 4, 25);
  }
  return s;
}

double BusFactorOf(const std::string& op, int n) {
  if (n <= 1) return 0;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "send_recv") return 1;
  return double(n - 1) / n;  // reduce_scatter, all_gather, all_to_all
}

// What a rank's iteration looks like once faults and waits are applied.
struct RankState {
  int rank = 0;
  int stage = 0;
  double iteration_us = 0;      // T, the same on every rank (synchronous training)
  std::vector<double> call_us;  // per spec: mean duration of one call on this rank
  std::vector<double> noise;    // per spec: this rank's lognormal factor
  double compute_us = 0, comm_us = 0, memcpy_us = 0, idle_us = 0, cpu_stall_us = 0;
  std::vector<double> iter_factor;  // per iteration: shared jitter x tiny per-rank noise
};

}  // namespace

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kSlowGpu:
      return "slow-gpu";
    case FaultKind::kSlowNvlink:
      return "slow-nvlink";
    case FaultKind::kSlowNic:
      return "slow-nic";
    case FaultKind::kSlowSwitch:
      return "slow-switch";
    case FaultKind::kSlowLoader:
      return "slow-loader";
    case FaultKind::kCpuContention:
      return "cpu-contention";
    case FaultKind::kGc:
      return "gc";
    case FaultKind::kTinyKernels:
      return "tiny-kernels";
    case FaultKind::kSync:
      return "sync";
    case FaultKind::kHang:
      return "hang";
  }
  return "?";
}

std::string FaultCategory(FaultKind kind) {
  switch (kind) {
    case FaultKind::kSlowGpu:
    case FaultKind::kCpuContention:
      return "straggler";
    case FaultKind::kSlowNvlink:
    case FaultKind::kSlowNic:
    case FaultKind::kSlowSwitch:
      return "communication";
    case FaultKind::kSlowLoader:
      return "data_loader";
    case FaultKind::kGc:
      return "gc";
    case FaultKind::kTinyKernels:
      return "launch_bound";
    case FaultKind::kSync:
      return "sync";
    case FaultKind::kHang:
      return "missing_rank";
  }
  return "?";
}

std::string FaultClass(FaultKind kind) {
  return kind == FaultKind::kTinyKernels || kind == FaultKind::kSync ? "all" : "subset";
}

StatusOr<Layout> ParseLayout(std::string_view text, int workers) {
  Layout l;
  bool has_tp = false, has_pp = false, has_dp = false;
  l.dp = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(pos, end - pos);
    size_t eq = item.find('=');
    int v = 0;
    if (eq == std::string_view::npos || !ParseInt(item.substr(eq + 1), &v) || v < 1) {
      return InvalidArgument(fmt::format(
          "--layout: '{}' is not NAME=N with N >= 1 (expected tp=T,pp=P[,dp=D][,ep=E])", item));
    }
    std::string_view key = item.substr(0, eq);
    if (key == "tp") {
      l.tp = v, has_tp = true;
    } else if (key == "pp") {
      l.pp = v, has_pp = true;
    } else if (key == "dp") {
      l.dp = v, has_dp = true;
    } else if (key == "ep") {
      l.ep = v;
    } else {
      return InvalidArgument(
          fmt::format("--layout: unknown dimension '{}' (expected tp, pp, dp, ep)", key));
    }
    pos = end + 1;
  }
  if (!has_tp || !has_pp) {
    return InvalidArgument(fmt::format("--layout: '{}' needs tp=T and pp=P", text));
  }
  if (!has_dp) {
    if (workers <= 0 || workers % (l.tp * l.pp) != 0) {
      return InvalidArgument(fmt::format(
          "--layout: {} workers do not split into tp={} x pp={} x dp (not a multiple of {})",
          workers, l.tp, l.pp, l.tp * l.pp));
    }
    l.dp = workers / (l.tp * l.pp);
  }
  if (int64_t(l.tp) * l.pp * l.dp != workers) {
    return InvalidArgument(
        fmt::format("--layout: tp={} x pp={} x dp={} is {} ranks, not {} workers", l.tp, l.pp, l.dp,
                    int64_t(l.tp) * l.pp * l.dp, workers));
  }
  if (l.dp % l.ep != 0) {
    return InvalidArgument(fmt::format("--layout: ep={} does not divide dp={}", l.ep, l.dp));
  }
  return l;
}

StatusOr<Fault> ParseFault(std::string_view text) {
  size_t at = text.find('@');
  if (at == std::string_view::npos) {
    return InvalidArgument(
        fmt::format("--fault: '{}' is not KIND@PLACE (e.g. slow-gpu@rank=5)", text));
  }
  std::string_view kind = text.substr(0, at), place = text.substr(at + 1);
  Fault f;
  // Options after the place: ",size=S", ",every=K".
  if (size_t comma = place.find(','); comma != std::string_view::npos) {
    std::string_view opts = place.substr(comma + 1);
    place = place.substr(0, comma);
    while (!opts.empty()) {
      size_t next = opts.find(',');
      std::string_view opt = opts.substr(0, next);
      opts = next == std::string_view::npos ? std::string_view() : opts.substr(next + 1);
      size_t eq = opt.find('=');
      std::string_view key = opt.substr(0, eq);
      std::string value(eq == std::string_view::npos ? "" : opt.substr(eq + 1));
      char* end = nullptr;
      if (key == "size") {
        f.size = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !(f.size > 0) || f.size > 100)
          return InvalidArgument(
              fmt::format("--fault: '{}': size must be a number in (0, 100]", text));
      } else if (key == "every") {
        int k = 0;
        if (!ParseInt(value, &k) || k < 1 || k > 1000)
          return InvalidArgument(fmt::format("--fault: '{}': every must be in [1, 1000]", text));
        f.every = k;
      } else {
        return InvalidArgument(
            fmt::format("--fault: '{}': unknown option '{}' (size=S, every=K)", text, opt));
      }
    }
  }
  static const FaultKind kKinds[] = {FaultKind::kSlowGpu,    FaultKind::kSlowNvlink,
                                     FaultKind::kSlowNic,    FaultKind::kSlowSwitch,
                                     FaultKind::kSlowLoader, FaultKind::kCpuContention,
                                     FaultKind::kGc,         FaultKind::kTinyKernels,
                                     FaultKind::kSync,       FaultKind::kHang};
  bool found = false;
  for (FaultKind k : kKinds) {
    if (kind == FaultKindName(k)) f.kind = k, found = true;
  }
  if (!found) {
    return InvalidArgument(fmt::format(
        "--fault: unknown kind '{}' (slow-gpu, slow-nvlink, slow-nic, slow-switch, slow-loader, "
        "cpu-contention, gc, tiny-kernels, sync, hang)",
        kind));
  }
  f.place = std::string(place);
  if (place == "all") {
    f.place_kind = PlaceKind::kAll;
  } else {
    size_t eq = place.find('=');
    std::string_view key = place.substr(0, std::min(eq, place.size()));
    if (eq == std::string_view::npos || !ParseInt(place.substr(eq + 1), &f.index) || f.index < 0 ||
        (key != "rank" && key != "node" && key != "switch")) {
      return InvalidArgument(fmt::format(
          "--fault: '{}': place '{}' is not rank=R, node=N, switch=S or all", text, place));
    }
    f.place_kind = key == "rank"   ? PlaceKind::kRank
                   : key == "node" ? PlaceKind::kNode
                                   : PlaceKind::kSwitch;
  }
  // Which places make sense for which kind.
  auto bad = [&](const char* want) {
    return InvalidArgument(fmt::format("--fault: '{}': {} takes {}", text, kind, want));
  };
  switch (f.kind) {
    case FaultKind::kSlowGpu:
    case FaultKind::kCpuContention:
    case FaultKind::kGc:
    case FaultKind::kHang:
      if (f.place_kind != PlaceKind::kRank) return bad("rank=R");
      break;
    case FaultKind::kSlowNvlink:
    case FaultKind::kSlowNic:
      if (f.place_kind != PlaceKind::kNode) return bad("node=N");
      break;
    case FaultKind::kSlowSwitch:
      if (f.place_kind != PlaceKind::kSwitch) return bad("switch=S");
      break;
    case FaultKind::kSlowLoader:
      if (f.place_kind != PlaceKind::kRank && f.place_kind != PlaceKind::kNode) {
        return bad("rank=R or node=N");
      }
      break;
    case FaultKind::kTinyKernels:
    case FaultKind::kSync:
      if (f.place_kind != PlaceKind::kAll) return bad("all");
      break;
  }
  const bool timing =
      f.kind != FaultKind::kHang && f.kind != FaultKind::kSync && f.kind != FaultKind::kTinyKernels;
  if (!timing && (f.size != 1.0 || f.every != 1))
    return InvalidArgument(fmt::format("--fault: '{}': {} takes no size or every", text, kind));
  return f;
}

Topology::Topology(const Config& c)
    : layout_(c.layout),
      workers_(c.workers),
      gpus_per_node_(std::max(1, c.gpus_per_node)),
      nodes_per_switch_(std::max(1, c.nodes_per_switch)) {}

Coord Topology::CoordOf(int rank) const {
  const Layout& l = layout_;
  Coord c;
  c.tp = rank % l.tp;
  c.dp = (rank / l.tp) % l.dp;
  c.pp = rank / (l.tp * l.dp);
  return c;
}

int Topology::RankOf(const Coord& c) const {
  return c.pp * (layout_.dp * layout_.tp) + c.dp * layout_.tp + c.tp;
}

std::vector<int> Topology::TpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g;
  for (c.tp = 0; c.tp < layout_.tp; ++c.tp) g.push_back(RankOf(c));
  return g;
}

std::vector<int> Topology::PpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g;
  for (c.pp = 0; c.pp < layout_.pp; ++c.pp) g.push_back(RankOf(c));
  return g;
}

std::vector<int> Topology::DpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < layout_.dp; ++c.dp) g.push_back(RankOf(c));
  return g;
}

std::vector<int> Topology::EpGroup(int rank) const {
  if (layout_.ep <= 1) return {};
  Coord c = CoordOf(rank);
  const int first = c.dp / layout_.ep * layout_.ep;
  std::vector<int> g;
  for (c.dp = first; c.dp < first + layout_.ep; ++c.dp) g.push_back(RankOf(c));
  return g;
}

std::vector<trace::ProcessGroup> Topology::Groups(int rank) const {
  std::vector<trace::ProcessGroup> out;
  auto add = [&](const char* name, std::vector<int> ranks) {
    trace::ProcessGroup g;
    g.name = name;
    g.desc = fmt::format("{}:{}", name, ranks.front());
    g.backend = "nccl";
    g.size = static_cast<int>(ranks.size());
    g.ranks = std::move(ranks);
    out.push_back(std::move(g));
  };
  add("tp", TpGroup(rank));
  add("pp", PpGroup(rank));
  add("dp", DpGroup(rank));
  if (layout_.ep > 1) add("ep", EpGroup(rank));
  return out;
}

Status Validate(const Config& c) {
  if (c.workers < 1) return InvalidArgument("--workers: must be at least 1");
  const Layout& l = c.layout;
  if (int64_t(l.tp) * l.pp * l.dp != c.workers) {
    return InvalidArgument(fmt::format("--workers: {} is not tp x pp x dp = {}", c.workers,
                                       int64_t(l.tp) * l.pp * l.dp));
  }
  if (c.gpus_per_node < 1) return InvalidArgument("--gpus-per-node: must be at least 1");
  if (c.nodes_per_switch < 1) return InvalidArgument("--nodes-per-switch: must be at least 1");
  if (c.iterations < 2 || c.iterations > 1000) {
    return InvalidArgument("--iterations: must be between 2 and 1000");
  }
  if (c.layers < 1 || c.layers > 256) return InvalidArgument("--layers: must be between 1 and 256");
  if (c.traces && c.workers > 64) {
    return InvalidArgument(
        fmt::format("--traces: at most 64 workers get traces ({} asked); drop --traces for "
                    "summaries only",
                    c.workers));
  }
  const int nodes = (c.workers + c.gpus_per_node - 1) / c.gpus_per_node;
  const int switches = (nodes + c.nodes_per_switch - 1) / c.nodes_per_switch;
  Topology topo(c);
  for (const Fault& f : c.faults) {
    std::string what = fmt::format("--fault: '{}@{}'", FaultKindName(f.kind), f.place);
    if (f.place_kind == PlaceKind::kRank && f.index >= c.workers) {
      return InvalidArgument(
          fmt::format("{}: rank {} is not below {} workers", what, f.index, c.workers));
    }
    if (f.place_kind == PlaceKind::kNode && f.index >= nodes) {
      return InvalidArgument(
          fmt::format("{}: node {} does not exist ({} nodes)", what, f.index, nodes));
    }
    if (f.place_kind == PlaceKind::kSwitch && f.index >= switches) {
      return InvalidArgument(
          fmt::format("{}: switch {} does not exist ({} switches)", what, f.index, switches));
    }
    if (f.kind == FaultKind::kSlowLoader && FaultRanks(c, f).empty()) {
      return InvalidArgument(fmt::format(
          "{}: no rank there is in the first pipeline stage, where the data loader runs", what));
    }
    if (f.kind == FaultKind::kSlowNvlink && c.layout.tp == 1 && c.layout.ep == 1 &&
        c.gpus_per_node > 1) {
      // Still simulated (DP/PP groups may use NVLink); nothing to refuse.
    }
  }
  return Status::Ok();
}

std::vector<int> FaultRanks(const Config& c, const Fault& f) {
  Topology topo(c);
  std::vector<int> out;
  auto under = [&](int r) {
    switch (f.place_kind) {
      case PlaceKind::kRank:
        return r == f.index;
      case PlaceKind::kNode:
        return topo.Node(r) == f.index;
      case PlaceKind::kSwitch:
        return topo.Switch(r) == f.index;
      case PlaceKind::kAll:
        return true;
    }
    return false;
  };
  int lo = 0, hi = c.workers;
  if (f.place_kind == PlaceKind::kRank) lo = f.index, hi = std::min(c.workers, f.index + 1);
  if (f.place_kind == PlaceKind::kNode) {
    lo = f.index * c.gpus_per_node, hi = std::min(c.workers, lo + c.gpus_per_node);
  }
  if (f.place_kind == PlaceKind::kSwitch) {
    lo = f.index * c.nodes_per_switch * c.gpus_per_node;
    hi = std::min(c.workers, lo + c.nodes_per_switch * c.gpus_per_node);
  }
  for (int r = lo; r < hi; ++r) {
    if (!under(r)) continue;
    // The data loader only runs in the first pipeline stage.
    if (f.kind == FaultKind::kSlowLoader && topo.CoordOf(r).pp != 0) continue;
    out.push_back(r);
  }
  return out;
}

std::string TruthJson(const Config& c) {
  JsonWriter w(2);
  w.BeginObject();
  w.Key("workers").Int(c.workers);
  w.Key("layout").BeginObject();
  w.Key("tp").Int(c.layout.tp).Key("pp").Int(c.layout.pp).Key("dp").Int(c.layout.dp);
  w.Key("ep").Int(c.layout.ep).EndObject();
  w.Key("gpus_per_node").Int(c.gpus_per_node);
  w.Key("nodes_per_switch").Int(c.nodes_per_switch);
  w.Key("iterations").Int(c.iterations);
  w.Key("seed").Int(static_cast<int64_t>(c.seed));
  w.Key("faults").BeginArray();
  Topology topo(c);
  for (const Fault& f : c.faults) {
    w.BeginObject();
    w.Key("kind").String(FaultKindName(f.kind));
    w.Key("place").String(f.place);
    w.Key("size").Number(f.size);
    w.Key("every").Int(f.every);
    std::vector<int> ranks = FaultRanks(c, f);
    w.Key("ranks").BeginArray();
    for (int r : ranks) w.Int(r);
    w.EndArray();
    std::vector<int> nodes;
    for (int r : ranks) nodes.push_back(topo.Node(r));
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    w.Key("hosts").BeginArray();
    // An all-rank fault names no host: it is not a place.
    if (f.place_kind != PlaceKind::kAll) {
      for (int n : nodes) w.String(fmt::format("node-{}", n));
    }
    w.EndArray();
    if (f.place_kind == PlaceKind::kSwitch)
      w.Key("switch").String(fmt::format("switch-{}", f.index));
    w.Key("category").String(FaultCategory(f.kind));
    w.Key("class").String(FaultClass(f.kind));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::string out = w.Take();
  out.push_back('\n');
  return out;
}

// ---------------------------------------------------------------------------------------------

struct Simulator::Impl {
  const Config& cfg;
  const Topology& topo;
  std::vector<std::vector<Spec>> stages;
  std::vector<double> jitter;  // per iteration, shared by all ranks
  double base_iteration_us = 0;
  double max_delay_us = 0;  // G: the slowest rank's delay over its fault-free self
  int hang_rank = -1;
  // Each rank's delay over its fault-free self: one float a rank, so waits are O(group size).
  std::vector<float> delay;

  Impl(const Config& c, const Topology& t) : cfg(c), topo(t) {
    for (int s = 0; s < c.layout.pp; ++s) stages.push_back(StageSpecs(c, s));
    std::mt19937_64 rng(SplitMix(c.seed ^ 0x5157a11ULL));
    std::normal_distribution<double> z(0, 1);
    for (int i = 0; i < c.iterations; ++i) {
      jitter.push_back(std::clamp(1 + kIterJitter * z(rng), 0.95, 1.05));
    }
    for (const Fault& f : c.faults) {
      if (f.kind == FaultKind::kHang) hang_rank = f.index;
    }
    // The fault-free iteration: the busiest rank plus a pipeline bubble; then the slowest
    // rank's delay. One pass over all ranks, O(workers x faults).
    double busiest = 0;
    delay.resize(c.workers);
    bool local_faults = false;
    for (const Fault& f : c.faults) local_faults |= f.place_kind != PlaceKind::kAll;
    for (int r = 0; r < c.workers; ++r) {
      const double nominal = Own(r, false);
      busiest = std::max(busiest, nominal);
      delay[r] = local_faults ? static_cast<float>(Own(r, true) - nominal) : 0.0f;
      max_delay_us = std::max(max_delay_us, double(delay[r]));
    }
    const double bubble =
        c.layout.pp > 1 ? double(c.layout.pp - 1) / (kMicrobatches + c.layout.pp - 1) * 0.5 : 0.02;
    base_iteration_us = busiest * (1 + bubble);
  }

  bool Hit(const Fault& f, int rank) const {
    switch (f.place_kind) {
      case PlaceKind::kRank:
        return rank == f.index;
      case PlaceKind::kNode:
        return topo.Node(rank) == f.index;
      case PlaceKind::kSwitch:
        return topo.Switch(rank) == f.index;
      case PlaceKind::kAll:
        return true;
    }
    return false;
  }

  // Members of a rank's group of the given role.
  std::vector<int> Members(int rank, Role role) const {
    switch (role) {
      case Role::kCollTp:
        return topo.TpGroup(rank);
      case Role::kCollPp:
        return topo.PpGroup(rank);
      case Role::kCollDp:
        return topo.DpGroup(rank);
      case Role::kCollEp:
        return topo.EpGroup(rank);
      default:
        return {};
    }
  }

  // Whether `other` is in `rank`'s group of the given role (O(1), so large DP groups are
  // cheap to test against the few ranks under a faulty node or switch).
  bool SameGroup(int rank, int other, Role role) const {
    Coord a = topo.CoordOf(rank), b = topo.CoordOf(other);
    switch (role) {
      case Role::kCollTp:
        return a.pp == b.pp && a.dp == b.dp;
      case Role::kCollPp:
        return a.tp == b.tp && a.dp == b.dp;
      case Role::kCollDp:
        return a.tp == b.tp && a.pp == b.pp;
      case Role::kCollEp:
        return a.tp == b.tp && a.pp == b.pp && a.dp / cfg.layout.ep == b.dp / cfg.layout.ep;
      default:
        return false;
    }
  }

  int GroupEnd(int rank, Role role, bool last) const {
    Coord c = topo.CoordOf(rank);
    const Layout& l = cfg.layout;
    switch (role) {
      case Role::kCollTp:
        c.tp = last ? l.tp - 1 : 0;
        break;
      case Role::kCollPp:
        c.pp = last ? l.pp - 1 : 0;
        break;
      case Role::kCollDp:
        c.dp = last ? l.dp - 1 : 0;
        break;
      case Role::kCollEp:
        c.dp = c.dp / l.ep * l.ep + (last ? l.ep - 1 : 0);
        break;
      default:
        break;
    }
    return topo.RankOf(c);
  }

  // Transfer time of one call: message over the slowest link the group uses.
  double TransferUs(int rank, const Spec& s, bool faults) const {
    int n = 1;
    switch (s.role) {
      case Role::kCollTp:
        n = cfg.layout.tp;
        break;
      case Role::kCollPp:
        n = 2;
        break;
      case Role::kCollDp:
        n = cfg.layout.dp;
        break;
      case Role::kCollEp:
        n = cfg.layout.ep;
        break;
      default:
        return 0;
    }
    // Members are sorted by rank, so the ends tell whether the group leaves its node/switch.
    const int lo = GroupEnd(rank, s.role, false), hi = GroupEnd(rank, s.role, true);
    const bool cross_node = topo.Node(lo) != topo.Node(hi);
    double gbps = cross_node ? kNicGBps : kNvlinkGBps;
    double slow = 1;
    if (faults) {
      for (const Fault& f : cfg.faults) {
        if (f.kind == FaultKind::kSlowNvlink && !cross_node && topo.Node(rank) == f.index) {
          slow = std::max(slow, 1 + (kSlowNvlinkFactor - 1) * f.Strength());
        }
        if ((f.kind == FaultKind::kSlowNic || f.kind == FaultKind::kSlowSwitch) && cross_node) {
          const bool sw = f.kind == FaultKind::kSlowSwitch;
          const int per = cfg.gpus_per_node * (sw ? cfg.nodes_per_switch : 1);
          const int first = f.index * per;
          for (int o = first; o < std::min(cfg.workers, first + per); ++o) {
            if (SameGroup(rank, o, s.role)) {
              slow = std::max(slow,
                              1 + ((sw ? kSlowSwitchFactor : kSlowNicFactor) - 1) * f.Strength());
              break;
            }
          }
        }
      }
    }
    const double bytes = s.msg_bytes * BusFactorOf(s.op, n);
    return bytes / (gbps * 1e3) * slow;  // GB/s = 1e3 bytes/us
  }

  // Fault multipliers for one spec on one rank.
  double Factor(int rank, const Spec& s, bool faults) const {
    if (!faults) return 1;
    double x = 1;
    for (const Fault& f : cfg.faults) {
      if (!Hit(f, rank)) continue;
      const double k = f.Strength();
      if (f.kind == FaultKind::kSlowGpu && s.role == Role::kComputeKernel)
        x *= 1 + (kSlowGpuFactor - 1) * k;
      if (f.kind == FaultKind::kCpuContention &&
          (s.role == Role::kCpuOp || s.role == Role::kLaunch)) {
        x *= 1 + (kCpuContentionFactor - 1) * k;
      }
      if (f.kind == FaultKind::kCpuContention && s.role == Role::kPython) x *= 1 + k;
    }
    return x;
  }

  double Extra(int rank, Role role, bool faults) const {
    double us = 0;
    if (!faults) return 0;
    for (const Fault& f : cfg.faults) {
      if (!Hit(f, rank)) continue;
      if (f.kind == FaultKind::kSlowLoader && role == Role::kLoader)
        us += kSlowLoaderUs * f.Strength();
    }
    return us;
  }

  // The period of the rank's intermittent faults (1: every iteration).
  int EveryOf(int rank) const {
    int every = 1;
    for (const Fault& f : cfg.faults)
      if (Hit(f, rank)) every = std::max(every, f.every);
    return every;
  }

  // Time in garbage collection per iteration (mean over the iterations) of a rank's gc faults.
  double GcUs(int rank) const {
    double us = 0;
    for (const Fault& f : cfg.faults)
      if (f.kind == FaultKind::kGc && f.index == rank) us += kGcUs * f.Strength();
    return us;
  }
  bool HasGc(int rank) const { return GcUs(rank) > 0; }

  // A rank's own work per iteration (no waiting), with or without its rank/node/switch faults.
  // Faults on every rank stay in both: they delay nobody relative to anyone.
  // `stall_out`, when given, gets the part of it that leaves the GPU idle.
  double Own(int rank, bool faults, double* stall_out = nullptr) const {
    const std::vector<Spec>& specs = stages[topo.CoordOf(rank).pp];
    double gpu = 0, stall = 0, compute = 0;
    for (const Spec& s : specs) {
      if (s.role == Role::kComputeKernel || s.role == Role::kMemcpy) {
        double us = s.base_us * s.calls * Factor(rank, s, faults);
        gpu += us;
        compute += us;
      } else if (s.role >= Role::kCollTp && s.role <= Role::kCollEp) {
        gpu += TransferUs(rank, s, faults) * s.calls;
      } else if (s.role == Role::kLoader) {
        stall += s.base_us + Extra(rank, s.role, faults);
      } else if (s.role == Role::kTinyKernel) {
        // Launch-bound: the CPU issues each tiny kernel with an aten::fill_ and a
        // cudaLaunchKernel (15 us); the GPU runs it in 2 us and idles the rest.
        stall += s.calls * std::max(0.0, kTinyFillUs + kLaunchUs - s.base_us);
        gpu += s.calls * s.base_us;
      } else if (s.role == Role::kSync && s.kind == EventKind::kCudaRuntime) {
        stall += s.calls * kSyncIdleUs;
      }
    }
    if (faults) {
      for (const Fault& f : cfg.faults) {
        if (!Hit(f, rank)) continue;
        if (f.kind == FaultKind::kCpuContention)
          stall += kCpuContentionStall * f.Strength() * compute;
      }
      stall += GcUs(rank);
    }
    stall += 2000;  // 2 ms of unavoidable step overhead with the GPU idle
    if (stall_out) *stall_out = stall;
    return gpu + stall;
  }

  RankState Evaluate(int rank) const {
    RankState st;
    st.rank = rank;
    st.stage = topo.CoordOf(rank).pp;
    const std::vector<Spec>& specs = stages[st.stage];
    std::mt19937_64 rng(SplitMix(cfg.seed * 0x100000001b3ULL ^ SplitMix(rank + 1)));
    std::normal_distribution<double> z(0, 1);
    st.noise.resize(specs.size());
    for (double& n : st.noise) n = std::exp(kRankNoise * std::clamp(z(rng), -3.0, 3.0));
    for (int i = 0; i < cfg.iterations; ++i) {
      st.iter_factor.push_back(jitter[i] * (1 + 0.002 * std::clamp(z(rng), -3.0, 3.0)));
    }
    // Waits, group by group in the order they synchronize.
    const double d0 = delay[rank];
    double d1 = d0;
    for (int m : topo.TpGroup(rank)) d1 = std::max(d1, double(delay[m]));
    double d2 = d1;
    for (int p : topo.PpGroup(rank)) {
      for (int m : topo.TpGroup(p)) d2 = std::max(d2, double(delay[m]));
    }
    const double own_nominal = Own(rank, false);
    st.iteration_us = base_iteration_us + max_delay_us;
    double wait_tp = d1 - d0, wait_pp = d2 - d1, wait_dp = max_delay_us - d2;
    const double bubble = base_iteration_us - own_nominal;  // pipeline bubble: PP waits
    const Layout& l = cfg.layout;
    // Where a wait lands when the job has no such group: the next group that exists.
    if (l.tp == 1) wait_pp += wait_tp, wait_tp = 0;
    if (l.pp == 1) wait_dp += wait_pp, wait_pp = 0;
    double bubble_pp = l.pp > 1 ? bubble : 0, bubble_dp = l.pp > 1 ? 0 : bubble;
    if (l.dp == 1) {
      if (l.pp > 1) {
        wait_pp += wait_dp, wait_dp = 0, bubble_pp += bubble_dp, bubble_dp = 0;
      } else if (l.tp > 1) {
        wait_tp += wait_dp + wait_pp + bubble_dp, wait_dp = 0, bubble_dp = 0;
      }
    }
    auto wait_of = [&](Role r) {
      switch (r) {
        case Role::kCollTp:
          return wait_tp;
        case Role::kCollPp:
          return wait_pp + bubble_pp;
        case Role::kCollDp:
          return wait_dp + bubble_dp;
        default:
          return 0.0;
      }
    };
    // Collectives of one group split its wait by call count.
    int dp_calls = 0;
    for (const Spec& s : specs) {
      if (s.role == Role::kCollDp) dp_calls += s.calls;
    }
    st.call_us.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      double us = s.base_us * Factor(rank, s, true) * st.noise[i];
      if (s.role >= Role::kCollTp && s.role <= Role::kCollEp) {
        const int calls = s.role == Role::kCollDp ? dp_calls : s.calls;
        us = TransferUs(rank, s, true) * st.noise[i] + wait_of(s.role) / std::max(1, calls);
        st.comm_us += us * s.calls;
      } else if (s.role == Role::kComputeKernel || s.role == Role::kTinyKernel) {
        st.compute_us += us * s.calls;
      } else if (s.role == Role::kMemcpy) {
        st.memcpy_us += us * s.calls;
      } else if (s.role == Role::kLoader) {
        us = (s.base_us + Extra(rank, s.role, true)) * st.noise[i];
      } else if (s.role == Role::kSync) {
        // The CPU blocks until the GPU drains: the sync's time is the GPU's queue.
        us = kSyncIdleUs * st.noise[i];
      }
      st.call_us[i] = us;
    }
    // GPU idle: what is not kernel time; CPU-side stalls (loader, GC, contention, syncs).
    // The GPU idles for the rank's own CPU-side stalls, whatever its kernels' noise: a rank
    // whose kernels run a little long waits that much less in its collectives (and one whose
    // kernels run short waits longer). The difference goes to the waits, last group first.
    double stall = 0;
    Own(rank, true, &stall);
    double residual = st.iteration_us - (st.compute_us + st.comm_us + st.memcpy_us) - stall;
    for (Role role : {Role::kCollDp, Role::kCollPp, Role::kCollTp}) {
      int calls = 0;
      for (const Spec& s : specs) {
        if (s.role == role) calls += s.calls;
      }
      if (calls == 0 || std::fabs(residual) < 1e-9) continue;
      const double per_call = residual / calls;
      for (size_t i = 0; i < specs.size(); ++i) {
        const Spec& s = specs[i];
        if (s.role != role) continue;
        const double floor = TransferUs(rank, s, true) * st.noise[i];
        const double was = st.call_us[i];
        st.call_us[i] = std::max(floor, was + per_call);
        st.comm_us += (st.call_us[i] - was) * s.calls;
        residual -= (st.call_us[i] - was) * s.calls;
      }
    }
    const double busy = st.compute_us + st.comm_us + st.memcpy_us;
    st.idle_us = std::max(0.0, st.iteration_us - busy);
    st.cpu_stall_us = st.idle_us;
    // Python functions and the step cover what they enclose.
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      if (s.role == Role::kTrainStep) st.call_us[i] = st.iteration_us * 0.985;
    }
    return st;
  }
};

Simulator::Simulator(Config config)
    : config_(std::move(config)), topo_(config_), impl_(new Impl(config_, topo_)) {}

Simulator::~Simulator() { delete impl_; }

bool Simulator::Writes(int rank) const { return rank != impl_->hang_rank; }

pattern::RankSummary Simulator::SimulateRank(int rank) const {
  const Impl& im = *impl_;
  RankState st = im.Evaluate(rank);
  const std::vector<Spec>& specs = im.stages[st.stage];
  pattern::RankSummary out;
  out.rank = rank;
  out.world_size = config_.workers;
  const int node = topo_.Node(rank);
  out.host = fmt::format("node-{}", node);
  out.network_switch = fmt::format("switch-{}", topo_.Switch(rank));
  out.source = fmt::format("simulated:rank-{}", rank);
  out.has_gpu = true;
  out.process_groups = topo_.Groups(rank);
  trace::DeviceInfo dev;
  dev.id = rank % config_.gpus_per_node;
  dev.name = "NVIDIA H100 80GB HBM3";
  dev.num_sms = 132;
  dev.compute_major = 9;
  out.devices.push_back(dev);
  out.iteration_source = "ProfilerStep";
  out.main_tid = 1;
  double window = 0;
  for (int i = 0; i < config_.iterations; ++i) {
    out.iteration_ms.push_back((st.iteration_us * st.iter_factor[i] / 1000));
    out.iteration_steps.push_back(100 + i);
    window += out.iteration_ms.back();
  }
  out.window_ms = window;
  out.gpu_busy_us = st.compute_us + st.comm_us + st.memcpy_us;
  out.gpu_idle_us = st.idle_us;
  out.compute_us = st.compute_us;
  out.comm_us = st.comm_us;
  out.memcpy_us = st.memcpy_us;
  out.comm_compute_overlap_us = 0;
  out.cpu_critical_us = st.cpu_stall_us;

  std::mt19937_64 rng(SplitMix(config_.seed ^ SplitMix(rank + 0x777)));
  std::normal_distribution<double> z(0, 1);
  const int iters = config_.iterations;
  const double mean_iter = st.iteration_us;
  // An intermittent fault is at full strength on its active iterations and absent on the
  // others; a function's fault-free part keeps its value on every iteration.
  const int every = im.EveryOf(rank);
  auto add = [&](const Spec& s, double call_us, int calls, FunctionClass fclass,
                 const std::string& name, double self_frac, double cv, double free_call_us) {
    pattern::FunctionPattern f;
    f.name = name;
    f.kind = s.kind;
    f.fclass = fclass;
    f.stack = s.stack;
    f.device = s.gpu ? dev.id : -1;
    f.stream = s.gpu ? s.stream : -1;
    f.main_thread = !s.gpu && s.role != Role::kCpuOp ? true : (!s.gpu && !s.stack.empty());
    f.top_level = s.role == Role::kTrainStep || s.role == Role::kLoader ||
                  s.role == Role::kOptimizer || s.role == Role::kGc || s.gpu;
    f.count = static_cast<uint64_t>(calls) * iters;
    f.calls_per_iter = calls;
    f.mean_us = (call_us);
    f.cv = (cv);
    f.p50_us = (call_us * (1 - 0.2 * cv));
    f.p99_us = (call_us * (1 + 2.33 * cv));
    f.max_us = (call_us * (1 + 3.5 * cv));
    f.min_us = (call_us * std::max(0.1, 1 - 2 * cv));
    f.per_iter_us = (call_us * calls);
    f.total_us = (f.per_iter_us * iters);
    f.share = (f.per_iter_us / mean_iter);
    f.self_per_iter_us = (f.per_iter_us * self_frac);
    f.iter_us.reserve(iters);
    const double free_per_iter = free_call_us * calls;
    const double fault_per_iter = f.per_iter_us - free_per_iter;
    for (int i = 0; i < iters; ++i) {
      const double fault =
          every == 1 ? fault_per_iter : (i % every == 0 ? fault_per_iter * every : 0);
      f.iter_us.push_back(
          static_cast<float>((free_per_iter + fault) * st.iter_factor[i] *
                             std::max(0.05, 1 + config_.noise * std::clamp(z(rng), -3.0, 3.0))));
    }
    if (fclass == FunctionClass::kCollective) {
      f.coll.op = s.op;
      f.coll.msg_bytes = s.msg_bytes;
      f.coll.dtype = "BFloat16";
      const char* g = s.role == Role::kCollTp   ? "tp"
                      : s.role == Role::kCollPp ? "pp"
                      : s.role == Role::kCollDp ? "dp"
                                                : "ep";
      for (const trace::ProcessGroup& pg : out.process_groups) {
        if (pg.name == g) {
          f.coll.group = pg.desc;
          f.coll.group_size = s.role == Role::kCollPp ? 2 : pg.size;
        }
      }
      f.coll.algbw_gbps = call_us > 0 ? s.msg_bytes / (call_us * 1e3) : 0;
      f.coll.busbw_gbps = f.coll.algbw_gbps * BusFactorOf(s.op, f.coll.group_size);
    }
    out.functions.push_back(std::move(f));
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    double cv = s.gpu ? 0.03 : 0.12;
    if (s.fclass == FunctionClass::kCollective) cv = 0.25;
    // The fault-free part of the call, for intermittent faults' per-iteration values.
    double free_us = st.call_us[i];
    if (s.role == Role::kLoader) {
      free_us = s.base_us * st.noise[i];
    } else if (s.role < Role::kCollTp || s.role > Role::kCollEp) {
      const double x = im.Factor(rank, s, true);
      if (x > 0) free_us = st.call_us[i] / x;
    }
    add(s, st.call_us[i], s.calls, s.fclass, s.name, s.self_frac, cv, free_us);
  }
  if (im.HasGc(rank)) {
    Spec gc = MakeSpec("<gc>", EventKind::kPythonFunction, Role::kGc, kGcUs, 1,
                       "train.py(241): <module>;train.py(120): train_step");
    add(gc, im.GcUs(rank) * std::exp(kRankNoise * z(rng)), 1, FunctionClass::kGc, gc.name, 1, 0.1,
        0);
  }
  std::sort(out.functions.begin(), out.functions.end(),
            [](const pattern::FunctionPattern& a, const pattern::FunctionPattern& b) {
              return a.per_iter_us > b.per_iter_us;
            });
  return out;
}

// Kineto-style JSON: a ProfilerStep#N span per iteration on the main thread, CPU ops, Python
// functions and launches laid end to end on it, kernels on their streams linked by correlation
// ids, NCCL kernels with the collective args torch 2.x records.
std::string Simulator::TraceJson(int rank) const {
  const Impl& im = *impl_;
  RankState st = im.Evaluate(rank);
  const std::vector<Spec>& specs = im.stages[st.stage];
  const int device = rank % config_.gpus_per_node;
  const int pid = 1000 + rank;
  std::vector<trace::ProcessGroup> groups = topo_.Groups(rank);
  std::string o;
  o.reserve(1 << 22);
  o += "{\n\"schemaVersion\": 1,\n\"distributedInfo\": {\"backend\": \"nccl\", ";
  o += fmt::format("\"rank\": {}, \"world_size\": {}, \"pg_count\": {}, \"pg_config\": [", rank,
                   config_.workers, groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    std::string ranks;
    for (size_t k = 0; k < groups[g].ranks.size(); ++k) {
      ranks += fmt::format("{}{}", k ? ", " : "", groups[g].ranks[k]);
    }
    o += fmt::format(
        "{}{{\"pg_name\": \"{}\", \"pg_desc\": \"{}\", \"backend_config\": \"cuda:nccl\", "
        "\"pg_size\": {}, \"ranks\": [{}]}}",
        g ? ", " : "", groups[g].name, groups[g].desc, groups[g].size, ranks);
  }
  o += "], \"nccl_version\": \"2.21.5\"},\n";
  o += fmt::format(
      "\"deviceProperties\": [{{\"id\": {}, \"name\": \"NVIDIA H100 80GB HBM3\", "
      "\"computeMajor\": 9, \"computeMinor\": 0, \"numSms\": 132}}],\n",
      device);
  o += "\"traceEvents\": [\n";
  bool first_event = true;
  auto ev = [&](const char* cat, std::string_view name, int p, int tid, double ts, double dur,
                const std::string& args) {
    if (!first_event) o += ",\n";
    first_event = false;
    o += fmt::format("{{\"ph\": \"X\", \"cat\": \"{}\", \"name\": ", cat);
    AppendJsonString(name, &o);
    o += fmt::format(
        ", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, \"dur\": {:.3f}, \"args\": {{{}}}}}", p, tid,
        ts, dur, args);
  };
  std::mt19937_64 rng(SplitMix(config_.seed ^ SplitMix(rank + 0x1234)));
  std::normal_distribution<double> z(0, 1);
  int64_t corr = 1, ext = 1, pyid = 1;
  double t = 1.0e6;
  const bool gc = im.HasGc(rank);
  for (int it = 0; it < config_.iterations; ++it) {
    const double f = st.iter_factor[it];
    const double t0 = t;
    double cpu = t0 + 5;
    // The GPU starts once the CPU-side stalls (loader, GC, contention) are over.
    double gpu = t0 + st.idle_us * f;
    std::string step_args = fmt::format("\"External id\": {}", ext++);
    const int64_t step_py = pyid++;
    // Emitted after the loop once the end is known: remember where.
    std::vector<std::pair<double, std::string>> deferred;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      if (s.role == Role::kTrainStep || s.role == Role::kLaunch) continue;  // launches: below
      for (int c = 0; c < s.calls; ++c) {
        double dur = st.call_us[i] * f * (1 + 0.02 * std::clamp(z(rng), -3.0, 3.0));
        if (s.gpu) {
          double launch = 6;
          ev("cuda_runtime", "cudaLaunchKernel", pid, 1, cpu, launch,
             fmt::format("\"External id\": {}, \"correlation\": {}", ext, corr));
          double start = std::max(gpu, cpu + launch);
          std::string args = fmt::format(
              "\"External id\": {}, \"device\": {}, \"stream\": {}, \"correlation\": {}", ext,
              device, s.stream, corr);
          if (s.fclass == FunctionClass::kCollective) {
            const char* g = s.role == Role::kCollTp   ? "tp"
                            : s.role == Role::kCollPp ? "pp"
                            : s.role == Role::kCollDp ? "dp"
                                                      : "ep";
            for (const trace::ProcessGroup& pg : groups) {
              if (pg.name != g) continue;
              std::string ranks;
              for (size_t k = 0; k < pg.ranks.size(); ++k) {
                ranks += fmt::format("{}{}", k ? ", " : "", pg.ranks[k]);
              }
              const int64_t nelems = static_cast<int64_t>(s.msg_bytes / 2);
              args += fmt::format(
                  ", \"Collective name\": \"{}\", \"In msg nelems\": {}, \"Out msg nelems\": {}, "
                  "\"Group size\": {}, \"dtype\": \"BFloat16\", \"Process Group Name\": \"{}\", "
                  "\"Process Group Description\": \"{}\", \"Process Group Ranks\": \"[{}]\"",
                  s.op == "send_recv" ? "send" : s.op.c_str(), nelems, nelems,
                  s.role == Role::kCollPp ? 2 : pg.size, pg.name, pg.desc, ranks);
            }
          }
          ev(s.kind == EventKind::kMemcpy ? "gpu_memcpy" : "kernel", s.raw, device, s.stream, start,
             dur, args);
          gpu = start + dur;
          cpu += launch + 1;
          ++corr;
          ++ext;
        } else {
          const char* cat = s.kind == EventKind::kPythonFunction   ? "python_function"
                            : s.kind == EventKind::kUserAnnotation ? "user_annotation"
                            : s.kind == EventKind::kCudaRuntime    ? "cuda_runtime"
                                                                   : "cpu_op";
          std::string args;
          if (s.kind == EventKind::kPythonFunction) {
            args = fmt::format("\"Python id\": {}, \"Python parent id\": {}", pyid++, step_py);
          } else {
            args = fmt::format("\"External id\": {}", ext++);
          }
          if (s.role == Role::kSync) {
            // Waits for the GPU to drain, which then sits idle until the CPU moves on.
            double until = std::max(cpu, gpu);
            dur = std::max(dur, until - cpu + 5);
          }
          ev(cat, s.raw, pid, 1, cpu, dur, args);
          // Python functions and annotations enclose other work; they do not hold the CPU.
          if (s.kind != EventKind::kPythonFunction) cpu += dur;
          if (s.role == Role::kSync) gpu = std::max(gpu, cpu);
        }
      }
    }
    if (gc) {
      ev("python_function", "<gc>", pid, 1, cpu, im.GcUs(rank) * f,
         fmt::format("\"Python id\": {}, \"Python parent id\": {}", pyid++, step_py));
      cpu += im.GcUs(rank) * f;
    }
    const double end = std::max({t0 + st.iteration_us * f, cpu + 10, gpu + 10});
    ev("python_function", "train.py(120): train_step", pid, 1, t0 + 1, end - t0 - 2,
       fmt::format("\"Python id\": {}, \"Python parent id\": 0", step_py));
    ev("user_annotation", fmt::format("ProfilerStep#{}", 100 + it), pid, 1, t0, end - t0,
       step_args);
    t = end + 1;
  }
  o += "\n],\n\"traceName\": ";
  AppendJsonString(fmt::format("rank-{}.json", rank), &o);
  o += fmt::format(",\n\"displayTimeUnit\": \"ms\",\n\"baseTimeNanoseconds\": {}\n}}\n",
                   int64_t(1700000000) * 1000000000);
  return o;
}

StatusOr<RunStats> Run(const Config& config, const std::string& dir) {
  PT_RETURN_IF_ERROR(Validate(config));
  auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "summaries", ec);
  if (ec) return InvalidArgument(fmt::format("{}: cannot create: {}", dir, ec.message()));
  if (config.traces) fs::create_directories(fs::path(dir) / "traces", ec);
  if (ec) return InvalidArgument(fmt::format("{}: cannot create: {}", dir, ec.message()));
  {
    std::string truth = TruthJson(config);
    std::string path = (fs::path(dir) / "truth.json").string();
    std::ofstream out(path, std::ios::binary);
    out << truth;
    if (!out) return InvalidArgument(fmt::format("{}: cannot write", path));
  }
  Simulator sim(config);
  std::atomic<int> next{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> written{0};
  std::mutex mu;
  Status error;
  auto work = [&] {
    for (;;) {
      int r = next.fetch_add(1);
      if (r >= config.workers) return;
      if (!sim.Writes(r)) continue;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!error.ok()) return;
      }
      pattern::RankSummary s = sim.SimulateRank(r);
      std::string path = (fs::path(dir) / "summaries" / fmt::format("rank-{}.summary", r)).string();
      Status st = pattern::WriteSummaryFile(s, path);
      if (st.ok() && config.traces) {
        std::string json = sim.TraceJson(r);
        std::string tpath = (fs::path(dir) / "traces" / fmt::format("rank-{}.json", r)).string();
        std::ofstream out(tpath, std::ios::binary);
        out << json;
        if (!out) st = InvalidArgument(fmt::format("{}: cannot write", tpath));
        bytes += json.size();
      }
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (error.ok()) error = st;
        return;
      }
      bytes += fs::file_size(path, ec);
      ++written;
    }
  };
  const int threads = std::clamp(config.threads, 1, 64);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  if (!error.ok()) return error;
  RunStats stats;
  stats.ranks_written = written;
  stats.bytes = bytes;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace perftracker::sim
