// Where Python's heap grows during a profiling window, at a cost training does not notice: a
// sample of the window's Python allocations (PyMem / PyObject, the objects a metrics history, a
// cache or a list of results keeps), each remembered with the call-stack node that made it
// (worker/call_tree.h) and its window iteration, and forgotten when it is freed. What is left at
// the window's end is the kept memory, by node and iteration: the window file's "kept_memory"
// (base/python_window_format.h), which the summary turns into memory sites
// (pattern/python_window.h) that name where a growing rank keeps memory.
//
// Sampling is by bytes, as tcmalloc's heap profiler does: a countdown of exponentially
// distributed length (mean kHeapSampleMeanBytes) runs down with every allocation's size, and the
// allocation that takes it past zero is sampled. A block of s bytes is sampled with probability
// 1 - exp(-s/mean) and weighs s / (1 - exp(-s/mean)), so the weights of the sampled blocks
// estimate the bytes allocated without bias, small blocks and large. The unsampled allocation
// costs a subtraction; every free costs one probe of a table that is empty outside the windows
// that sample.
//
// A window may also be told of blocks Python's allocators never see, whole (RecordBlock): a
// tensor's storage, made by a torch op, where the torch writes no allocation records of its own
// (worker/py/heap_hooks.h KeepBlock). Such a block weighs its size and names its op.
//
// Owns the table of live sampled blocks, bounded (kMaxLive; past it new samples are dropped and
// counted). Not thread-safe: driven under the GIL (the allocator hooks of worker/py/heap_hooks.h
// run with it held).
#ifndef PERFTRACKER_WORKER_HEAP_SAMPLER_H_
#define PERFTRACKER_WORKER_HEAP_SAMPLER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace perftracker::worker {

// The mean bytes between samples. A leak of 100 KiB an iteration gets ~1.6 samples an iteration
// (kept in ~80% of them: enough for the diagnosis's share, policy kKeptMemoryShare); a step that
// allocates 50 MB of Python objects and frees them records ~800 samples and forgets them.
inline constexpr int64_t kHeapSampleMeanBytes = 64 << 10;

// One window's kept memory at one node and iteration.
struct KeptHeapCell {
  uint32_t node = 0;
  int32_t iteration = -1;  // -1: allocated outside the window's iterations
  double bytes = 0;        // the samples' weights: an estimate of the bytes kept
  uint32_t samples = 0;
  uint32_t op = 0;  // 0: Python objects; else the name id of the op that made whole blocks
};

struct KeptHeap {
  int64_t sample_bytes = 0;         // the mean bytes between samples; 0: the window did not sample
  uint64_t samples = 0;             // blocks sampled in the window
  uint64_t dropped = 0;             // samples not kept: the table was full
  std::vector<KeptHeapCell> cells;  // by node, then iteration
};

class HeapSampler {
 public:
  // Live samples at once: 64 Ki of them are 4 GiB of kept heap at the mean; the table is 4 MiB.
  static constexpr size_t kMaxLive = size_t{1} << 16;

  // Starts a window's sampling (allocates the table: never inside an allocator hook). SEED
  // varies the countdowns between windows and processes.
  void Begin(uint64_t seed, int64_t mean_bytes = kHeapSampleMeanBytes);
  // The window's kept memory; the sampler is idle (and its table freed) afterwards.
  KeptHeap Finish();
  bool active() const { return active_; }

  // An allocation of N bytes: true when it is to be sampled (then call Record). Inline: every
  // allocation of the sampling thread.
  bool Countdown(size_t n) {
    countdown_ -= static_cast<int64_t>(n);
    return countdown_ <= 0;
  }
  // Remembers the block at ADDR of N bytes, made at NODE in ITERATION, and draws the next
  // countdown. Allocates nothing.
  void Record(uintptr_t addr, size_t n, uint32_t node, int32_t iteration);
  // Remembers a whole block at ADDR of N bytes (not drawn: it weighs N), made by op OP (a name
  // id, not 0) at NODE in ITERATION. The countdown is untouched. Allocates nothing.
  void RecordBlock(uintptr_t addr, size_t n, uint32_t node, int32_t iteration, uint32_t op);
  // A free (or the old block of a realloc): forgets ADDR if it was sampled. Inline tests first:
  // nothing to do while no sample is live, or when the filter says ADDR was not sampled (most
  // frees: the table is megabytes, the filter 16 KiB, so a free costs no cache miss).
  void Forget(uintptr_t addr) {
    if (live_ != 0 && filter_[Hash(addr) >> (64 - kFilterBits)] != 0) Erase(addr);
  }
  size_t live() const { return live_; }

 private:
  struct Slot {
    uintptr_t addr;  // 0: empty
    double weight;
    uint32_t node;
    int32_t iteration;
    uint32_t op;
  };
  void Insert(const Slot& s);
  // Blocks are 16-byte aligned: the low bits say nothing. Fibonacci hashing spreads the rest;
  // the table and the filter take its top bits.
  static uint64_t Hash(uintptr_t addr) {
    return (static_cast<uint64_t>(addr) >> 4) * 0x9E3779B97F4A7C15ULL;
  }
  size_t Home(uintptr_t addr) const;
  void Erase(uintptr_t addr);
  int64_t NextCountdown();

  bool active_ = false;
  int64_t mean_ = kHeapSampleMeanBytes;
  int64_t countdown_ = INT64_MAX;  // idle: never reaches zero
  uint64_t rng_ = 0;
  std::vector<Slot> table_;  // open addressing, linear probing, 2 x kMaxLive slots
  // Per hash bucket, how many live samples fall in it (a counting filter; 255 sticks: such a
  // bucket is always probed).
  static constexpr int kFilterBits = 14;
  std::vector<uint8_t> filter_ = std::vector<uint8_t>(size_t{1} << kFilterBits, 0);
  size_t live_ = 0;
  uint64_t samples_ = 0, dropped_ = 0;
};

}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_HEAP_SAMPLER_H_
