#include "agent/os_stats.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <set>

#include "base/units.h"

namespace perftracker::agent {
namespace {

// Skips spaces and tabs, then reads one unsigned decimal: "  42 x" -> 42, rest " x".
bool NextNumber(std::string_view* s, uint64_t* out) {
  size_t i = s->find_first_not_of(" \t");
  if (i == std::string_view::npos) return false;
  const char* b = s->data() + i;
  const char* e = s->data() + s->size();
  auto [p, ec] = std::from_chars(b, e, *out);
  if (ec != std::errc()) return false;
  s->remove_prefix(static_cast<size_t>(p - s->data()));
  return true;
}

// "key: value" or "key value" lines: the number after KEY at the start of a line.
bool KeyNumber(std::string_view text, std::string_view key, uint64_t* out) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == ':' || line[key.size()] == '\t')) {
      line.remove_prefix(key.size() + (line[key.size()] == ':' ? 1 : 0));
      return NextNumber(&line, out);
    }
    at = end + 1;
  }
  return false;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

double ToDouble(std::string_view s, bool* ok) {
  s = Trim(s);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  *ok = ec == std::errc() && p == s.data() + s.size();
  return static_cast<double>(v);
}

}  // namespace

StatusOr<std::string> ReadProcFile(const std::string& path, size_t max_bytes) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return NotFound(fmt::format("{}: cannot read", path));
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    out.append(buf, n);
    if (out.size() > max_bytes) {
      std::fclose(f);
      return DataLoss(fmt::format("{}: over {} bytes", path, max_bytes));
    }
  }
  std::fclose(f);
  return out;
}

StatusOr<SchedStat> ParseSchedStat(std::string_view text) {
  SchedStat s;
  if (!NextNumber(&text, &s.run_ns) || !NextNumber(&text, &s.wait_ns) ||
      !NextNumber(&text, &s.slices))
    return DataLoss("schedstat: not three numbers");
  return s;
}

StatusOr<PidIo> ParsePidIo(std::string_view text) {
  PidIo io;
  if (!KeyNumber(text, "rchar", &io.rchar) || !KeyNumber(text, "wchar", &io.wchar) ||
      !KeyNumber(text, "read_bytes", &io.read_bytes) ||
      !KeyNumber(text, "write_bytes", &io.write_bytes))
    return DataLoss("io: missing rchar, wchar, read_bytes or write_bytes");
  return io;
}

StatusOr<PidMemory> ParsePidStatMemory(std::string_view text) {
  size_t close = text.rfind(')');
  if (close == std::string_view::npos) return DataLoss("stat: no command name");
  std::string_view rest = text.substr(close + 1);
  // After ") ": state is field 3, a letter; numbers follow from field 4.
  size_t s = rest.find_first_not_of(' ');
  if (s == std::string_view::npos) return DataLoss("stat: too few fields");
  rest.remove_prefix(s + 1);
  PidMemory m;
  for (int field = 4; field <= 24; ++field) {
    uint64_t v = 0;
    // Some fields may be negative (priority, nice, tty_nr): read their digits past the sign.
    size_t i = rest.find_first_not_of(' ');
    if (i != std::string_view::npos && rest[i] == '-') rest.remove_prefix(i + 1);
    if (!NextNumber(&rest, &v)) return DataLoss("stat: too few fields");
    if (field == 12) m.major_faults = v;
    if (field == 20) m.threads = v;
    if (field == 24) m.rss_pages = v;
  }
  return m;
}

StatusOr<CgroupCpu> ParseCgroupCpuStat(std::string_view text) {
  CgroupCpu c;
  if (!KeyNumber(text, "nr_periods", &c.nr_periods) ||
      !KeyNumber(text, "nr_throttled", &c.nr_throttled))
    return DataLoss("cpu.stat: no nr_periods or nr_throttled");
  uint64_t t = 0;
  if (KeyNumber(text, "throttled_usec", &t))
    c.throttled_s = UsToS(t);
  else if (KeyNumber(text, "throttled_time", &t))
    c.throttled_s = NsToS(t);
  else
    return DataLoss("cpu.stat: no throttled_usec or throttled_time");
  return c;
}

double ParseCpuMax(std::string_view text) {
  text = Trim(text);
  size_t sp = text.find(' ');
  if (sp == std::string_view::npos) return -1;
  bool ok_q = false, ok_p = false;
  const double quota = ToDouble(text.substr(0, sp), &ok_q);
  const double period = ToDouble(text.substr(sp + 1), &ok_p);
  if (!ok_q || !ok_p || quota <= 0 || period <= 0) return -1;  // "max": no quota
  return quota / period;
}

double CpuQuotaV1(std::string_view quota_us, std::string_view period_us) {
  bool ok_q = false, ok_p = false;
  const double quota = ToDouble(quota_us, &ok_q);
  const double period = ToDouble(period_us, &ok_p);
  if (!ok_q || !ok_p || quota <= 0 || period <= 0) return -1;
  return quota / period;
}

namespace {

// The folder of the cgroup that accounts CONTROLLER for a process, from its /proc/PID/cgroup
// TEXT: a v1 hierarchy that lists the controller wins; else the unified (v2) one, where it holds
// V2_FILE. "" when neither.
std::string ControllerCgroupDir(std::string_view text, const std::string& root,
                                std::string_view controller, const char* v2_file) {
  std::string v2;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    size_t c1 = line.find(':');
    size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    if (path.find("..") != std::string_view::npos) continue;  // never leave the cgroup root
    if (controllers.empty()) {
      v2 = fmt::format("{}{}", root, path == "/" ? "" : path);
      continue;
    }
    // v1: "cpu,cpuacct" or "cpu" among the controllers; the folder is named after the list.
    size_t p = 0;
    while (p <= controllers.size()) {
      size_t q = controllers.find(',', p);
      if (q == std::string_view::npos) q = controllers.size();
      if (controllers.substr(p, q - p) == controller)
        return fmt::format("{}/{}{}", root, controllers, path == "/" ? "" : path);
      p = q + 1;
    }
  }
  // v2 only when the unified hierarchy holds the controller's files.
  if (!v2.empty() && std::filesystem::exists(v2 + "/" + v2_file)) return v2;
  return "";
}

// "oom_kill N" in a v1 memory.oom_control or a v2 memory.events (-1: not counted).
int64_t OomKills(std::string_view text) {
  uint64_t n = 0;
  return KeyNumber(text, "oom_kill", &n) ? static_cast<int64_t>(n) : -1;
}

// A byte count of a cgroup file ("max", or v1's page-counter maximum: no limit, -1).
double LimitBytes(std::string_view text) {
  text = Trim(text);
  if (text == "max") return -1;
  bool ok = false;
  const double v = ToDouble(text, &ok);
  return ok && v < kNoMemoryLimitBytes ? v : -1;
}

}  // namespace

std::string CpuCgroupDir(std::string_view text, const std::string& root) {
  return ControllerCgroupDir(text, root, "cpu", "cpu.stat");
}

std::string MemoryCgroupDir(std::string_view text, const std::string& root) {
  return ControllerCgroupDir(text, root, "memory", "memory.max");
}

CgroupMemory ReadCgroupMemoryAt(const std::string& dir) {
  CgroupMemory m;
  m.dir = dir;
  if (dir.empty()) return m;
  const bool v2 = std::filesystem::exists(dir + "/memory.max");
  if (auto t = ReadProcFile(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes")); t.ok())
    m.limit_bytes = LimitBytes(*t);
  if (auto t = ReadProcFile(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes")); t.ok()) {
    bool ok = false;
    const double v = ToDouble(*t, &ok);
    if (ok) m.usage_bytes = v;
  }
  if (auto t = ReadProcFile(dir + (v2 ? "/memory.events" : "/memory.oom_control")); t.ok())
    m.oom_kills = OomKills(*t);
  return m;
}

int64_t ReadHostOomKills(const std::string& proc) {
  auto text = ReadProcFile(proc + "/vmstat");
  return text.ok() ? OomKills(*text) : -1;
}

CgroupMemory ReadCgroupMemory(int pid, const std::string& proc, const std::string& root) {
  auto cg = ReadProcFile(fmt::format("{}/{}/cgroup", proc, pid));
  return ReadCgroupMemoryAt(cg.ok() ? MemoryCgroupDir(*cg, root) : "");
}

HostMemory ParseMeminfo(std::string_view text) {
  HostMemory m;
  uint64_t kib = 0;
  if (KeyNumber(text, "MemTotal", &kib)) m.total_bytes = KiBToBytes(kib);
  if (KeyNumber(text, "MemAvailable", &kib)) m.available_bytes = KiBToBytes(kib);
  return m;
}

std::map<int, SchedStat> ReadThreadSchedStats(int pid, const std::string& proc) {
  std::map<int, SchedStat> out;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(fmt::format("{}/{}/task", proc, pid), ec)) {
    const std::string name = e.path().filename().string();
    int tid = 0;
    auto [p, err] = std::from_chars(name.data(), name.data() + name.size(), tid);
    if (err != std::errc() || p != name.data() + name.size()) continue;
    auto text = ReadProcFile(e.path().string() + "/schedstat");
    if (!text.ok()) continue;  // the thread ended meanwhile
    if (auto s = ParseSchedStat(*text); s.ok()) out[tid] = *s;
    if (out.size() >= 65536) break;  // a runaway thread count; the rest is not needed
  }
  return out;
}

StatusOr<PidIo> ReadPidIo(int pid, const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string text, ReadProcFile(fmt::format("{}/{}/io", proc, pid)));
  return ParsePidIo(text);
}

StatusOr<PidMemory> ReadPidMemory(int pid, const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string text, ReadProcFile(fmt::format("{}/{}/stat", proc, pid)));
  return ParsePidStatMemory(text);
}

std::vector<int> ReadChildren(int pid, const std::string& proc, size_t max) {
  std::set<int> kids;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(fmt::format("{}/{}/task", proc, pid), ec)) {
    auto text = ReadProcFile(e.path().string() + "/children");
    if (!text.ok()) continue;
    std::string_view s = *text;
    uint64_t v = 0;
    while (kids.size() < max && NextNumber(&s, &v)) kids.insert(static_cast<int>(v));
  }
  return {kids.begin(), kids.end()};
}

StatusOr<CgroupCpu> ReadCgroupCpu(int pid, const std::string& proc, const std::string& root) {
  PT_ASSIGN_OR_RETURN(std::string cg, ReadProcFile(fmt::format("{}/{}/cgroup", proc, pid)));
  const std::string dir = CpuCgroupDir(cg, root);
  if (dir.empty()) return NotFound(fmt::format("{}/{}/cgroup: no cpu controller", proc, pid));
  PT_ASSIGN_OR_RETURN(std::string stat, ReadProcFile(dir + "/cpu.stat"));
  PT_ASSIGN_OR_RETURN(CgroupCpu c, ParseCgroupCpuStat(stat));
  if (auto max = ReadProcFile(dir + "/cpu.max"); max.ok()) {
    c.quota_cpus = ParseCpuMax(*max);
  } else {
    auto q = ReadProcFile(dir + "/cpu.cfs_quota_us");
    auto p = ReadProcFile(dir + "/cpu.cfs_period_us");
    if (q.ok() && p.ok()) c.quota_cpus = CpuQuotaV1(*q, *p);
  }
  return c;
}

StatusOr<Pressure> ParsePressure(std::string_view text) {
  Pressure p;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    int64_t* slot = line.starts_with("some ")   ? &p.some_us
                    : line.starts_with("full ") ? &p.full_us
                                                : nullptr;
    const size_t t = line.find("total=");
    if (!slot || t == std::string_view::npos) continue;
    std::string_view rest = line.substr(t + 6);
    uint64_t v = 0;
    if (!NextNumber(&rest, &v) || v > static_cast<uint64_t>(INT64_MAX))
      return DataLoss("pressure: a total that is not a number");
    *slot = static_cast<int64_t>(v);
  }
  if (p.some_us < 0) return DataLoss("pressure: no 'some' line with a total");
  return p;
}

StatusOr<Pressure> ReadIoPressure(const std::string& proc) {
  PT_ASSIGN_OR_RETURN(std::string text, ReadProcFile(proc + "/pressure/io"));
  return ParsePressure(text);
}

HostMemory ReadHostMemory(const std::string& proc) {
  auto text = ReadProcFile(proc + "/meminfo");
  return text.ok() ? ParseMeminfo(*text) : HostMemory{};
}

}  // namespace perftracker::agent
