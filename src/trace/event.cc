#include "trace/event.h"

namespace perftracker::trace {

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kCpuOp:
      return "cpu_op";
    case EventKind::kUserAnnotation:
      return "user_annotation";
    case EventKind::kGpuUserAnnotation:
      return "gpu_user_annotation";
    case EventKind::kPythonFunction:
      return "python_function";
    case EventKind::kCudaRuntime:
      return "cuda_runtime";
    case EventKind::kCudaDriver:
      return "cuda_driver";
    case EventKind::kCudaSync:
      return "cuda_sync";
    case EventKind::kKernel:
      return "kernel";
    case EventKind::kMemcpy:
      return "gpu_memcpy";
    case EventKind::kMemset:
      return "gpu_memset";
    case EventKind::kOther:
      return "other";
  }
  return "other";
}

bool IsGpuKind(EventKind kind) {
  return kind == EventKind::kGpuUserAnnotation || kind == EventKind::kKernel ||
         kind == EventKind::kMemcpy || kind == EventKind::kMemset;
}

}  // namespace perftracker::trace
