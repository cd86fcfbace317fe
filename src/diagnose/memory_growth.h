// Memory growth: a rank whose resident memory grows every iteration (a leak: tensors kept in a
// list, a cache without a bound, a history of losses that hold their graphs) runs until its host
// runs out of memory and the kernel kills it. It does not slow the job first, so neither the
// slowdown trigger nor the peer comparison sees it: the agent samples each worker's RSS with its
// iteration reports, always (one small /proc read per report), and this module finds the growth
// in that series: its size per iteration and the iterations left before the host's available
// memory is gone at the rate its growing ranks take it. The same for the GPU memory each
// worker's process holds, where its agent reads NVML (MemoryKind::kGpu: the limit is its GPU).
// A profiling window's buffers are perftracker's memory, not the job's: the series leaves them
// out (MemorySeries::Profiled). The server keeps one series of each kind per rank
// (server/rank_state.h MemoryWatch); a rank that died of memory is rank_crash.h's.
#ifndef PERFTRACKER_DIAGNOSE_MEMORY_GROWTH_H_
#define PERFTRACKER_DIAGNOSE_MEMORY_GROWTH_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diagnose/finding.h"

namespace perftracker::diagnose {

// One rank's RSS over its run: (iteration, bytes) samples in iteration order, at most
// kMaxSamples; when full every other sample goes, so the series spans the whole run ever more
// coarsely (memory stays flat on long runs and 100,000 ranks: 4 KiB a rank).
class MemorySeries {
 public:
  static constexpr size_t kMaxSamples = 256;
  struct Sample {
    int64_t step = 0;
    double bytes = 0;  // the job's own memory: RSS less what profiling windows left (below)
    float rss = 0;     // RSS as read (floats: a series stays 24 bytes a sample at 100,000 ranks)
    // The lowest the job's own memory was since the sample before (the agent's readings between
    // reports: agent/memory_envelope.h), where known, else `bytes`: with the highs that BYTES
    // are, the range a rank's memory moves in (FindMemoryGrowth's sawtooth rule).
    float low = 0;
  };
  // A sample of RSS BYTES after iteration STEP (LOW: the lowest RSS since the sample before,
  // where known; < 0: unknown). A step not after the last one (a restarted rank numbers from 0
  // again) starts the series afresh; a non-finite or negative size is dropped.
  void Add(int64_t step, double bytes, double low = -1);
  // A profiling window over iterations FIRST..LAST: perftracker's own memory. The profiler's
  // buffers and the trace's export raise a rank's RSS by tens of MiB (measured: 27 MiB in a
  // baseline window, 37 MiB in a slowdown window recording shapes), much of it never returned
  // to the OS. Samples from FIRST to LAST + kMemoryProfileSettleIterations are not kept, and
  // the level after them is joined to the level before at the rate the rank grew before (the
  // median of its last kRateIntervals intervals: a leak that began a few samples before the
  // window is at its own rate there, where a line over more samples would mix in the flat
  // stretch before it and take the leak's growth through the window for the profiler's): a
  // leak's growth through the window stays, the profiler's step goes. A leak that began just
  // before the window has barely raised that rate (measured: one that began 11 iterations before
  // a window lost 30 of the 105 MiB it grew, its rate read 0.7 MiB an iteration for 1): from
  // kRateIntervals intervals after the window the join is settled again at the rate after it
  // where that is higher, with each sample: the least of its intervals until kSettledIntervals
  // (a leak grows in all of them, a sawtooth's highs fall in some), then their median (a
  // profiler's late creep of a MiB is one interval, a leak is all of them). Told when a window
  // opens (before its iterations' samples arrive); the last kMaxProfiled windows are kept.
  void Profiled(int64_t first, int64_t last);
  const std::vector<Sample>& samples() const { return samples_; }

  static constexpr size_t kMaxProfiled = 16;

 private:
  // The intervals a rate next to a window is the median of: one interval (a profiler's late
  // creep, one report's allocation) moves no median of three. Samples come every 0.5 s: at
  // 15-20 iterations a sample, more would reach back past a leak's start (measured: a leak from
  // iteration 40, a baseline window at 77, found 125 iterations after its start with a line
  // over the 8 samples before the window, the goal 100).
  static constexpr size_t kRateIntervals = 3;
  // The intervals after a window from which its join is settled for good.
  static constexpr size_t kSettledIntervals = 8;
  // Whether STEP lies in a window's iterations or their settling time.
  bool InProfiledSpan(int64_t step) const;
  // Whether a window lies between the last kept sample and STEP.
  bool WindowSince(int64_t step) const;
  // A window's join: the first kept sample after it, the iterations from the last kept sample
  // before it to that one, the rate before (bytes per iteration) and the bytes taken off as the
  // profiler's. Settled again (Resettle) once the rate after it is measured.
  struct Join {
    int64_t first_after = 0;
    int64_t gap = 0;
    double rate_before = 0;
    double profiler = 0;
    double returned = 0;  // of PROFILER, what Resettle gave back to the job so far
  };
  // The join of a sample at STEP (RSS BYTES) after a window: the rise since the last kept
  // sample beyond what the rank's rate before gives is the profiler's.
  Join JoinAfterWindow(int64_t step, double bytes) const;
  // Settles the pending join at the rate after its window where that is higher (measured once
  // kRateIntervals follow it): what the profiler's share held of the job's growth goes back to
  // the samples after it. FINAL: for good (kSettledIntervals after it, or another window).
  void Resettle(bool final);

  std::vector<Sample> samples_;
  std::optional<Join> pending_;  // the latest window's join, until the rate after it is known
  std::vector<std::pair<int64_t, int64_t>> profiled_;  // (first, last) of recent windows
  double offset_ = 0;                                  // bytes the windows so far left in RSS
  float skipped_low_ = std::numeric_limits<float>::infinity();  // lows of samples not kept
  int64_t stride_ = 1;  // the fewest iterations between two kept samples
};

struct MemoryGrowth {
  double bytes_per_iteration = 0;  // the least-squares slope over the samples after warm-up
  double grown_bytes = 0;          // the slope over the iterations it spans
  double rising_share = 0;         // of the intervals between samples, the share that grew
  int64_t first_step = 0, last_step = 0;
  double first_bytes = 0, last_bytes = 0;  // the job's own memory (MemorySeries::Sample)
  double first_rss = 0, last_rss = 0;      // RSS as read
};

// The growth of SERIES when it is a leak by the policy (kMemoryWarmupIterations,
// kMemoryOutgrowSwing, kMemoryMinIterations, kMemoryMinGrowthBytes, kMemoryRisingShare,
// kMemoryHalvesShare); nullopt otherwise. A leak may begin at any time: the earliest tail of the
// series (from a sample after the warm-up to the last one) that grows steadily is the leak, from
// its first sample on, so a healthy first half of a run hides nothing. A tail that only climbs back
// to a level the rank held before it (a sawtooth: a cache filled and emptied, an evaluation's
// buffers) is none.
std::optional<MemoryGrowth> FindMemoryGrowth(const MemorySeries& series);

// What the diagnosis knows of one rank for the memory rule.
struct RankMemory {
  int rank = -1;
  std::string host;
  const MemorySeries* series = nullptr;
  // Its memory cgroup: what it may still take (limit less usage) and the limit (bytes; -1: no
  // limit or unknown). A rank in a cgroup runs out at its limit, whatever its host has left.
  double cgroup_headroom_bytes = -1;
  double cgroup_limit_bytes = -1;
  // For a series of GPU memory (MemoryKind::kGpu): its GPU's index, and what that GPU had free
  // and in all at the last report (bytes; -1: unknown). The rank runs out there.
  int gpu = -1;
  double gpu_free_bytes = -1;
  double gpu_total_bytes = -1;
  // Where the series is PyTorch's allocated bytes (its collector's torch.cuda figures): what the
  // caching allocator reserved and the peak allocated at the last report (bytes; -1: the series
  // is NVML's). Reserved memory not allocated is headroom too: the allocator reuses it first.
  double cuda_reserved_bytes = -1;
  double cuda_peak_allocated_bytes = -1;
};

// What a rank's series holds: its process's resident memory on the host (the agent reads
// /proc), or the GPU memory its process holds: what PyTorch's tensors hold where its collector
// sends the caching allocator's figures (torch.cuda.memory_allocated: a leak of tensors without
// the allocator's caching steps), else NVML's per-process usage (the CUDA context, everything
// the caching allocator reserved, NCCL's and other libraries' memory).
enum class MemoryKind { kHost, kGpu };
// What the host's agent last said of its memory (bytes; -1: unknown).
struct HostMemoryState {
  double available_bytes = -1;
  double total_bytes = -1;
};

// A "memory_growth" finding for every rank whose series is a leak, with the iterations left
// before the tightest limit runs out: a growing rank's memory cgroup at its own rate, or its
// host's available memory at the rate of all its growing ranks together
// (HOSTS: host -> memory; ITERATION_MS: the job's typical iteration, for the time left; 0:
// unknown). Ranks growing alike on every host are one finding of them all. KIND kGpu: the
// series are GPU memory, and the limit is each rank's GPU (HOSTS is not used).
std::vector<Finding> MemoryGrowthFindings(const std::vector<RankMemory>& ranks,
                                          const std::map<std::string, HostMemoryState>& hosts,
                                          double iteration_ms, MemoryKind kind = MemoryKind::kHost);

// A size as findings write it: "512.0 MiB", "80.0 GiB".
std::string MemoryBytes(double bytes);
// What to do about memory that grows every iteration, host (GPU false) or GPU memory.
std::string MemoryGrowthSuggestion(bool gpu);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_MEMORY_GROWTH_H_
