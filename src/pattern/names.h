// Name rules of the pattern layer: what role a function plays, which collective a name means,
// and the nccl-tests bus-bandwidth factors. (NormalizeName is declared in summarizer.h.)
#ifndef PERFTRACKER_PATTERN_NAMES_H_
#define PERFTRACKER_PATTERN_NAMES_H_

#include <string>
#include <string_view>

#include "pattern/pattern.h"
#include "trace/event.h"

namespace perftracker::pattern {

// Normalizes into *out (reusing its capacity), so the hot path does not allocate.
void NormalizeNameInto(std::string_view name, trace::EventKind kind, std::string* out);

FunctionClass ClassifyFunction(trace::EventKind kind, std::string_view name);
// The class of a python_function called below STACK (callers, outermost first, ";"-joined):
// Python code the DataLoader's next() runs (collate, transforms, reads) is data loading; a
// builtin that torch.distributed's Python calls directly (Work.wait(), a process group's send or
// recv, a pipeline schedule's batch wait) is communication: its time is spent waiting for peers.
// So is every frame at or below a functional collective's wait (IsCollectiveWaitFrame).
FunctionClass ClassifyPythonFunction(std::string_view name, std::string_view stack);

// Canonical collective op ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
// "broadcast", "reduce", "send", "recv", "send_recv", "barrier", "gather", "scatter") from a
// "Collective name" arg or an event name (ncclDevKernel_AllReduce_..., gloo:all_reduce,
// c10d::allreduce_, nccl:_all_gather_base); "" if none is recognised.
// _c10d_functional::wait_tensor (torch 2.x's functional collectives) gives "wait".
std::string CollectiveOp(std::string_view name);

// The op of a torch 2.x functional collective ("all_reduce" of "_c10d_functional::all_reduce",
// "wait_tensor" of "_c10d_functional::wait_tensor", the autograd and legacy namespaces alike);
// empty for any other name. A view into NAME.
std::string_view FunctionalCollectiveOp(std::string_view name);

// True for a Python frame that waits for a functional collective: "<built-in method
// wait_tensor ...>" or torch/distributed/_functional_collectives.py's wait_tensor or wait.
bool IsCollectiveWaitFrame(std::string_view frame);

// True for communication between pipeline stages rather than among a group's members: a
// function named as a send or recv (CollectiveOp: gloo:recv, ncclDevKernel_SendRecv, ...), or a
// Python frame called below one (STACK as for ClassifyPythonFunction): torch.distributed's
// send, recv, isend, irecv, batch_isend_irecv, a pipeline schedule's _batch_p2p or
// _wait_batch_p2p ("<built-in method wait>" under
// "torch/distributed/pipelining/schedules.py(678): _wait_batch_p2p" is a stage waiting for its
// neighbour's activations or gradients).
bool IsPointToPoint(std::string_view name, std::string_view stack);

// Whether a process group (a trace's pg_config entry: pg_name, pg_desc) connects the stages of
// a pipeline: named "pp" (Megatron-style), or described as one ("mesh_pp" for a DeviceMesh
// dimension named "pp", "pipeline...", any case).
bool IsPipelineGroup(const trace::ProcessGroup& pg);
// Whether it ties the first pipeline stage to the last for the shared embedding (Megatron's
// EMBEDDING_GROUP, POSITION_EMBEDDING_GROUP): its members are different stages.
bool IsEmbeddingGroup(const trace::ProcessGroup& pg);

// Bytes per element of a Kineto dtype ("Float", "BFloat16", ...); 0 if unknown.
int DtypeBytes(std::string_view dtype);

// nccl-tests bus bandwidth factor for an op in a group of n ranks.
double BusFactor(std::string_view op, int n);

// Kinds the pattern layer treats as GPU-side (kernel, memcpy, memset, gpu annotation).
bool IsGpuEventKind(trace::EventKind kind);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_NAMES_H_
