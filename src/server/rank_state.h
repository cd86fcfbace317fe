// One rank's iteration times over the whole run (RankState): count, mean, extremes, a quantile
// sketch for percentiles (base/quantile_sketch.h: 1% relative accuracy, a few hundred bytes for
// the spread of one rank's times, at most 8 KB), and a bounded series of bucket means for the
// report's chart.
// Fed by the agents' iteration reports; memory stays flat however long the run. With them, what
// the rank's agent said of its worker process (WorkerSeen), and ExplainMissing: why a rank did
// not report for a window, from what the server knows of it and of its agent. Its host and GPU
// memory over the run (MemoryWatch), the memory_growth findings of them all (MemoryFindings) and
// their memory timelines for the reports (MemoryTimelines).
#ifndef PERFTRACKER_SERVER_RANK_STATE_H_
#define PERFTRACKER_SERVER_RANK_STATE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/quantile_sketch.h"
#include "diagnose/diagnose.h"
#include "diagnose/memory_growth.h"
#include "report/html.h"
#include "server/scheduler.h"

namespace perftracker::server {

// What a node agent last said of a rank's worker process (ReportIterations' WorkerState).
struct WorkerSeen {
  int pid = 0;
  int64_t window_sent = 0;   // the newest window whose command the agent wrote to it
  int64_t window_acked = 0;  // the newest window it answered; 0: none
  bool window_accepted = false;
  bool exited = false;        // its connection to the agent closed
  bool exit_message = false;  // it said it was exiting first: a normal exit
  bool process_gone = false;  // its process no longer exists
  int64_t last_iteration = -1;

  // Whether NEWER replaces this one: a live worker's state always does; an exit only that of
  // the same process or of a worker already gone (a rank restarted under a new pid keeps its
  // live state when the old pid's exit is reported late).
  bool ReplacedBy(const WorkerSeen& newer) const {
    return !newer.exited || newer.pid == pid || exited;
  }
};

// A rank's memory over the run, host (RSS) or GPU (diagnose/memory_growth.h), checked for a
// leak at every new high until one is found, and every kMemoryCheckEvery samples; once one is found
// it is reported (a window opens) once, and `growth` follows it on (/metrics).
struct MemoryWatch {
  diagnose::MemorySeries series;
  int unchecked = 0;
  double high = 0;  // the series' highest sample so far (a new one is checked at once)
  bool reported = false;
  std::optional<diagnose::MemoryGrowth> growth;  // the latest check's leak, if any (/metrics)
  static constexpr int kMemoryCheckEvery = 8;
  // Adds a sample: BYTES the worker's recent high, LOW its recent low, where its agent read them
  // (IterationBatch.rss_max_bytes, rss_min_bytes; agent/memory_envelope.h says why), else the
  // report's reading and -1; the growth the first time one is found.
  std::optional<diagnose::MemoryGrowth> Add(int64_t step, double bytes, double low = -1);
};

// One report's memory figures of a rank, as its agent's batch carries them (bytes; 0 or less:
// unknown): its RSS (the highest and lowest since the last report), its memory cgroup, its
// process on its GPU (NVML) and its GPU, and its CUDA allocator's figures (its collector's).
struct MemoryReport {
  double rss = 0, rss_low = 0;
  double cgroup_limit = 0, cgroup_usage = 0;
  double gpu_used = 0, gpu_free = 0, gpu_total = 0;
  int gpu_index = -1;
  double cuda_allocated = 0, cuda_reserved = 0, cuda_peak_allocated = 0;
};

// A growth the rule found for the first time in one of a rank's series.
struct MemoryGrowthFound {
  diagnose::MemoryGrowth growth;
  diagnose::MemoryKind kind;
};

struct RankState {
  std::string host;
  int attempt = 0;                 // the job's attempt of its latest report (server/attempts.h)
  int64_t last_step = -1;          // the furthest step of the current attempt
  int64_t attempt_iterations = 0;  // iterations reported in the current attempt
  double last_ms = 0;
  double sum_ms = 0;
  int64_t count = 0;
  double min_ms = 0, max_ms = 0;
  // Every iteration time, for the percentiles at job end: no sample to sort, however long the run.
  QuantileSketch times;
  // The agent that last reported for the rank (its iterations or its worker), and what it said
  // of the worker.
  std::string agent;
  std::optional<WorkerSeen> worker;
  // Its worker's resident memory over the run (the agent's reports), and its memory cgroup's
  // limit and usage at the latest report (bytes; -1: none or unknown).
  MemoryWatch memory;
  double cgroup_limit_bytes = -1, cgroup_usage_bytes = -1;
  // The GPU memory its process holds (NVML, through its agent), and its GPU at the latest
  // report (index, free and total bytes; -1: unknown).
  MemoryWatch gpu_memory;
  int gpu = -1;
  double gpu_free_bytes = -1, gpu_total_bytes = -1;
  // Once its collector sent the CUDA allocator's figures, the GPU series is PyTorch's allocated
  // bytes (NVML's usage adds the context and the allocator's cache: not mixed in after), and these
  // are the allocator's reserved and peak allocated bytes at the latest report (-1: never sent).
  bool gpu_series_torch = false;
  double cuda_reserved_bytes = -1, cuda_peak_allocated_bytes = -1;

  // The run's iteration times for the report's chart: bucket means of `stride` steps, at most
  // kMaxSeriesPoints (when full, neighbouring buckets merge and the stride doubles), so a long
  // run of 10,000 ranks stays near 60 MB.
  static constexpr size_t kMaxSeriesPoints = 512;
  std::vector<int64_t> series_steps;
  std::vector<float> series_ms;
  int64_t stride = 1;
  int64_t bucket_first = -1;  // the open bucket's first step
  double bucket_sum = 0;
  int bucket_n = 0;

  // The memory of the report whose furthest iteration is STEP: into the host and GPU series (the
  // GPU's is PyTorch's allocated bytes once the collector sent them, else NVML's usage); the
  // growths found for the first time.
  std::vector<MemoryGrowthFound> AddMemory(int64_t step, const MemoryReport& m);
  // One iteration STEP of MS milliseconds: into the statistics and the series.
  void AddStep(int64_t step, double ms);
  // Closes the open bucket into the series; merges neighbours when the series is full.
  void CloseBucket();
  // The series so far, with the open bucket.
  report::RunSeries Series(int rank) const;
  // One iteration time into the statistics only (no step known).
  void Add(double ms);
  // Count, mean, extremes and percentiles (from the sketch, within 1%) of the times added.
  diagnose::IterationStats Stats() const;
};

// What the server knows of a silent rank's node agent when a window closes.
struct AgentSeen {
  bool identified = false;  // the server knows which agent serves the rank, and it is registered
  bool gone = false;        // the agent that served it was forgotten (silent too long)
  std::string host;
  bool connected = false;  // a command stream open, or a call in the last seconds
  double silent_seconds = 0;
  bool registered_after_open = false;  // registered (again) after the window opened
  // The newest window command it confirmed receiving (nullopt: it does not say).
  std::optional<int64_t> window_received;
  bool command_waiting = false;  // the window's command still waits in the server's queue for it
  bool relays_workers = false;   // its ranks are worker processes on its socket
};

// The window a rank did not report for.
struct MissedWindow {
  int64_t id = 0;
  int64_t start_iteration = 0;
  // The rank's last reported iteration when the window opened (-1: none or unknown).
  int64_t step_at_open = -1;
};

// Why RANK did not report for WINDOW, from its state (null: the server never heard of it) and its
// agent's. The first that applies: its process exited (kRankDead), its agent is gone
// (kAgentGone), the command did not reach it or its worker did not take it
// (kCommandNotDelivered), it made no iteration since the command or did not reach the window's
// first iteration (kNoIterationSinceCommand); else kUnknown. The detail says what was seen.
diagnose::MissingRank ExplainMissing(int rank, const RankState* state, const AgentSeen& agent,
                                     const MissedWindow& window);

// The memory timeline of the ranks in CURRENT for a report (Diagnosis::job.memory): host memory
// (RSS as read, device "host") and, where its agent reads NVML, GPU memory (device "gpu"), at
// the iterations sampled over the whole run. Bounded for diagnosis.json at any scale: at most
// kMaxMemoryTimelineRanks ranks (those whose memory grows, then those that hold the most) of
// at most kMaxMemoryTimelinePoints points each (~1 MB of JSON).
inline constexpr size_t kMaxMemoryTimelineRanks = 256;
inline constexpr size_t kMaxMemoryTimelinePoints = 64;
std::vector<diagnose::RankMemoryUse> MemoryTimelines(const std::map<int, RankState>& ranks,
                                                     const std::set<int>& current);

// The memory_growth findings of the RANKS in CURRENT, host then GPU: HOST_OF names a rank's host
// (by its agent), HOSTS what each host's agent last said of its memory, ITERATION_MS the job's
// typical iteration (for the time left).
std::vector<diagnose::Finding> MemoryFindings(
    const std::map<int, RankState>& ranks, const std::set<int>& current,
    const std::function<std::string(const RankState&)>& host_of,
    const std::map<std::string, diagnose::HostMemoryState>& hosts);

// The furthest step any of RANKS reported; -1: none yet.
int64_t FurthestStep(const std::map<int, RankState>& ranks);

// The ranks whose latest iterations belong to ATTEMPT (RankState::attempt).
std::set<int> RanksOfAttempt(const std::map<int, RankState>& ranks, int attempt);

// Each rank's iterations over the run so far, for the report's chart (the ranks that reported
// any).
std::vector<report::RunSeries> RunSeriesOf(const std::map<int, RankState>& ranks);

// Where the job is, for the scheduler (server/scheduler.h): the furthest step, the mean
// iteration over every reported one, and the fewest iterations of this attempt among the
// EXPECTED ranks (one never heard of counts 0).
JobProgress ProgressOf(const std::map<int, RankState>& ranks, const std::set<int>& expected);

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_RANK_STATE_H_
