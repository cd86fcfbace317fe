// The highest and lowest resident memory of each local worker over the last kHorizon, from a
// sampler thread that reads /proc every kSampleInterval, for each iteration report. A report's
// own reading lands at whatever moment of the job's memory cycle it happens to: a cache filled
// and emptied faster than the reports come (bench/memory_detection.py's sawtooth: 16 MiB a step,
// emptied every 20 steps of 30 ms; reports every ~0.4 s) aliases into a slow climb of those
// readings, which was named a leak at the start of a run, before any range to compare it with
// (3 of 5 runs had the climb, 1 the finding). The highest reading of the last 2 s does not
// climb for any cycle shorter than that: it is the cycle's peak every time, while a leak raises
// it as it raises everything (and, memory only rising, without delay). The server follows that
// high (IterationBatch.rss_max_bytes; diagnose/memory_growth.h).
//
// The low is the lowest reading since the worker's previous report (not of the whole horizon):
// high less low is how far the job's memory moves by itself between two reports, a sawtooth's
// depth, or for a leak the little it grew since (a low of 2 s would make every leak's range its
// growth over 2 s, 167 iterations of 12 ms). diagnose/memory_growth.h asks a leak to outgrow it.
//
// Owns the pids to watch and each one's recent readings; thread-safe (the sampler thread
// samples, the report loop takes).
#ifndef PERFTRACKER_AGENT_MEMORY_ENVELOPE_H_
#define PERFTRACKER_AGENT_MEMORY_ENVELOPE_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace perftracker::agent {

class MemoryEnvelope {
 public:
  using Clock = std::chrono::steady_clock;
  // 20 readings a second: a cycle of 0.2 s or more has its peak read; a read of /proc/PID/stat
  // is ~10 us, 0.02% of a core per worker.
  static constexpr std::chrono::milliseconds kSampleInterval{50};
  // The cycles it sees whole: a cache refilled within 2 s. Slower ones are sampled often enough
  // by the reports themselves (five and more a cycle) for the series' own range rule.
  static constexpr std::chrono::milliseconds kHorizon{2000};
  // Workers watched at once (a node's ranks are 8-16; the report's own bound is larger).
  static constexpr size_t kMaxWatched = 256;

  struct Range {
    double low = 0, high = 0;  // bytes
  };

  // The workers to sample from now on (the report loop's latest): others are forgotten.
  void Watch(const std::vector<int>& pids);
  // One round at NOW: READ gives a pid's resident bytes (<= 0: unreadable, skipped).
  void SampleOnce(Clock::time_point now, const std::function<double(int pid)>& read);
  // PID's range: the highest of the readings of the last kHorizon before NOW and NOW_BYTES (the
  // report's own reading), the lowest of those since PID's previous Take; nothing when there are
  // none.
  std::optional<Range> Take(int pid, Clock::time_point now, double now_bytes);

 private:
  void Expire(std::deque<std::pair<Clock::time_point, double>>* d, Clock::time_point now) const;

  std::mutex mu_;
  std::vector<int> watched_;
  std::map<int, std::deque<std::pair<Clock::time_point, double>>> recent_;  // pid -> readings
  std::map<int, Clock::time_point> last_take_;  // pid -> its previous Take
};

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_MEMORY_ENVELOPE_H_
