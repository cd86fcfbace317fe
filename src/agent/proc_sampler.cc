#include "agent/proc_sampler.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "base/units.h"

namespace perftracker::agent {
namespace {

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
  const size_t at = proc_stat.find("\nprocs_running ");
  if (at != std::string_view::npos) {
    int64_t n = 0;
    size_t i = at + 15;
    bool any = false;
    while (i < proc_stat.size() && proc_stat[i] >= '0' && proc_stat[i] <= '9' && n < 1000000000) {
      n = n * 10 + (proc_stat[i++] - '0');
      any = true;
    }
    if (any) cpu.procs_running = n;
  }
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

namespace {

// /proc/net/tcp writes addresses as the kernel's 32-bit words in host byte order, in hex.
std::string Ipv4(std::string_view hex) {
  uint32_t v = static_cast<uint32_t>(std::stoul(std::string(hex), nullptr, 16));
  return fmt::format("{}.{}.{}.{}", v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24);
}

std::string Ipv6(std::string_view hex) {
  std::string out;
  for (int w = 0; w < 4; ++w) {
    uint32_t v = static_cast<uint32_t>(std::stoul(std::string(hex.substr(w * 8, 8)), nullptr, 16));
    for (int b = 0; b < 4; b += 2) {
      if (!out.empty()) out += ":";
      out += fmt::format("{:x}", ((v >> (8 * b)) & 0xff) << 8 | ((v >> (8 * (b + 1))) & 0xff));
    }
  }
  // IPv4-mapped addresses read as the IPv4 form, so both tables name a peer alike.
  if (out.rfind("0:0:0:0:0:ffff:", 0) == 0) {
    uint32_t v = static_cast<uint32_t>(std::stoul(std::string(hex.substr(24, 8)), nullptr, 16));
    return fmt::format("{}.{}.{}.{}", v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24);
  }
  return "[" + out + "]";
}

bool Endpoint(std::string_view field, bool ipv6, std::string* out) {
  size_t colon = field.find(':');
  size_t want = ipv6 ? 32 : 8;
  if (colon != want || field.size() < colon + 2) return false;
  try {
    std::string ip = ipv6 ? Ipv6(field.substr(0, colon)) : Ipv4(field.substr(0, colon));
    *out = fmt::format("{}:{}", ip, std::stoul(std::string(field.substr(colon + 1)), nullptr, 16));
  } catch (...) {  // std::stoul on garbage: not a row
    return false;
  }
  return true;
}

}  // namespace

std::vector<TcpSocket> ParseProcNetTcp(std::string_view text, bool ipv6) {
  std::vector<TcpSocket> out;
  std::istringstream in{std::string(text)};
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
    if (!(f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode))
      continue;
    if (st != "01") continue;  // ESTABLISHED
    TcpSocket s;
    if (!Endpoint(local, ipv6, &s.local) || !Endpoint(remote, ipv6, &s.remote)) continue;
    size_t colon = queues.find(':');
    if (colon == std::string::npos) continue;
    try {
      s.send_queue = std::stoull(queues.substr(0, colon), nullptr, 16);
      s.inode = std::stoull(inode);
    } catch (...) {
      continue;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<TcpSocket> ReadPidTcp(int pid, const std::string& proc) {
  std::set<uint64_t> inodes;
  std::error_code ec;
  std::string fd_dir = fmt::format("{}/{}/fd", proc, pid);
  for (const auto& e : std::filesystem::directory_iterator(fd_dir, ec)) {
    std::error_code ec2;
    std::string target = std::filesystem::read_symlink(e.path(), ec2).string();
    if (ec2 || target.rfind("socket:[", 0) != 0) continue;
    inodes.insert(std::strtoull(target.c_str() + 8, nullptr, 10));
  }
  std::vector<TcpSocket> out;
  if (inodes.empty()) return out;
  for (bool v6 : {false, true}) {
    auto text =
        ReadProcFile(fmt::format("{}/{}/net/tcp{}", proc, pid, v6 ? "6" : ""), kMaxTcpTableBytes);
    if (!text.ok()) continue;
    for (TcpSocket& s : ParseProcNetTcp(*text, v6))
      if (inodes.count(s.inode)) out.push_back(std::move(s));
  }
  return out;
}

StatusOr<PidCpu> ReadPidCpu(int pid, const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string stat, ReadProcFile(fmt::format("{}/{}/stat", proc, pid)));
  PT_ASSIGN_OR_RETURN(PidCpu cpu, ParsePidStat(stat));
  PT_ASSIGN_OR_RETURN(std::string status, ReadProcFile(fmt::format("{}/{}/status", proc, pid)));
  PT_RETURN_IF_ERROR(ParsePidStatus(status, &cpu));
  return cpu;
}

StatusOr<HostCpu> ReadHostCpu(const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string text, ReadProcFile(proc + "/stat"));
  return ParseHostCpu(text);
}

StatusOr<std::map<std::string, NicBytes>> ReadNetDev(const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string text, ReadProcFile(proc + "/net/dev"));
  return ParseNetDev(text);
}

void ProcSampler::Begin(const std::vector<int>& pids) {
  begin_s_ = NowSeconds();
  pids_.clear();
  conns_.clear();
  ticks_.clear();
  for (int pid : pids) ticks_[pid] = 0;
  os_.clear();
  if (!loader_dir_.empty()) RemoveStaleLoaderStats(loader_dir_, proc_);
  for (int pid : pids) {
    if (auto c = ReadPidCpu(pid, proc_); c.ok()) pids_[pid] = *c;
    os_[pid] = ReadOs(pid);
  }
  running_sum_ = 0;
  running_n_ = 0;
  auto h = ReadHostCpu(proc_);
  have_host_ = h.ok();
  if (have_host_) host_ = *h;
  auto n = ReadNetDev(proc_);
  nics_ = n.ok() ? *n : std::map<std::string, NicBytes>{};
  auto io = ReadIoPressure(proc_);
  io_pressure_ = io.ok() ? std::optional<Pressure>(*io) : std::nullopt;
}

void ProcSampler::Tick() {
  if (auto h = ReadHostCpu(proc_); h.ok() && h->procs_running >= 0) {
    // This sampler's own thread is one of them.
    running_sum_ += static_cast<double>(std::max<int64_t>(0, h->procs_running - 1));
    ++running_n_;
  }
  for (auto& [pid, n] : ticks_) {
    if (n < 0) continue;  // ended
    ++n;
    auto& conns = conns_[pid];
    for (const TcpSocket& s : ReadPidTcp(pid, proc_)) {
      Conn& c = conns[{s.local, s.remote}];
      c.sum += static_cast<double>(s.send_queue);
      ++c.n;
    }
    // A connection is bounded by the job's peers; still, never let a runaway table grow.
    if (conns.size() > 4096) conns.clear();
  }
}

std::map<std::string, double> ProcSampler::End(int pid) {
  std::map<std::string, double> m;
  double elapsed = NowSeconds() - begin_s_;
  m["window.seconds"] = elapsed;
  static const double kTick = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (auto b = pids_.find(pid); b != pids_.end()) {
    if (auto e = ReadPidCpu(pid, proc_); e.ok()) {
      const PidCpu& c = b->second;
      m["proc.cpu_s"] = (e->utime_ticks + e->stime_ticks - c.utime_ticks - c.stime_ticks) / kTick;
      m["proc.voluntary_ctxt_switches"] =
          static_cast<double>(e->voluntary_ctxt_switches - c.voluntary_ctxt_switches);
      m["proc.nonvoluntary_ctxt_switches"] =
          static_cast<double>(e->nonvoluntary_ctxt_switches - c.nonvoluntary_ctxt_switches);
    }
  }
  if (auto t = ticks_.find(pid); t != ticks_.end() && t->second > 0) {
    // Mean over all ticks (a connection absent in a tick had nothing queued then).
    std::vector<std::pair<double, std::string>> v;
    for (const auto& [ends, c] : conns_[pid])
      v.push_back({c.sum / t->second, fmt::format("tcp.sendq.{}>{}", ends.first, ends.second)});
    std::sort(v.rbegin(), v.rend());
    for (size_t i = 0; i < v.size() && i < 16; ++i) m[v[i].second] = v[i].first;
    m["proc.tcp_samples"] = t->second;
    t->second = -1;
    conns_.erase(pid);
  }
  AddOsMetrics(pid, &m);
  if (running_n_ > 0) m["host.procs_running"] = running_sum_ / running_n_;
  m["host.cores"] = static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN));
  if (have_host_) {
    if (auto h = ReadHostCpu(proc_); h.ok() && h->total > host_.total)
      m["host.cpu_util"] =
          static_cast<double>(h->busy - host_.busy) / static_cast<double>(h->total - host_.total);
  }
  if (auto io = ReadIoPressure(proc_);
      io.ok() && io_pressure_ && io->some_us >= io_pressure_->some_us) {
    m["host.io_some_s"] = static_cast<double>(io->some_us - io_pressure_->some_us) / 1e6;
    if (io->full_us >= 0 && io_pressure_->full_us >= 0 && io->full_us >= io_pressure_->full_us)
      m["host.io_full_s"] = static_cast<double>(io->full_us - io_pressure_->full_us) / 1e6;
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

namespace {

// A worker's DataLoader processes are few; a process with more children than this is not one
// whose children the agent should walk every window.
constexpr size_t kMaxChildren = 64;

// Sums the run and wait time that THREADS gained since BEGIN (threads new since then count
// whole: they ran only within the window).
void AddSchedDelta(const std::map<int, SchedStat>& begin, const std::map<int, SchedStat>& now,
                   double* run_s, double* wait_s) {
  for (const auto& [tid, s] : now) {
    auto b = begin.find(tid);
    const uint64_t run0 = b == begin.end() ? 0 : std::min(b->second.run_ns, s.run_ns);
    const uint64_t wait0 = b == begin.end() ? 0 : std::min(b->second.wait_ns, s.wait_ns);
    *run_s += NsToS(s.run_ns - run0);
    *wait_s += NsToS(s.wait_ns - wait0);
  }
}

}  // namespace

ProcSampler::OsBegin ProcSampler::ReadOs(int pid) const {
  OsBegin b;
  b.threads = ReadThreadSchedStats(pid, proc_);
  for (int child : ReadChildren(pid, proc_, kMaxChildren)) {
    b.children[child] = ReadThreadSchedStats(child, proc_);
    if (auto c = ReadPidCpu(child, proc_); c.ok())
      b.children_cpu_ticks[child] = c->utime_ticks + c->stime_ticks;
    if (loader_dir_.empty()) continue;
    if (auto l = ReadLoaderStats(loader_dir_, child); l.ok()) b.loader[child] = std::move(*l);
  }
  if (auto io = ReadPidIo(pid, proc_); io.ok()) b.io = *io;
  if (auto mem = ReadPidMemory(pid, proc_); mem.ok()) b.memory = *mem;
  if (auto cg = ReadCgroupCpu(pid, proc_, cgroup_root_); cg.ok()) b.cgroup = *cg;
  return b;
}

void ProcSampler::AddOsMetrics(int pid, std::map<std::string, double>* m) const {
  auto it = os_.find(pid);
  if (it == os_.end()) return;
  const OsBegin& b = it->second;
  OsBegin e = ReadOs(pid);
  // A DataLoader worker that exited within the window (the job ended, an epoch's workers were
  // replaced) is no child any more; its file stays until the next window's Begin removes it.
  for (const auto& [child, stats] : b.loader)
    if (!e.loader.count(child))
      if (auto l = ReadLoaderStats(loader_dir_, child); l.ok()) e.loader[child] = std::move(*l);
  if (!e.threads.empty()) {
    double run = 0, wait = 0;
    AddSchedDelta(b.threads, e.threads, &run, &wait);
    (*m)["proc.run_s"] = run;
    (*m)["proc.runq_wait_s"] = wait;
  }
  // Children: those of the end (a DataLoader's workers live through the window; ones that
  // ended took their time with them and are not counted).
  static const double kTick = static_cast<double>(sysconf(_SC_CLK_TCK));
  double kid_cpu = 0, kid_run = 0, kid_wait = 0;
  for (const auto& [child, threads] : e.children) {
    auto bt = b.children.find(child);
    AddSchedDelta(bt == b.children.end() ? std::map<int, SchedStat>{} : bt->second, threads,
                  &kid_run, &kid_wait);
    auto ec = e.children_cpu_ticks.find(child);
    auto bc = b.children_cpu_ticks.find(child);
    if (ec != e.children_cpu_ticks.end())
      kid_cpu += static_cast<double>(ec->second - (bc == b.children_cpu_ticks.end()
                                                       ? 0
                                                       : std::min(bc->second, ec->second))) /
                 kTick;
  }
  (*m)["children.count"] = static_cast<double>(e.children.size());
  AddLoaderMetrics(b.loader, e.loader, m);
  if (!e.children.empty()) {
    (*m)["children.cpu_s"] = kid_cpu;
    (*m)["children.run_s"] = kid_run;
    (*m)["children.runq_wait_s"] = kid_wait;
  }
  auto delta = [](uint64_t a, uint64_t z) { return static_cast<double>(z >= a ? z - a : 0); };
  if (b.io && e.io) {
    (*m)["proc.read_bytes"] = delta(b.io->read_bytes, e.io->read_bytes);
    (*m)["proc.write_bytes"] = delta(b.io->write_bytes, e.io->write_bytes);
    (*m)["proc.rchar"] = delta(b.io->rchar, e.io->rchar);
    (*m)["proc.wchar"] = delta(b.io->wchar, e.io->wchar);
  }
  if (e.memory) {
    static const double kPage = static_cast<double>(sysconf(_SC_PAGESIZE));
    (*m)["proc.rss_bytes"] = static_cast<double>(e.memory->rss_pages) * kPage;
    (*m)["proc.threads"] = static_cast<double>(e.memory->threads);
    if (b.memory) {
      (*m)["proc.rss_growth_bytes"] =
          (static_cast<double>(e.memory->rss_pages) - static_cast<double>(b.memory->rss_pages)) *
          kPage;
      (*m)["proc.major_faults"] = delta(b.memory->major_faults, e.memory->major_faults);
    }
  }
  if (b.cgroup && e.cgroup) {
    (*m)["cgroup.nr_periods"] = delta(b.cgroup->nr_periods, e.cgroup->nr_periods);
    (*m)["cgroup.nr_throttled"] = delta(b.cgroup->nr_throttled, e.cgroup->nr_throttled);
    (*m)["cgroup.throttled_s"] = std::max(0.0, e.cgroup->throttled_s - b.cgroup->throttled_s);
    (*m)["cgroup.quota_cpus"] = e.cgroup->quota_cpus;
  }
  const HostMemory hm = ReadHostMemory(proc_);
  if (hm.total_bytes > 0) (*m)["host.mem_total_bytes"] = hm.total_bytes;
  if (hm.available_bytes >= 0) (*m)["host.mem_available_bytes"] = hm.available_bytes;
}

}  // namespace perftracker::agent
