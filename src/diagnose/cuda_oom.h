// cuda_oom: what PyTorch's caching allocator says when a GPU allocation fails, read from a
// rank's last error output (the launcher keeps its stderr tail), so that a rank that died of
// it reads "out of GPU memory" with the allocator's own figures instead of "exited with code 1":
//
//   torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total
//   capacity of 79.15 GiB of which 1.19 GiB is free. Including non-PyTorch memory, this process
//   has 77.95 GiB memory in use. Of the allocated memory 75.30 GiB is allocated by PyTorch, and
//   1.52 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large
//   try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.
//
// (torch 2.x; 1.13 says "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0;
// 79.15 GiB total capacity; 75.30 GiB already allocated; 1.19 GiB free; 76.82 GiB reserved in
// total by PyTorch)". Each figure is optional: what the message holds is kept.)
#ifndef PERFTRACKER_DIAGNOSE_CUDA_OOM_H_
#define PERFTRACKER_DIAGNOSE_CUDA_OOM_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace perftracker::diagnose {

// "2.00 GiB" -> 2147483648, "512 bytes" -> 512, "20.00 MiB" -> 20971520 (B, bytes, KiB, MiB,
// GiB, TiB; KB/MB/GB read as their binary sizes, as torch prints them); nullopt otherwise.
std::optional<double> ParseTorchSize(std::string_view text);

struct CudaOom {
  int gpu = -1;                            // the device index (-1: not said)
  double requested_bytes = -1;             // what the failed allocation asked for
  double total_bytes = -1;                 // the device's capacity
  double free_bytes = -1;                  // free on the device when it failed
  double allocated_bytes = -1;             // held by PyTorch's tensors
  double reserved_unallocated_bytes = -1;  // cached by the allocator but not in tensors
  double reserved_bytes = -1;              // torch 1.13: reserved in total
};

// The CUDA out-of-memory error among LINES (a rank's last stderr lines), or nullopt.
std::optional<CudaOom> FindCudaOom(const std::vector<std::string>& lines);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_CUDA_OOM_H_
