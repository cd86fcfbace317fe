#include "base/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace perftracker {

size_t DefaultThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

void ParallelFor(size_t n, size_t threads, const std::function<void(size_t)>& fn) {
  if (threads == 0) threads = DefaultThreads();
  threads = std::min(threads, n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads > 1 ? threads - 1 : 0);
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace perftracker
