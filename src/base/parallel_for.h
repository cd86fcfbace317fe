// One parallel-for for the whole tree: the diagnosis's peer groups, the job loader's files and
// the simulator's writers all run through it, with the thread count as an option.
//   ParallelFor(4, 0, [&](size_t i) { out[i] = Work(i); });  // every core, items 0..3
//   ParallelFor(4, 1, fn)                                      // on the caller's thread only
// Items are handed out one at a time from a shared counter (work stealing without queues), so
// an uneven item does not stall a fixed share; each fn(i) runs once, on some thread. fn must be
// safe to call concurrently for different i; results are deterministic when fn(i) writes only
// slot i.
#ifndef PERFTRACKER_BASE_PARALLEL_FOR_H_
#define PERFTRACKER_BASE_PARALLEL_FOR_H_

#include <cstddef>
#include <functional>

namespace perftracker {

// Threads a parallel loop uses when the caller leaves it to us: the machine's cores
// (std::thread::hardware_concurrency), at least 1.
size_t DefaultThreads();

// Runs fn(0) .. fn(n-1) on min(threads, n) threads, the caller's among them; threads == 0 means
// DefaultThreads(). Returns when every call has returned.
void ParallelFor(size_t n, size_t threads, const std::function<void(size_t)>& fn);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_PARALLEL_FOR_H_
