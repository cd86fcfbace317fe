// Hardware and OS metrics a node agent samples while a window runs, read from /proc (text
// parsers are separate so tests can feed them fixed text): per-process CPU time and context
// switches, host CPU busy/total jiffies, NIC byte counters. Deltas over the window are what
// reach the server.
#ifndef PERFTRACKER_AGENT_PROC_SAMPLER_H_
#define PERFTRACKER_AGENT_PROC_SAMPLER_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

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
};
struct NicBytes {
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
};

// /proc/<pid>/stat: the command name is in parentheses and may hold spaces or ')'.
StatusOr<PidCpu> ParsePidStat(std::string_view text);
// Adds the *_ctxt_switches lines of /proc/<pid>/status to CPU.
Status ParsePidStatus(std::string_view text, PidCpu* cpu);
StatusOr<HostCpu> ParseHostCpu(std::string_view proc_stat);
StatusOr<std::map<std::string, NicBytes>> ParseNetDev(std::string_view text);

StatusOr<PidCpu> ReadPidCpu(int pid, const std::string& proc = "/proc");
StatusOr<HostCpu> ReadHostCpu(const std::string& proc = "/proc");
StatusOr<std::map<std::string, NicBytes>> ReadNetDev(const std::string& proc = "/proc");

// Samples at Begin and End and reports deltas as named metrics ("host.cpu_util",
// "pid.<P>.cpu_s", "pid.<P>.voluntary_ctxt_switches", "nic.<dev>.rx_bytes", ...).
class ProcSampler {
 public:
  explicit ProcSampler(std::string proc = "/proc") : proc_(std::move(proc)) {}
  void Begin(const std::vector<int>& pids);
  std::map<std::string, double> End();

 private:
  std::string proc_;
  double begin_s_ = 0;
  std::map<int, PidCpu> pids_;
  HostCpu host_;
  bool have_host_ = false;
  std::map<std::string, NicBytes> nics_;
};

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_PROC_SAMPLER_H_
