// DataLoader worker processes' own account of their batches: each worker process of a rank
// keeps, in a 512-byte file `loader-<pid>` in the folder of the agent's socket, the batches it
// made and the time they took in the dataset and in the collate function, with both functions'
// names (python/perftracker/loader.py writes it; its docstring has the layout). The agent reads
// the files of a rank's children at a window's start and end: the difference is what the
// workers did in the window, which the Python tracer (the training thread only) cannot see.
#ifndef PERFTRACKER_AGENT_LOADER_STATS_H_
#define PERFTRACKER_AGENT_LOADER_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace perftracker::agent {

struct LoaderStats {
  uint64_t sequence = 0;  // odd: the worker was writing the counters (read again)
  uint64_t batches = 0;
  uint64_t dataset_ns = 0;
  uint64_t collate_ns = 0;
  std::string dataset_fn;  // "TensorDataset.__getitem__ (dataset.py:208)"
  std::string collate_fn;
};

// The file's size: anything else is not a worker's file.
inline constexpr size_t kLoaderStatsBytes = 512;

// Parses the 512 bytes of a worker's file; an error for a wrong size, magic or version. Names
// keep printable ASCII only (a worker's text reaches the report).
// "PTLW" 1 seq=2 batches=3 dataset_ns=5e6 collate_ns=1e6 "D.__getitem__" "c" ->
//   {2, 3, 5000000, 1000000, "D.__getitem__", "c"}
StatusOr<LoaderStats> ParseLoaderStats(std::string_view bytes);

// The file of worker PID in DIR; a consistent copy (read again while the worker writes).
StatusOr<LoaderStats> ReadLoaderStats(const std::string& dir, int pid);

// Removes worker files in DIR whose process is gone (a worker killed before its exit handler
// ran), at most MAX per call. PROC names /proc.
void RemoveStaleLoaderStats(const std::string& dir, const std::string& proc = "/proc",
                            size_t max = 256);

// What a rank's workers did between two readings (children by pid), as window metrics:
//   "loader.workers", "loader.batches", "loader.dataset_s", "loader.collate_s" and the names as
//   "loader.dataset_fn=<name>" / "loader.collate_fn=<name>" with value 1 (a metric carries
//   numbers only: the name rides in its key).
void AddLoaderMetrics(const std::map<int, LoaderStats>& begin,
                      const std::map<int, LoaderStats>& end, std::map<std::string, double>* m);

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_LOADER_STATS_H_
