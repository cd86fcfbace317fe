#include "worker/py/heap_hooks.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace perftracker::worker::py {
namespace {

struct Domain {
  PyMemAllocatorDomain domain;
  PyMemAllocatorEx orig;  // what the hook wraps
  bool installed;
};
Domain g_domains[] = {{PYMEM_DOMAIN_MEM, {}, false}, {PYMEM_DOMAIN_OBJ, {}, false}};

HeapSampler g_sampler;
CallTree* g_tree = nullptr;
const std::atomic<bool>* g_failed = nullptr;
thread_local bool t_sampling = false;  // the armed thread, while its window samples

void Sample(void* p, size_t n) {
  if (g_failed != nullptr && g_failed->load(std::memory_order_relaxed)) return;
  g_sampler.Record(reinterpret_cast<uintptr_t>(p), n, g_tree->current_node(), g_tree->iteration());
}

void* Malloc(void* ctx, size_t n) {
  const Domain* d = static_cast<const Domain*>(ctx);
  void* p = d->orig.malloc(d->orig.ctx, n);
  if (p != nullptr && t_sampling && g_sampler.Countdown(n)) Sample(p, n);
  return p;
}

void* Calloc(void* ctx, size_t nelem, size_t elsize) {
  const Domain* d = static_cast<const Domain*>(ctx);
  void* p = d->orig.calloc(d->orig.ctx, nelem, elsize);
  // A product that overflows never returns a block.
  if (p != nullptr && t_sampling && g_sampler.Countdown(nelem * elsize)) Sample(p, nelem * elsize);
  return p;
}

void* Realloc(void* ctx, void* ptr, size_t n) {
  const Domain* d = static_cast<const Domain*>(ctx);
  void* p = d->orig.realloc(d->orig.ctx, ptr, n);
  if (p == nullptr) return p;  // the old block stays, and so does its sample
  if (ptr != nullptr) g_sampler.Forget(reinterpret_cast<uintptr_t>(ptr));
  if (t_sampling && g_sampler.Countdown(n)) Sample(p, n);
  return p;
}

void Free(void* ctx, void* ptr) {
  const Domain* d = static_cast<const Domain*>(ctx);
  if (ptr != nullptr) g_sampler.Forget(reinterpret_cast<uintptr_t>(ptr));
  d->orig.free(d->orig.ctx, ptr);
}

}  // namespace

void StartHeapSampling(CallTree* tree, uint64_t seed, const std::atomic<bool>* failed) {
  g_tree = tree;
  g_failed = failed;
  g_sampler.Begin(seed);
  for (Domain& d : g_domains) {
    if (d.installed) continue;  // left in place by an earlier window (something wrapped it)
    PyMem_GetAllocator(d.domain, &d.orig);
    PyMemAllocatorEx hook = {&d, Malloc, Calloc, Realloc, Free};
    PyMem_SetAllocator(d.domain, &hook);
    d.installed = true;
  }
  t_sampling = true;
}

KeptHeap StopHeapSampling() {
  t_sampling = false;
  for (Domain& d : g_domains) {
    if (!d.installed) continue;
    PyMemAllocatorEx now;
    PyMem_GetAllocator(d.domain, &now);
    // Only our own hook comes out: one installed over it (tracemalloc started meanwhile) still
    // calls it, and blocks it made belong to the allocator below either way.
    if (now.malloc == Malloc && now.ctx == &d) {
      PyMem_SetAllocator(d.domain, &d.orig);
      d.installed = false;
    }
  }
  KeptHeap kept = g_sampler.Finish();
  g_tree = nullptr;
  return kept;
}

void KeepBlock(uintptr_t addr, size_t n, uint32_t op) {
  if (!t_sampling || g_tree == nullptr) return;
  if (g_failed != nullptr && g_failed->load(std::memory_order_relaxed)) return;
  g_sampler.RecordBlock(addr, n, g_tree->current_node(), g_tree->iteration(), op);
}

void ForgetBlock(uintptr_t addr) { g_sampler.Forget(addr); }

void HeapSamplingAfterFork() {
  t_sampling = false;
  (void)g_sampler.Finish();
  g_tree = nullptr;
}

}  // namespace perftracker::worker::py
