// Findings: what the diagnosis says. One Finding names the class (a subset of ranks, or all),
// the cause, the category, the ranks and hosts, the functions, the impact per iteration and the
// evidence numbers. Shared by offline analysis, the online server and the simulator.
#ifndef PERFTRACKER_DIAGNOSE_FINDING_H_
#define PERFTRACKER_DIAGNOSE_FINDING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "diagnose/categories.h"

namespace perftracker::diagnose {

enum class FindingClass { kSubset, kAll };
enum class Cause { kHardware, kSoftware, kConfiguration, kUnknown };

const char* FindingClassName(FindingClass c);  // "subset", "all"
const char* CauseName(Cause c);                // "hardware", "software", "configuration", "unknown"

// Ranks as a short list with runs folded: "2", "0,1,3", "0-7,9".
std::string RankList(const std::vector<int>& ranks);

struct FunctionRef {
  std::string name;
  std::string kind;                // event kind: cpu_op, kernel, python_function, ...
  std::vector<std::string> stack;  // Python call stack where known, outermost first
};

struct Finding {
  FindingClass finding_class = FindingClass::kSubset;
  Cause cause = Cause::kUnknown;
  // What kind of problem (diagnose/categories.h: the table of categories and their evidence).
  Category category = Category::kStraggler;
  std::vector<int> ranks;
  std::vector<std::string> hosts;
  std::vector<FunctionRef> functions;
  double impact_ms = 0;        // per iteration
  double impact_fraction = 0;  // of the median iteration
  // What the replay predicts fixing it gives (diagnose/what_if.h), ms an iteration, and the
  // iteration it predicts without it; both < 0 where no replay covers the finding.
  double what_if_ms = -1;
  double what_if_iteration_ms = -1;
  std::map<std::string, double> evidence;
  std::map<std::string, std::string> evidence_text;
  std::string summary;
  std::string suggestion;
  // How sure the diagnosis is, 0-1 (diagnose/policy.h: kConfidence*): 1 for what was observed
  // directly (a hang, a missing rank); lower for what is inferred from timing alone. Findings
  // under policy::kConfident are listed after every confident one.
  double confidence = 1.0;
};

// Iteration times of a whole online run, per rank (not just a window's).
struct IterationStats {
  int64_t count = 0;
  double mean_ms = 0, p50_ms = 0, p99_ms = 0, min_ms = 0, max_ms = 0;
};

// One attempt of an online job: an elastic launcher (torchrun --max-restarts) starts every rank
// again after one failed, and the new processes number their iterations from 0.
struct AttemptInfo {
  struct End {
    int rank = -1;
    int pid = 0;
    bool clean = false;  // its exit hook ran (a Python exit); false: killed or crashed
    int64_t last_iteration = -1;
  };
  int attempt = 0;        // 0, 1, ... in the order the server saw them
  int restart_count = 0;  // the launcher's (TORCHELASTIC_RESTART_COUNT), the highest its ranks said
  std::vector<int> ranks;
  std::map<int, int> pids;  // rank -> process
  std::vector<std::string> hosts;
  int64_t last_iteration = -1;  // the furthest iteration any of its ranks reported
  std::vector<End> ends;        // the ranks whose process ended, first first
  std::string summary;          // one line for people
};

// One rank's memory on one device for the reports: what its trace recorded (profile_memory
// records; pattern::DeviceMemory, diagnose/trace_memory.h: bytes as the allocator counted them,
// devices "cpu", "cuda:N"), or, online, what its agent sampled over the run
// (server/rank_state.h MemoryTimelines: devices kOnlineHostMemory and kOnlineGpuMemory).
// Where a rank's trace saw memory kept past its iteration (pattern::MemorySite): a function
// and its callers, and how much it kept per profiled iteration.
struct KeptMemory {
  std::string function;
  std::vector<std::string> stack;  // outermost first
  std::string op;                  // under a Python function, the op that allocated
  double bytes_per_iteration = 0;  // kept, over the iterations counted
  int kept_iterations = 0;
  int counted_iterations = 0;
};

struct RankMemoryUse {
  static constexpr const char* kOnlineHostMemory = "host";  // the process's RSS
  static constexpr const char* kOnlineGpuMemory = "gpu";    // its GPU memory (NVML)
  // Host memory (a trace's "cpu" or an online run's RSS), not a GPU's.
  bool host() const { return device == "cpu" || device == kOnlineHostMemory; }
  // An online run's samples, not a trace's records.
  bool online() const { return device == kOnlineHostMemory || device == kOnlineGpuMemory; }

  int rank = -1;
  std::string device;
  double peak_allocated_bytes = 0;
  double peak_reserved_bytes = -1;  // -1: none recorded
  double start_bytes = 0, end_bytes = 0;
  // The least-squares slope of the level at each steady iteration's end, over `iterations`.
  double bytes_per_iteration = 0;
  int iterations = 0;
  uint64_t failed_allocations = 0;
  double largest_failed_bytes = 0;  // the largest request that failed
  // The timeline: the level at each steady iteration's end, and each one's peak; the iterations'
  // numbers (ProfilerStep#N, or the run's iteration for online samples) where known, else empty.
  std::vector<double> iteration_end_bytes;
  std::vector<double> iteration_peak_bytes;
  std::vector<int64_t> iteration_numbers;
  // A trace's places that kept memory, most first (empty online and without profile_memory).
  std::vector<KeptMemory> kept;
};

// The rank the others waited for in one iteration of the window (diagnose/what_if.h
// CriticalPath): in each peer group, the one that waited least in its collectives.
struct CriticalRank {
  int group = 0;  // its peer group (Diagnosis::peer_group)
  int rank = -1;
  // How much less it waited than its group's next rank (ms): how much sooner it would have had
  // to arrive for another rank to hold the group.
  double lead_ms = 0;
};
struct CriticalIteration {
  // Which iteration: its ProfilerStep number where the traces have them, else its position
  // among all the trace's iterations (the ones left out of the steady ones counted).
  int iteration = 0;
  std::vector<CriticalRank> ranks;  // one per peer group, by group
};

struct JobInfo {
  int world_size = 0;
  std::vector<int> ranks;
  int iterations = 0;  // median over ranks
  double iteration_ms_median = 0;
  std::map<int, double> iteration_ms_per_rank;   // mean per rank
  std::vector<std::string> notes;                // flagged conditions (no markers, ...)
  std::map<int, IterationStats> run_iterations;  // online: the whole run, per rank
  std::vector<AttemptInfo> attempts;             // online, at the job's end: every attempt
  std::vector<RankMemoryUse> memory;             // traces with memory records, by rank
  // Each rank's slack (diagnose/what_if.h): how much longer it waits in its collectives than
  // the last rank to arrive (0: that rank, the one the others wait for). Empty: not replayed.
  std::map<int, double> slack_ms_per_rank;
  // Each iteration's critical ranks (diagnose/what_if.h CriticalPath). Empty: not known.
  std::vector<CriticalIteration> critical_path;
};

// One rank's arrival at its group's collectives (diagnose/what_if.h).
struct RankArrival {
  int rank = -1;
  int group = -1;      // its peer group (Diagnosis::peer_group)
  double wait_ms = 0;  // its collective time per iteration (waiting and transfer)
  bool known = false;  // false: its collectives are in a part of its window it lacks
};

// A peer group's arrivals iteration by iteration (diagnose/what_if.h): the iterations every
// member has (ProfilerStep numbers, else positions among the trace's iterations) and each
// member's wait in each.
struct GroupIterations {
  std::vector<int64_t> ids;
  std::vector<size_t> members;             // index into Arrivals::ranks
  std::vector<std::vector<double>> waits;  // [member][iteration], ms
};

// The job's arrivals: every rank's, and whether the replay applies (every group waits somewhere).
struct Arrivals {
  std::vector<RankArrival> ranks;
  bool replayable = false;
  bool single_rank = false;  // a job of one rank: a problem's time is all it gains
  // By peer group, where every member's per-iteration waits are known and the group waits.
  std::map<int, GroupIterations> iterations;
};

struct Diagnosis {
  JobInfo job;
  std::vector<Finding> findings;  // sorted by impact, descending
  // Each rank's peer group, by index into the diagnosed job's ranks (diagnose/peer_groups.h
  // PeerGroupOf), so that the rules run after Diagnose on the same ranks (AddMetricFindings)
  // compare a rank with the same peers without grouping the job again. Not written out.
  std::vector<int> peer_group;
  // When each rank arrives at its collectives, for the what-if replay of findings added after
  // Diagnose (diagnose/what_if.h AddWhatIf). Not written out (job.slack_ms_per_rank is).
  Arrivals arrivals;
};

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_FINDING_H_
