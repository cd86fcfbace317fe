#include "agent/proc_sampler.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

namespace perftracker::agent {
namespace {

StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("{}: cannot read", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

StatusOr<PidCpu> ParsePidStat(std::string_view text) {
  size_t close = text.rfind(')');
  if (close == std::string_view::npos) return DataLoss("stat: no command name");
  // After ") ": state(3) ppid(4) ... utime(14) stime(15); field 3 is index 0 here.
  std::istringstream in{std::string(text.substr(close + 1))};
  std::string field;
  PidCpu cpu;
  for (int i = 3; i <= 15 && (in >> field); ++i) {
    if (i == 14) cpu.utime_ticks = std::stoull(field);
    if (i == 15) cpu.stime_ticks = std::stoull(field);
  }
  if (!in) return DataLoss("stat: too few fields");
  return cpu;
}

Status ParsePidStatus(std::string_view text, PidCpu* cpu) {
  std::istringstream in{std::string(text)};
  std::string line;
  int found = 0;
  while (std::getline(in, line)) {
    uint64_t v = 0;
    if (std::sscanf(line.c_str(), "voluntary_ctxt_switches: %lu", &v) == 1) {
      cpu->voluntary_ctxt_switches = v;
      ++found;
    } else if (std::sscanf(line.c_str(), "nonvoluntary_ctxt_switches: %lu", &v) == 1) {
      cpu->nonvoluntary_ctxt_switches = v;
      ++found;
    }
  }
  return found == 2 ? Status::Ok() : DataLoss("status: no ctxt_switches lines");
}

StatusOr<HostCpu> ParseHostCpu(std::string_view proc_stat) {
  std::istringstream in{std::string(proc_stat)};
  std::string label;
  in >> label;
  if (label != "cpu") return DataLoss("stat: first line is not the cpu total");
  HostCpu cpu;
  uint64_t v;
  for (int i = 0; i < 10 && (in >> v); ++i) {
    // user nice system idle iowait irq softirq steal guest guest_nice; guest time is already
    // counted in user, so it stops at steal.
    if (i >= 8) break;
    cpu.total += v;
    if (i != 3 && i != 4) cpu.busy += v;
  }
  if (cpu.total == 0) return DataLoss("stat: no cpu jiffies");
  return cpu;
}

StatusOr<std::map<std::string, NicBytes>> ParseNetDev(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  std::map<std::string, NicBytes> out;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos || line.find('|') != std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    std::istringstream f(line.substr(colon + 1));
    uint64_t v[9] = {};
    for (auto& x : v) f >> x;
    if (!f) continue;
    out[name] = {v[0], v[8]};  // receive bytes; transmit bytes is the 9th number
  }
  if (out.empty()) return DataLoss("net/dev: no interfaces");
  return out;
}

StatusOr<PidCpu> ReadPidCpu(int pid, const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string stat, ReadAll(fmt::format("{}/{}/stat", proc, pid)));
  PT_ASSIGN_OR_RETURN(PidCpu cpu, ParsePidStat(stat));
  PT_ASSIGN_OR_RETURN(std::string status, ReadAll(fmt::format("{}/{}/status", proc, pid)));
  PT_RETURN_IF_ERROR(ParsePidStatus(status, &cpu));
  return cpu;
}

StatusOr<HostCpu> ReadHostCpu(const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string text, ReadAll(proc + "/stat"));
  return ParseHostCpu(text);
}

StatusOr<std::map<std::string, NicBytes>> ReadNetDev(const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string text, ReadAll(proc + "/net/dev"));
  return ParseNetDev(text);
}

void ProcSampler::Begin(const std::vector<int>& pids) {
  begin_s_ = NowSeconds();
  pids_.clear();
  for (int pid : pids)
    if (auto c = ReadPidCpu(pid, proc_); c.ok()) pids_[pid] = *c;
  auto h = ReadHostCpu(proc_);
  have_host_ = h.ok();
  if (have_host_) host_ = *h;
  auto n = ReadNetDev(proc_);
  nics_ = n.ok() ? *n : std::map<std::string, NicBytes>{};
}

std::map<std::string, double> ProcSampler::End() {
  std::map<std::string, double> m;
  double elapsed = NowSeconds() - begin_s_;
  m["window.seconds"] = elapsed;
  static const double kTick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& [pid, b] : pids_) {
    auto e = ReadPidCpu(pid, proc_);
    if (!e.ok()) continue;  // the worker exited; its absence is visible elsewhere
    std::string p = fmt::format("pid.{}.", pid);
    m[p + "cpu_s"] = (e->utime_ticks + e->stime_ticks - b.utime_ticks - b.stime_ticks) / kTick;
    m[p + "voluntary_ctxt_switches"] =
        static_cast<double>(e->voluntary_ctxt_switches - b.voluntary_ctxt_switches);
    m[p + "nonvoluntary_ctxt_switches"] =
        static_cast<double>(e->nonvoluntary_ctxt_switches - b.nonvoluntary_ctxt_switches);
  }
  if (have_host_) {
    if (auto h = ReadHostCpu(proc_); h.ok() && h->total > host_.total)
      m["host.cpu_util"] =
          static_cast<double>(h->busy - host_.busy) / static_cast<double>(h->total - host_.total);
  }
  if (auto n = ReadNetDev(proc_); n.ok()) {
    for (const auto& [dev, e] : *n) {
      auto b = nics_.find(dev);
      if (b == nics_.end()) continue;
      m[fmt::format("nic.{}.rx_bytes", dev)] = static_cast<double>(e.rx_bytes - b->second.rx_bytes);
      m[fmt::format("nic.{}.tx_bytes", dev)] = static_cast<double>(e.tx_bytes - b->second.tx_bytes);
    }
  }
  return m;
}

}  // namespace perftracker::agent
