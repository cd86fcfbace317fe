// What the OS says about one worker process beyond its CPU time, read from /proc and the cgroup
// file system: the evidence that tells a rank starved of CPU from one with more work.
//   - scheduler statistics per thread (/proc/PID/task/TID/schedstat): time run and time spent
//     runnable but waiting in the run queue. A rank that waits in the run queue markedly more per
//     second of CPU than its peers is denied the CPU; a busy host alone says nothing of the rank.
//   - the CPU quota of its cgroup (v1 cpu.stat/cpu.cfs_quota_us, v2 cpu.stat/cpu.max): periods,
//     throttled periods and the time throttled.
//   - I/O (/proc/PID/io), resident memory and major faults (/proc/PID/stat), the process's
//     children (DataLoader workers, /proc/PID/task/TID/children), and the host's memory.
// Each text is parsed by a function of its own that tests feed with recorded text; the readers
// bound what they read (a /proc file is small; a garbled one is an error, never a crash).
#ifndef PERFTRACKER_AGENT_OS_STATS_H_
#define PERFTRACKER_AGENT_OS_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace perftracker::agent {

// /proc/PID/task/TID/schedstat: "run_ns wait_ns timeslices", e.g. "187550053 8479843 432".
struct SchedStat {
  uint64_t run_ns = 0;
  uint64_t wait_ns = 0;  // runnable, waiting for a CPU
  uint64_t slices = 0;
};
StatusOr<SchedStat> ParseSchedStat(std::string_view text);

// /proc/PID/io: "rchar: 1\nwchar: 2\n...read_bytes: 3\nwrite_bytes: 4\n...".
struct PidIo {
  uint64_t rchar = 0, wchar = 0;             // bytes through read/write calls (page cache too)
  uint64_t read_bytes = 0, write_bytes = 0;  // bytes the storage layer fetched / will write
};
StatusOr<PidIo> ParsePidIo(std::string_view text);

// The fields of /proc/PID/stat beyond CPU time: major faults (field 12), threads (20) and the
// resident set in pages (24). The command name is in parentheses and may hold spaces or ')'.
struct PidMemory {
  uint64_t major_faults = 0;
  uint64_t threads = 0;
  uint64_t rss_pages = 0;
};
StatusOr<PidMemory> ParsePidStatMemory(std::string_view text);

// A cgroup's CPU accounting. v1 cpu.stat: "nr_periods 10\nnr_throttled 4\nthrottled_time NS";
// v2 cpu.stat: "usage_usec ...\nnr_periods 10\nnr_throttled 4\nthrottled_usec US".
struct CgroupCpu {
  uint64_t nr_periods = 0;
  uint64_t nr_throttled = 0;
  double throttled_s = 0;
  double quota_cpus = -1;  // the quota in CPUs (0.25: a quarter of one); -1: none
};
StatusOr<CgroupCpu> ParseCgroupCpuStat(std::string_view text);
// v2 cpu.max: "25000 100000" is 0.25 CPUs, "max 100000" none (-1).
double ParseCpuMax(std::string_view text);
// v1: cpu.cfs_quota_us ("-1": none) and cpu.cfs_period_us.
double CpuQuotaV1(std::string_view quota_us, std::string_view period_us);

// The cgroup folder that accounts a process's CPU, from /proc/PID/cgroup ("4:cpu,cpuacct:/a/b"
// for v1, "0::/a/b" for v2; a v1 cpu controller wins where both are mounted). ROOT names the
// cgroup root (/sys/fs/cgroup). Empty when the text names none.
std::string CpuCgroupDir(std::string_view proc_pid_cgroup, const std::string& root);

// The cgroup folder that accounts a process's memory, as CpuCgroupDir does for its CPU (a v1
// memory controller wins; v2 where the unified hierarchy has memory.max).
std::string MemoryCgroupDir(std::string_view proc_pid_cgroup, const std::string& root);
// v1 reports "no limit" as the page counter's maximum (9223372036854771712): any limit at or
// above 2^62 bytes is none.
inline constexpr double kNoMemoryLimitBytes = 4611686018427387904.0;
// A memory cgroup's accounting: its limit (v1 memory.limit_in_bytes, v2 memory.max; -1: none),
// its usage (memory.usage_in_bytes, memory.current; -1: unknown) and the processes its OOM
// killer ended (v1 memory.oom_control's and v2 memory.events' "oom_kill N"; -1: not counted).
struct CgroupMemory {
  std::string dir;  // "" when the process's memory cgroup is not found
  double limit_bytes = -1;
  double usage_bytes = -1;
  int64_t oom_kills = -1;
};
// The memory cgroup folder DIR's accounting ("" gives an empty one): read again after a process
// ended, where its folder is known from before.
CgroupMemory ReadCgroupMemoryAt(const std::string& dir);

// /proc/meminfo's MemTotal and MemAvailable, in bytes (-1 where absent).
struct HostMemory {
  double total_bytes = -1;
  double available_bytes = -1;
};
HostMemory ParseMeminfo(std::string_view text);

// Pressure stall information (/proc/pressure/io, Linux 4.20+): the time, in microseconds since
// boot, in which some task (SOME) or every non-idle task at once (FULL) waited for storage:
// "some avg10=0.00 avg60=0.02 avg300=0.17 total=20266364\nfull avg10=0.00 ... total=14052221"
// -> {20266364, 14052221}. The cpu file has a "some" line only on older kernels (full -1).
struct Pressure {
  int64_t some_us = -1;
  int64_t full_us = -1;
};
StatusOr<Pressure> ParsePressure(std::string_view text);

// Readers over PROC (default /proc) and the cgroup ROOT.
// The sum over the process's threads, keyed by thread id so that deltas match thread to thread.
std::map<int, SchedStat> ReadThreadSchedStats(int pid, const std::string& proc = "/proc");
StatusOr<PidIo> ReadPidIo(int pid, const std::string& proc = "/proc");
StatusOr<PidMemory> ReadPidMemory(int pid, const std::string& proc = "/proc");
// The process's children (of every thread), at most MAX.
std::vector<int> ReadChildren(int pid, const std::string& proc = "/proc", size_t max = 256);
StatusOr<CgroupCpu> ReadCgroupCpu(int pid, const std::string& proc = "/proc",
                                  const std::string& root = "/sys/fs/cgroup");
HostMemory ReadHostMemory(const std::string& proc = "/proc");
// The kernel's count of processes its OOM killer ended since boot, on the whole host
// (/proc/vmstat "oom_kill N", Linux 4.13+; -1: not counted): a kill is seen even where the
// process's memory cgroup is unknown or its own counter is not kept.
int64_t ReadHostOomKills(const std::string& proc = "/proc");
// The accounting of the memory cgroup PID is in now.
CgroupMemory ReadCgroupMemory(int pid, const std::string& proc = "/proc",
                              const std::string& root = "/sys/fs/cgroup");
// PROC/pressure/io; an error where the kernel has no PSI (before 4.20, or psi=0).
StatusOr<Pressure> ReadIoPressure(const std::string& proc = "/proc");

// Bytes read from one /proc or cgroup file at most: they are a few hundred bytes; a thread
// list of a huge process is longer, and more than this is not a file the agent should trust.
inline constexpr size_t kMaxProcFileBytes = 1 << 20;
// A namespace's TCP table (/proc/PID/net/tcp) has a 150-byte line per connection: 64 MiB holds
// ~400,000 of them, more than any training host keeps open.
inline constexpr size_t kMaxTcpTableBytes = 64 << 20;
// Reads PATH whole, the one reader of /proc and cgroup files (an error past MAX_BYTES).
StatusOr<std::string> ReadProcFile(const std::string& path, size_t max_bytes = kMaxProcFileBytes);

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_OS_STATS_H_
