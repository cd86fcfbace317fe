// Hardware and OS metrics a node agent samples while a window runs, read from /proc (text
// parsers are separate so tests can feed them fixed text): per-process CPU time and context
// switches, host CPU busy/total jiffies, NIC byte counters, and each worker's TCP connections'
// send queues (bytes written but not yet acknowledged: a connection that backs up crosses a
// slow link). Deltas and means over the window are what reach the server.
#ifndef PERFTRACKER_AGENT_PROC_SAMPLER_H_
#define PERFTRACKER_AGENT_PROC_SAMPLER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/loader_stats.h"
#include "agent/os_stats.h"
#include "base/status.h"

namespace perftracker::agent {

struct PidCpu {
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  uint64_t voluntary_ctxt_switches = 0;
  uint64_t nonvoluntary_ctxt_switches = 0;
};
struct HostCpu {
  uint64_t busy = 0;  // jiffies not idle or iowait
  uint64_t total = 0;
  int64_t procs_running = -1;  // threads runnable right now (-1: not in the text)
};
struct NicBytes {
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
};
// One TCP connection of /proc/<pid>/net/tcp{,6} (the process's own network namespace).
struct TcpSocket {
  std::string local, remote;  // "ip:port" ("[v6]:port" for IPv6)
  uint64_t inode = 0;
  uint64_t send_queue = 0;  // tx_queue: unacknowledged + unsent bytes
};

// /proc/<pid>/stat: the command name is in parentheses and may hold spaces or ')'.
StatusOr<PidCpu> ParsePidStat(std::string_view text);
// Adds the *_ctxt_switches lines of /proc/<pid>/status to CPU.
Status ParsePidStatus(std::string_view text, PidCpu* cpu);
StatusOr<HostCpu> ParseHostCpu(std::string_view proc_stat);
StatusOr<std::map<std::string, NicBytes>> ParseNetDev(std::string_view text);
// Established connections only; IPV6 selects the tcp6 address form.
std::vector<TcpSocket> ParseProcNetTcp(std::string_view text, bool ipv6);

StatusOr<PidCpu> ReadPidCpu(int pid, const std::string& proc = "/proc");
StatusOr<HostCpu> ReadHostCpu(const std::string& proc = "/proc");
StatusOr<std::map<std::string, NicBytes>> ReadNetDev(const std::string& proc = "/proc");

// The TCP connections a process owns (its socket fds matched against its namespace's table).
std::vector<TcpSocket> ReadPidTcp(int pid, const std::string& proc = "/proc");

// Samples at Begin, every Tick and at End, and reports named metrics: "host.cpu_util",
// "nic.<dev>.rx_bytes", "host.procs_running" (mean runnable threads over the ticks: above
// "host.cores" the CPUs are oversubscribed), ... for the node, and for one worker (End(pid))
// "proc.cpu_s",
// "proc.voluntary_ctxt_switches", "proc.nonvoluntary_ctxt_switches" and, per connection,
// "tcp.sendq.<local>><remote>" = mean send-queue bytes over the ticks (the 16 largest), and the
// OS evidence of agent/os_stats.h over the window:
//   "proc.run_s", "proc.runq_wait_s"    its threads' time on a CPU and waiting for one
//   "proc.read_bytes", "proc.write_bytes", "proc.rchar", "proc.wchar"   its I/O
//   "proc.major_faults", "proc.rss_bytes" (at the end), "proc.rss_growth_bytes", "proc.threads"
//   "children.count", "children.cpu_s", "children.runq_wait_s"  its children (DataLoader workers)
//   "loader.*"  what its DataLoader worker processes say of their batches (agent/loader_stats.h),
//               where set_loader_dir named the folder of their files
//   "cgroup.nr_periods", "cgroup.nr_throttled", "cgroup.throttled_s", "cgroup.quota_cpus"
//   "host.mem_total_bytes", "host.mem_available_bytes"
//   "host.io_some_s", "host.io_full_s"   seconds of the window in which some task / every
//                                        non-idle task waited for storage (PSI), where the kernel
//                                        has it
class ProcSampler {
 public:
  explicit ProcSampler(std::string proc = "/proc", std::string cgroup_root = "/sys/fs/cgroup")
      : proc_(std::move(proc)), cgroup_root_(std::move(cgroup_root)) {}
  // The folder of the DataLoader workers' files (the agent socket's); "" reads none.
  void set_loader_dir(std::string dir) { loader_dir_ = std::move(dir); }
  void Begin(const std::vector<int>& pids);
  void Tick();  // samples the connections of workers not ended yet
  std::map<std::string, double> End(int pid);

 private:
  struct Conn {
    double sum = 0;
    int n = 0;
  };
  // What the OS said of one worker at Begin.
  struct OsBegin {
    std::map<int, SchedStat> threads;
    std::map<int, std::map<int, SchedStat>> children;  // child pid -> its threads
    std::map<int, uint64_t> children_cpu_ticks;
    std::map<int, LoaderStats> loader;  // child pid -> its file, where it has one
    std::optional<PidIo> io;
    std::optional<PidMemory> memory;
    std::optional<CgroupCpu> cgroup;
  };
  OsBegin ReadOs(int pid) const;
  void AddOsMetrics(int pid, std::map<std::string, double>* m) const;

  std::string proc_;
  std::string cgroup_root_;
  std::string loader_dir_;
  std::map<int, OsBegin> os_;
  double begin_s_ = 0;
  std::map<int, PidCpu> pids_;
  std::map<int, std::map<std::pair<std::string, std::string>, Conn>> conns_;
  std::map<int, int> ticks_;
  HostCpu host_;
  bool have_host_ = false;
  double running_sum_ = 0;
  int running_n_ = 0;
  std::map<std::string, NicBytes> nics_;
  std::optional<Pressure> io_pressure_;  // at Begin; none without PSI
};

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_PROC_SAMPLER_H_
