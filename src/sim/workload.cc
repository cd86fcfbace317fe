#include "sim/workload.h"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "pattern/names.h"
#include "pattern/summarizer.h"

namespace perftracker::sim {

using pattern::FunctionClass;
using trace::EventKind;

namespace {

// Kernel names as CUDA spells them in a trace.
constexpr char kGemmTn[] = "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn";
constexpr char kGemmSmall[] = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn";
constexpr char kGemmNn[] = "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn";
constexpr char kGemmNt[] = "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nt";
constexpr char kFlashFwd[] =
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, true, true, false>(Flash_fwd_params)";
constexpr char kFlashBwd[] =
    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, "
    "2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, "
    "cutlass::bfloat16_t> >, true, false, false, false, true>(Flash_bwd_params)";
constexpr char kLayerNorm[] =
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
    "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
    "float*, float*, c10::BFloat16*)";
constexpr char kLayerNormGrad[] =
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<c10::BFloat16, "
    "float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
    "c10::BFloat16 const*, c10::BFloat16*, int)";
constexpr char kGelu[] =
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, "
    "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)";
constexpr char kGeluBwd[] =
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, "
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3>)";
constexpr char kAdd[] =
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, "
    "at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)";
constexpr char kMul[] =
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)";
constexpr char kDropout[] =
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, "
    "unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
    "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
    "at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, "
    "at::PhiloxCudaState)";
constexpr char kTiny[] =
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)";

// Where a function is called from: a base stack of the training loop, then `under` frames.
enum class Stack : uint8_t {
  kNone,     // kernels, runtime calls and the autograd thread's ops
  kModule,   // the script's top level
  kTop,      // inside train_step
  kForward,  // inside a microbatch's forward_step
  kHead,     // inside the model's output layer
};

std::string StackOf(Stack base, const char* under) {
  const std::string module = "train.py(241): <module>";
  const std::string top = module + ";train.py(120): train_step";
  const std::string fwd = top + ";megatron/core/pipeline_parallel/schedules.py(196): forward_step";
  std::string s;
  switch (base) {
    case Stack::kNone:
      break;
    case Stack::kModule:
      s = module;
      break;
    case Stack::kTop:
      s = top;
      break;
    case Stack::kForward:
      s = fwd;
      break;
    case Stack::kHead:
      s = fwd + ";nn.Module: GPTModel_0";
      break;
  }
  if (under != nullptr) s += std::string(";") + under;
  return s;
}

// A stage's place in the pipeline, which its call counts depend on.
struct StageShape {
  int m = kMicrobatches;
  int per = 0;  // per-layer kernels per iteration: layers x microbatches
  bool first = false;
  bool last = false;
  int neighbours = 0;  // pipeline stages it exchanges activations with
};

// Calls per iteration, as a sum of terms.
struct Calls {
  int per_layer = 0;        // x layers x microbatches
  int per_micro = 0;        // x microbatches
  int fixed = 0;            // per iteration
  int first_micro = 0;      // x microbatches, first stage only
  int last_micro = 0;       // x microbatches, last stage only
  int neighbour_micro = 0;  // x microbatches x pipeline neighbours
};

int Count(const Calls& c, const StageShape& s) {
  return c.per_layer * s.per + c.per_micro * s.m + c.fixed + (s.first ? c.first_micro * s.m : 0) +
         (s.last ? c.last_micro * s.m : 0) + c.neighbour_micro * s.m * s.neighbours;
}

// One function of the stage table.
struct Row {
  const char* raw;
  EventKind kind;
  Role role;
  double base_us;
  Calls calls;
  Stack stack = Stack::kNone;
  const char* under = nullptr;
  double self_frac = 1;  // share of its time not spent in what it encloses
};

constexpr EventKind kPy = EventKind::kPythonFunction;
constexpr EventKind kCpu = EventKind::kCpuOp;
constexpr EventKind kKernel = EventKind::kKernel;
constexpr EventKind kRuntime = EventKind::kCudaRuntime;
constexpr EventKind kAnnotation = EventKind::kUserAnnotation;

// The tables keep one function a row (clang-format would put every field on a line).
// clang-format off

// Python and the main loop: every stage.
const Row kStepRows[] = {
    {"train.py(120): train_step", kPy, Role::kTrainStep, 0, {.fixed = 1}, Stack::kModule, nullptr,
     0.01},
    {"megatron/core/pipeline_parallel/schedules.py(196): forward_step", kPy, Role::kPython, 900,
     {.per_micro = 1}, Stack::kTop, nullptr, 0.05},
    {"megatron/core/pipeline_parallel/schedules.py(302): backward_step", kPy, Role::kPython, 700,
     {.per_micro = 1}, Stack::kTop, nullptr, 0.05},
};

// The first stage reads the data and embeds the tokens.
const Row kFirstStageRows[] = {
    {"enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", kAnnotation, Role::kLoader,
     2500, {.fixed = 1}, Stack::kTop},
    {"nn.Module: VocabParallelEmbedding_0", kPy, Role::kPython, 60, {.per_micro = 1},
     Stack::kForward},
    {"aten::embedding", kCpu, Role::kCpuOp, 35, {.per_micro = 1}, Stack::kForward,
     "nn.Module: VocabParallelEmbedding_0"},
    {"void at::native::(anonymous namespace)::indexSelectLargeIndex<"
     "c10::BFloat16, long, unsigned int, 2, 2, -2, true>("
     "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
     "at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
     "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, "
     "unsigned int, unsigned int, long)",
     kKernel, Role::kComputeKernel, 150, {.per_micro = 1}},
    {"void at::native::(anonymous namespace)::embedding_backward_feature_"
     "kernel<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, "
     "c10::BFloat16*, int, long, int)",
     kKernel, Role::kComputeKernel, 400, {.per_micro = 1}},
    {"Memcpy HtoD (Pinned -> Device)", EventKind::kMemcpy, Role::kMemcpy, 90, {.fixed = 2}},
    {"aten::to", kCpu, Role::kCpuOp, 40, {.fixed = 2}, Stack::kTop},
    {"cudaMemcpyAsync", kRuntime, Role::kLaunch, 12, {.fixed = 2}},
};

// Backward CPU ops run on the autograd thread: no Python stack, one function per op.
const Row kAutogradRows[] = {
    {"autograd::engine::evaluate_function: MmBackward0", kCpu, Role::kCpuOp, 70,
     {.per_layer = 4}},
    {"autograd::engine::evaluate_function: NativeLayerNormBackward0", kCpu, Role::kCpuOp, 40,
     {.per_layer = 2}},
    {"autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", kCpu,
     Role::kCpuOp, 80, {.per_layer = 1}},
    {"autograd::engine::evaluate_function: GeluBackward0", kCpu, Role::kCpuOp, 30,
     {.per_layer = 1}},
    {"autograd::engine::evaluate_function: AddBackward0", kCpu, Role::kCpuOp, 12,
     {.per_layer = 2}},
    {"autograd::engine::evaluate_function: NativeDropoutBackward0", kCpu, Role::kCpuOp, 20,
     {.per_layer = 1}},
    {"autograd::engine::evaluate_function: ViewBackward0", kCpu, Role::kCpuOp, 8,
     {.per_layer = 3}},
};

// GPU kernels of the layers and the optimizer: one function per kernel name (kernels carry no
// stack). The last stage runs one more of each GEMM per microbatch (the output layer).
const Row kKernelRows[] = {
    {kGemmTn, kKernel, Role::kComputeKernel, 180, {.per_layer = 3, .last_micro = 1}},
    {kGemmSmall, kKernel, Role::kComputeKernel, 90, {.per_layer = 1}},
    {kFlashFwd, kKernel, Role::kComputeKernel, 220, {.per_layer = 1}},
    {kLayerNorm, kKernel, Role::kComputeKernel, 25, {.per_layer = 2}},
    {kGelu, kKernel, Role::kComputeKernel, 40, {.per_layer = 1}},
    {kAdd, kKernel, Role::kComputeKernel, 15, {.per_layer = 2}},
    {kDropout, kKernel, Role::kComputeKernel, 20, {.per_layer = 1}},
    {kGemmNn, kKernel, Role::kComputeKernel, 180, {.per_layer = 4, .last_micro = 1}},
    {kGemmNt, kKernel, Role::kComputeKernel, 170, {.per_layer = 4, .last_micro = 1}},
    {kFlashBwd, kKernel, Role::kComputeKernel, 500, {.per_layer = 1}},
    {kLayerNormGrad, kKernel, Role::kComputeKernel, 45, {.per_layer = 2}},
    {kGeluBwd, kKernel, Role::kComputeKernel, 60, {.per_layer = 1}},
    {kMul, kKernel, Role::kComputeKernel, 15, {.per_layer = 2}},
    {"void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<c10::BFloat16, float, "
     "int>, float, float, float, float, float, float, adamMode_t, float>(long, int volatile*, "
     "TensorListMetadata<4>&, AdamFunctor<c10::BFloat16, float, int>, float, float, float, "
     "float, float, float, adamMode_t, float)",
     kKernel, Role::kComputeKernel, 60, {.fixed = 40}},
};

// The last stage computes the loss.
const Row kLastStageRows[] = {
    {"nn.Module: ParallelLMHead_0", kPy, Role::kPython, 90, {.per_micro = 1}, Stack::kHead},
    {"megatron/core/tensor_parallel/cross_entropy.py(27): forward", kPy, Role::kPython, 140,
     {.per_micro = 1}, Stack::kHead},
    {"aten::_log_softmax", kCpu, Role::kCpuOp, 30, {.per_micro = 1}, Stack::kHead,
     "megatron/core/tensor_parallel/cross_entropy.py(27): forward"},
    {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, "
     "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(c10::BFloat16*, "
     "c10::BFloat16 const*, int)",
     kKernel, Role::kComputeKernel, 300, {.per_micro = 1}},
    {"void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, "
     "float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>("
     "c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, int)",
     kKernel, Role::kComputeKernel, 320, {.per_micro = 1}},
};

// The tiny-kernels fault: per-parameter work launched one tensor at a time (launch-bound).
const Row kTinyKernelRows[] = {
    {kTiny, kKernel, Role::kTinyKernel, kTinyKernelUs, {.fixed = kTinyKernels}},
    {"aten::fill_", kCpu, Role::kCpuOp, kTinyFillUs, {.fixed = kTinyKernels}, Stack::kTop,
     "megatron/core/optimizer/clip_grads.py(54): clip_grad_norm_fp32"},
};

// The sync fault: the loss read back to the host every few steps.
const Row kSyncRows[] = {
    {"cudaDeviceSynchronize", kRuntime, Role::kSync, 0, {.fixed = kSyncCalls}, Stack::kTop},
    {"aten::item", kCpu, Role::kSync, 0, {.fixed = kSyncCalls}, Stack::kTop,
     "train.py(151): report_loss"},
    {"aten::_local_scalar_dense", kCpu, Role::kCpuOp, 12, {.fixed = kSyncCalls}, Stack::kTop,
     "train.py(151): report_loss;aten::item"},
};

// Runtime calls after the kernel launches, and the optimizer.
const Row kRuntimeRows[] = {
    {"cudaStreamWaitEvent", kRuntime, Role::kLaunch, 3, {.per_layer = 2, .fixed = 8}},
    {"cudaEventRecord", kRuntime, Role::kLaunch, 3, {.per_layer = 2, .fixed = 8}},
    {"Optimizer.step#FusedAdam.step", kAnnotation, Role::kOptimizer, 4000, {.fixed = 1},
     Stack::kTop, nullptr, 0.3},
    {"Optimizer.zero_grad#FusedAdam.zero_grad", kAnnotation, Role::kOptimizer, 500, {.fixed = 1},
     Stack::kTop},
};

// Collectives, each in a group that exists only when its layout dimension is over 1. Each
// group has its own stream, as NCCL communicators do.
struct CollectiveRow {
  const char* raw;
  Role role;
  const char* op;
  double msg_bytes;
  Calls calls;
  int stream;
};
const CollectiveRow kCollectiveRows[] = {
    {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL", Role::kCollTp, "all_reduce", kTpMsgBytes,
     {.per_layer = 4, .first_micro = 2, .last_micro = 3}, 13},
    {"ncclDevKernel_SendRecv", Role::kCollPp, "send_recv", kPpMsgBytes, {.neighbour_micro = 2},
     17},
    {"ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", Role::kCollDp, "reduce_scatter", kDpMsgBytes,
     {.fixed = kDpBuckets}, 21},
    {"ncclDevKernel_AllGather_RING_LL", Role::kCollDp, "all_gather", kDpMsgBytes,
     {.fixed = kDpBuckets}, 21},
    {"ncclDevKernel_AllToAll_RING_LL", Role::kCollEp, "all_to_all", kEpMsgBytes,
     {.per_layer = 4}, 25},
};

// clang-format on

// The modules of one transformer layer. kLayer doubles as "no module below the layer".
enum LayerModule : uint8_t { kLayer, kAttn, kMlp, kLn1, kLn2, kQkv, kProj, kFc1, kFc2, kModules };
using LayerNames = std::array<std::string, kModules>;

// Layer k's module names; an expert-parallel job's MLP is a SwitchMLP.
LayerNames LayerModuleNames(int k, bool moe) {
  return {
      fmt::format("nn.Module: ParallelTransformerLayer_{}", k),
      fmt::format("nn.Module: ParallelAttention_{}", k),
      moe ? fmt::format("nn.Module: SwitchMLP_{}", k) : fmt::format("nn.Module: ParallelMLP_{}", k),
      fmt::format("nn.Module: FusedLayerNorm_{}", 2 * k),
      fmt::format("nn.Module: FusedLayerNorm_{}", 2 * k + 1),
      fmt::format("nn.Module: ColumnParallelLinear_{}", 2 * k),
      fmt::format("nn.Module: RowParallelLinear_{}", 2 * k),
      fmt::format("nn.Module: ColumnParallelLinear_{}", 2 * k + 1),
      fmt::format("nn.Module: RowParallelLinear_{}", 2 * k + 1)};
}

constexpr double kLayerUs = 620;          // the layer module's forward, per microbatch
constexpr double kLayerSelfFrac = 0.06;   // most of it is in its submodules
constexpr double kModuleSelfFrac = 0.15;  // a submodule's own Python around its ops

// The layer's submodules: (module, parent, microseconds per microbatch).
struct ModuleRow {
  LayerModule module;
  LayerModule parent;
  double us;
};
const ModuleRow kModuleRows[] = {{kAttn, kLayer, 260}, {kMlp, kLayer, 210}, {kLn1, kLayer, 40},
                                 {kLn2, kLayer, 40},   {kQkv, kAttn, 70},   {kProj, kAttn, 70},
                                 {kFc1, kMlp, 70},     {kFc2, kMlp, 70}};

// The layer's forward CPU ops, under up to two of its modules.
struct LayerOpRow {
  const char* name;
  LayerModule outer;
  LayerModule inner;
  double us;
};
const LayerOpRow kLayerOpRows[] = {
    {"aten::layer_norm", kLn1, kLayer, 30},
    {"aten::layer_norm", kLn2, kLayer, 30},
    {"aten::linear", kAttn, kQkv, 45},
    {"aten::linear", kAttn, kProj, 45},
    {"aten::_scaled_dot_product_flash_attention", kAttn, kLayer, 60},
    {"aten::add", kLayer, kLayer, 15},
    {"aten::dropout", kAttn, kLayer, 25},
    {"aten::linear", kMlp, kFc1, 45},
    {"aten::gelu", kMlp, kLayer, 20},
    {"aten::linear", kMlp, kFc2, 45},
    {"aten::copy_", kAttn, kLayer, 18},
    {"aten::view", kAttn, kLayer, 4},
};

// The stack LAYER_STACK extended by up to two of the layer's modules.
std::string UnderLayer(const std::string& layer_stack, const LayerNames& names, LayerModule outer,
                       LayerModule inner) {
  std::string s = layer_stack;
  for (LayerModule x : {outer, inner}) {
    if (x != kLayer) s += ";" + names[x];
  }
  return s;
}

// Per-layer Python modules and CPU ops of global layer k: distinct per layer through their
// stacks, so stages differ by their layer numbers.
void AddLayer(int k, bool moe, std::vector<Spec>* s) {
  const std::string fwd = StackOf(Stack::kForward, nullptr);
  const LayerNames names = LayerModuleNames(k, moe);
  const std::string ls = fwd + ";" + names[kLayer];
  const int m = kMicrobatches;
  Spec ly = MakeSpec(names[kLayer], kPy, Role::kPython, kLayerUs, m, fwd);
  ly.self_frac = kLayerSelfFrac;
  s->push_back(ly);
  for (const ModuleRow& r : kModuleRows) {
    Spec p = MakeSpec(names[r.module], kPy, Role::kPython, r.us, m,
                      UnderLayer(ls, names, r.parent, kLayer));
    p.self_frac = kModuleSelfFrac;
    s->push_back(p);
  }
  for (const LayerOpRow& r : kLayerOpRows) {
    s->push_back(
        MakeSpec(r.name, kCpu, Role::kCpuOp, r.us, m, UnderLayer(ls, names, r.outer, r.inner)));
  }
}

// Appends the rows' functions; returns the kernel calls among them (launches to count).
template <size_t N>
int AddRows(const Row (&rows)[N], const StageShape& shape, std::vector<Spec>* s) {
  int kernels = 0;
  for (const Row& r : rows) {
    Spec spec = MakeSpec(r.raw, r.kind, r.role, r.base_us, Count(r.calls, shape),
                         StackOf(r.stack, r.under));
    spec.self_frac = r.self_frac;
    if (r.kind == kKernel) kernels += spec.calls;
    s->push_back(std::move(spec));
  }
  return kernels;
}

// The layout dimension a collective role's group spans.
int Dimension(const Layout& l, Role role) {
  switch (role) {
    case Role::kCollTp:
      return l.tp;
    case Role::kCollPp:
      return l.pp;
    case Role::kCollDp:
      return l.dp;
    case Role::kCollEp:
      return l.ep;
    default:
      return 1;
  }
}

}  // namespace

bool IsCollective(Role role) { return role >= Role::kCollTp && role <= Role::kCollEp; }

const char* GroupName(Role role) {
  switch (role) {
    case Role::kCollTp:
      return "tp";
    case Role::kCollPp:
      return "pp";
    case Role::kCollDp:
      return "dp";
    case Role::kCollEp:
      return "ep";
    default:
      return "";
  }
}

Spec MakeSpec(std::string raw, EventKind kind, Role role, double base_us, int calls,
              std::string stack) {
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

std::vector<Spec> StageSpecs(const Config& cfg, int stage) {
  const Layout& l = cfg.layout;
  StageShape shape;
  shape.first = stage == 0;
  shape.last = stage == l.pp - 1;
  shape.per = cfg.layers * shape.m;
  shape.neighbours = (shape.first ? 0 : 1) + (shape.last ? 0 : 1);
  bool tiny = false, sync = false;
  for (const Fault& f : cfg.faults) {
    tiny |= f.kind == FaultKind::kTinyKernels;
    sync |= f.kind == FaultKind::kSync;
  }
  std::vector<Spec> s;
  AddRows(kStepRows, shape, &s);
  // The embedding's two kernels are left out of the cudaLaunchKernel count, as the model has
  // always had it (changing it would change every simulated job's output).
  if (shape.first) AddRows(kFirstStageRows, shape, &s);
  for (int i = 0; i < cfg.layers; ++i) AddLayer(stage * cfg.layers + i, l.ep > 1, &s);
  AddRows(kAutogradRows, shape, &s);
  int launches = AddRows(kKernelRows, shape, &s);
  if (shape.last) launches += AddRows(kLastStageRows, shape, &s);
  if (tiny) launches += AddRows(kTinyKernelRows, shape, &s);
  if (sync) AddRows(kSyncRows, shape, &s);
  // Runtime calls: one launch per kernel.
  s.push_back(MakeSpec("cudaLaunchKernel", kRuntime, Role::kLaunch, kLaunchUs, launches));
  AddRows(kRuntimeRows, shape, &s);
  for (const CollectiveRow& r : kCollectiveRows) {
    if (Dimension(l, r.role) <= 1) continue;
    Spec c = MakeSpec(r.raw, kKernel, r.role, 0, Count(r.calls, shape));
    c.fclass = FunctionClass::kCollective;
    c.op = r.op;
    c.msg_bytes = r.msg_bytes;
    c.stream = r.stream;
    s.push_back(std::move(c));
  }
  return s;
}

}  // namespace perftracker::sim
