// perftracker._worker's hooks on Python's allocators (the PyMem and PyObject domains) for a
// window that samples the Python heap (worker/heap_sampler.h): installed when such a window
// arms, wrapping whatever allocator is there (as tracemalloc does), and removed when it ends
// unless something wrapped them since (then they stay, idle: one thread-local test an
// allocation). Only the armed thread's allocations are sampled, placed at its call tree's
// current node; every thread's frees forget their samples.
//
// Owns the sampler and the hooks. Everything runs with the GIL held (those domains require it).
#ifndef PERFTRACKER_WORKER_PY_HEAP_HOOKS_H_
#define PERFTRACKER_WORKER_PY_HEAP_HOOKS_H_

#include <atomic>
#include <cstdint>

#include "worker/call_tree.h"
#include "worker/heap_sampler.h"

namespace perftracker::worker::py {

// The calling (armed) thread's allocations are sampled from now on, placed in TREE (which must
// outlive StopHeapSampling); none once FAILED is set (the collector turned itself off).
void StartHeapSampling(CallTree* tree, uint64_t seed, const std::atomic<bool>* failed);
// Ends the sampling and gives what is kept (empty when none was under way).
KeptHeap StopHeapSampling();
// A block Python's allocators never see (a tensor's storage), of N bytes at ADDR, made by op
// OP (a name id of TREE's window) on the calling thread: kept whole at its call tree's current
// node while that thread's window samples, else ignored.
void KeepBlock(uintptr_t addr, size_t n, uint32_t op);
// That block is freed (or no longer to be followed): forgotten, on any thread.
void ForgetBlock(uintptr_t addr);
// A forked child: the sampling (the parent's) is dropped without a word.
void HeapSamplingAfterFork();

}  // namespace perftracker::worker::py

#endif  // PERFTRACKER_WORKER_PY_HEAP_HOOKS_H_
