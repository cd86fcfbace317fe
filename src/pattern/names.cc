#include "pattern/names.h"

#include <algorithm>
#include <cctype>

#include "pattern/summarizer.h"

namespace perftracker::pattern {
namespace {

using trace::EventKind;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool Contains(std::string_view s, std::string_view p) { return s.find(p) != s.npos; }

// Lowercase with '_' and ' ' dropped, so "all_reduce", "allreduce", "AllReduce" compare equal.
std::string Squash(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '_' || c == ' ' || c == '-') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

std::string OpFromSquashed(std::string_view s) {
  // Longer / more specific prefixes first: "reduce" is a prefix of "reducescatter".
  static constexpr std::pair<std::string_view, std::string_view> kOps[] = {
      {"allreduce", "all_reduce"},
      {"allgather", "all_gather"},
      {"reducescatter", "reduce_scatter"},
      {"alltoall", "all_to_all"},
      {"broadcast", "broadcast"},
      {"sendrecv", "send_recv"},
      {"barrier", "barrier"},
      {"gather", "gather"},
      {"scatter", "scatter"},
      {"reduce", "reduce"},
      {"send", "send"},
      {"recv", "recv"},
  };
  for (const auto& [prefix, op] : kOps) {
    if (StartsWith(s, prefix)) return std::string(op);
  }
  return "";
}

// The method a builtin frame calls: "allreduce" of "<built-in method allreduce of
// PyCapsule object at 0x1>", "isinstance" of "<built-in function isinstance>"; empty for any
// other frame.
std::string_view BuiltinName(std::string_view frame) {
  for (std::string_view p : {"<built-in method ", "<built-in function "}) {
    if (StartsWith(frame, p)) {
      const std::string_view rest = frame.substr(p.size());
      return rest.substr(0, rest.find_first_of(" >"));
    }
  }
  return {};
}

// Whether builtin NAME communicates: a wait (Work.wait(), a future's, wait_tensor), a process
// group's collective or transfer (allreduce, _allgather_base, send, recv, barrier, ...),
// coalescing them. torch.distributed's Python also calls isinstance, len, a tensor's detach or
// div_: its own work, not the peers'.
bool IsCommunicationBuiltin(std::string_view name) {
  if (Contains(name, "wait") || Contains(name, "coalesc")) return true;
  while (!name.empty() && name.front() == '_') name.remove_prefix(1);
  return !OpFromSquashed(Squash(name)).empty();
}

}  // namespace

bool IsGpuEventKind(EventKind kind) {
  return kind == EventKind::kKernel || kind == EventKind::kMemcpy || kind == EventKind::kMemset ||
         kind == EventKind::kGpuUserAnnotation;
}

void NormalizeNameInto(std::string_view name, EventKind kind, std::string* out) {
  out->clear();
  const bool kernel = kind == EventKind::kKernel;
  size_t i = 0;
  while (i < name.size()) {
    const char c = name[i];
    if (kernel && c == '<') {
      // Collapse a balanced template argument list; an unbalanced '<' is kept as is.
      int depth = 0;
      size_t j = i;
      for (; j < name.size(); ++j) {
        if (name[j] == '<') ++depth;
        if (name[j] == '>' && --depth == 0) break;
      }
      if (j < name.size()) {
        out->append("<>");
        i = j + 1;
        continue;
      }
    }
    if (c == '0' && i + 2 < name.size() && (name[i + 1] == 'x' || name[i + 1] == 'X') &&
        IsHex(name[i + 2]) && (i == 0 || !IsAlpha(name[i - 1]))) {
      size_t j = i + 2;
      while (j < name.size() && IsHex(name[j])) ++j;
      out->append("0x");
      i = j;
      continue;
    }
    if (IsDigit(c)) {
      size_t j = i;
      while (j < name.size() && IsDigit(name[j])) ++j;
      // Kernel names embed tile sizes and arch tags glued to letters (s1688gemm): part of the
      // identity, not a counter, so those runs stay.
      const bool glued =
          kernel && ((i > 0 && IsAlpha(name[i - 1])) || (j < name.size() && IsAlpha(name[j])));
      if (j - i >= 4 && !glued) {
        out->push_back('N');
      } else {
        out->append(name.substr(i, j - i));
      }
      i = j;
      continue;
    }
    out->push_back(c);
    ++i;
  }
}

std::string NormalizeName(std::string_view name, EventKind kind) {
  std::string out;
  NormalizeNameInto(name, kind, &out);
  return out;
}

FunctionClass ClassifyFunction(EventKind kind, std::string_view name) {
  switch (kind) {
    case EventKind::kKernel:
      return StartsWith(name, "nccl") ? FunctionClass::kCollective : FunctionClass::kCompute;
    case EventKind::kMemcpy:
    case EventKind::kMemset:
      return FunctionClass::kMemcpy;
    case EventKind::kCudaSync:
      return FunctionClass::kSync;
    case EventKind::kOther:
      return FunctionClass::kOther;
    default:
      break;
  }
  if (kind == EventKind::kCudaRuntime || kind == EventKind::kCudaDriver) {
    if (name == "cudaDeviceSynchronize" || name == "cudaStreamSynchronize" ||
        name == "cudaEventSynchronize" || name == "cuCtxSynchronize" ||
        name == "cuStreamSynchronize" || name == "cuEventSynchronize") {
      return FunctionClass::kSync;
    }
    if (StartsWith(name, "cudaMemcpy") || StartsWith(name, "cudaMemset") ||
        StartsWith(name, "cuMemcpy") || StartsWith(name, "cuMemset")) {
      return FunctionClass::kMemcpy;
    }
    return FunctionClass::kLaunch;
  }
  // GPU-side copies of CPU annotations (nccl:all_reduce, Optimizer.step#...) are annotations
  // only: the kernels under them already carry the time.
  if (kind == EventKind::kGpuUserAnnotation) return FunctionClass::kAnnotation;
  // CPU side: cpu_op, user annotations, python functions.
  if (StartsWith(name, "record_param_comms")) return FunctionClass::kCollective;
  if (StartsWith(name, "gloo:") || StartsWith(name, "nccl:")) return FunctionClass::kCollective;
  if (StartsWith(name, "c10d::") && !CollectiveOp(name.substr(6)).empty()) {
    return FunctionClass::kCollective;
  }
  // torch 2.x's functional collectives (DTensor, tensor parallel, torch.compile):
  // _c10d_functional::all_reduce only issues the collective, and wait_tensor is where the rank
  // waits for its peers, so both are communication, not the rank's own work.
  if (const std::string_view op = FunctionalCollectiveOp(name); !op.empty()) {
    if (op == "wait_tensor" || !CollectiveOp(op).empty()) return FunctionClass::kCollective;
  }
  // FSDP2's own ranges around its collectives ("FSDP::all_gather (blocks.1)",
  // "FSDP::post_backward_reduce", "FSDP::post_backward_rs_wait"): on gloo the wait for the
  // slowest peer is their self time (measured: 57.9 ms on the rank that waited, 8.8 ms on its
  // peers). Their copy-in and copy-out are the rank's own work.
  if (StartsWith(name, "FSDP::") && !Contains(name, "copy_in") && !Contains(name, "copy_out") &&
      (StartsWith(name, "FSDP::all_gather") || StartsWith(name, "FSDP::reduce_scatter") ||
       StartsWith(name, "FSDP::post_backward_reduce") || Contains(name, "_wait"))) {
    return FunctionClass::kCollective;
  }
  if (StartsWith(name, "enumerate(DataLoader)") || Contains(name, "DataLoader") ||
      (Contains(name, "dataloader") &&
       (Contains(name, "_next_data") || Contains(name, "__next__")))) {
    return FunctionClass::kDataLoader;
  }
  if (StartsWith(name, "Optimizer.step#") || StartsWith(name, "Optimizer.zero_grad#")) {
    return FunctionClass::kOptimizer;
  }
  if (Contains(name, "gc.collect") || Contains(name, "<gc>") || Contains(name, "gc_collect")) {
    return FunctionClass::kGc;
  }
  if (name == "aten::item" || name == "aten::_local_scalar_dense") return FunctionClass::kSync;
  switch (kind) {
    case EventKind::kPythonFunction:
      return FunctionClass::kPython;
    case EventKind::kUserAnnotation:
    case EventKind::kGpuUserAnnotation:
      return FunctionClass::kAnnotation;
    default:
      return FunctionClass::kCompute;
  }
}

FunctionClass ClassifyPythonFunction(std::string_view name, std::string_view stack) {
  const FunctionClass c = ClassifyFunction(trace::EventKind::kPythonFunction, name);
  if (c != FunctionClass::kPython) return c;
  // Everything a functional collective's wait runs is waiting for peers: under
  // <built-in method wait_tensor> the op's autograd wrapper redispatches to the C++ wait, and
  // a tracer that does not see that pybind call books the wait as the Python frame's self time.
  if (IsCollectiveWaitFrame(name)) return FunctionClass::kCollective;
  for (size_t at = 0; at < stack.size();) {
    const size_t end = std::min(stack.find(';', at), stack.size());
    if (IsCollectiveWaitFrame(stack.substr(at, end - at))) return FunctionClass::kCollective;
    at = end + 1;
  }
  if (stack.empty()) return c;
  if (StartsWith(name, "<built-in")) {
    const size_t last = stack.rfind(';');
    const std::string_view caller = last == stack.npos ? stack : stack.substr(last + 1);
    if (Contains(caller, "torch/distributed/") && IsCommunicationBuiltin(BuiltinName(name)))
      return FunctionClass::kCollective;
  }
  const size_t at = stack.find("torch/utils/data/dataloader.py(");
  if (at == std::string_view::npos) return c;
  const std::string_view rest = stack.substr(at);
  return rest.find("__next__") != std::string_view::npos ||
                 rest.find("_next_data") != std::string_view::npos
             ? FunctionClass::kDataLoader
             : c;
}

std::string CollectiveOp(std::string_view name) {
  if (StartsWith(name, "ncclDevKernel_") || StartsWith(name, "ncclKernel_")) {
    name.remove_prefix(name.find('_') + 1);
    return OpFromSquashed(Squash(name.substr(0, name.find('_'))));
  }
  if (const std::string_view op = FunctionalCollectiveOp(name); !op.empty()) name = op;
  for (std::string_view p : {"gloo:", "nccl:", "c10d::"}) {
    if (StartsWith(name, p)) {
      name.remove_prefix(p.size());
      break;
    }
  }
  if (name == "wait_tensor") return "wait";
  return OpFromSquashed(Squash(name));
}

std::string_view FunctionalCollectiveOp(std::string_view name) {
  // The autograd variant first: "_c10d_functional::" is its prefix.
  for (std::string_view p :
       {"_c10d_functional_autograd::", "_c10d_functional::", "c10d_functional::"}) {
    if (StartsWith(name, p)) return name.substr(p.size());
  }
  return {};
}

bool IsCollectiveWaitFrame(std::string_view frame) {
  if (StartsWith(frame, "<built-in method wait_tensor")) return true;
  const size_t at = frame.find("torch/distributed/_functional_collectives.py(");
  if (at == frame.npos) return false;
  const std::string_view fn = frame.substr(frame.rfind(' ') + 1);
  return fn == "wait_tensor" || fn == "wait";
}

namespace {
// A frame of torch.distributed that sends or receives between two ranks.
bool IsPointToPointFrame(std::string_view frame) {
  if (!Contains(frame, "torch/distributed/")) return false;
  const std::string_view fn = frame.substr(frame.rfind(' ') + 1);
  return fn == "send" || fn == "recv" || fn == "isend" || fn == "irecv" ||
         fn == "batch_isend_irecv" || Contains(fn, "p2p");
}
}  // namespace

bool IsPointToPoint(std::string_view name, std::string_view stack) {
  const std::string op = CollectiveOp(name);
  if (op == "send" || op == "recv" || op == "send_recv") return true;
  for (size_t at = 0; at < stack.size();) {
    const size_t end = std::min(stack.find(';', at), stack.size());
    if (IsPointToPointFrame(stack.substr(at, end - at))) return true;
    at = end + 1;
  }
  return false;
}

namespace {
std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

bool IsPipelineGroup(const trace::ProcessGroup& pg) {
  const auto named = [](std::string_view raw) {
    const std::string s = Lower(raw);
    return s == "pp" || StartsWith(s, "pp:") || (s.size() > 3 && s.substr(s.size() - 3) == "_pp") ||
           Contains(s, "pipeline");
  };
  return named(pg.name) || named(pg.desc);
}

bool IsEmbeddingGroup(const trace::ProcessGroup& pg) {
  return Contains(Lower(pg.name), "embedding") || Contains(Lower(pg.desc), "embedding");
}

int DtypeBytes(std::string_view d) {
  static constexpr std::pair<std::string_view, int> kSizes[] = {
      {"Float", 4},          {"float", 4},         {"Half", 2},        {"BFloat16", 2},
      {"Double", 8},         {"Long", 8},          {"Int", 4},         {"Short", 2},
      {"Byte", 1},           {"Char", 1},          {"Bool", 1},        {"ComplexFloat", 8},
      {"ComplexDouble", 16}, {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1}, {"UInt32", 4},
      {"UInt64", 8},         {"UInt16", 2}};
  for (const auto& [n, s] : kSizes) {
    if (d == n) return s;
  }
  return 0;
}

double BusFactor(std::string_view op, int n) {
  if (n <= 0) return 1.0;  // group size unknown: report algbw
  const double nn = n;
  if (op == "all_reduce") return 2 * (nn - 1) / nn;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return (nn - 1) / nn;
  return 1.0;
}

}  // namespace perftracker::pattern
