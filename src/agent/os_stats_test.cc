#include "agent/os_stats.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/proc_sampler.h"

namespace perftracker::agent {
namespace {

TEST(OsStats, ParsesSchedStat) {
  auto s = ParseSchedStat("187550053 8479843 432\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->run_ns, 187550053u);
  EXPECT_EQ(s->wait_ns, 8479843u);
  EXPECT_EQ(s->slices, 432u);
  EXPECT_FALSE(ParseSchedStat("12 x").ok());
  EXPECT_FALSE(ParseSchedStat("").ok());
}

TEST(OsStats, ParsesPidIo) {
  auto io = ParsePidIo(
      "rchar: 4292\nwchar: 1220\nsyscr: 12\nsyscw: 9\nread_bytes: 8192\nwrite_bytes: 40960\n"
      "cancelled_write_bytes: 0\n");
  ASSERT_TRUE(io.ok());
  EXPECT_EQ(io->rchar, 4292u);
  EXPECT_EQ(io->wchar, 1220u);
  EXPECT_EQ(io->read_bytes, 8192u);
  EXPECT_EQ(io->write_bytes, 40960u);
  // "write_bytes" must not match inside "cancelled_write_bytes" (only at a line's start).
  EXPECT_FALSE(ParsePidIo("rchar: 1\nwchar: 2\nread_bytes: 3\ncancelled_write_bytes: 4\n").ok());
}

TEST(OsStats, ParsesPressure) {
  // Recorded from this machine's /proc/pressure/io.
  auto p = ParsePressure(
      "some avg10=0.00 avg60=0.02 avg300=0.17 total=20266364\n"
      "full avg10=0.00 avg60=0.01 avg300=0.11 total=14052221\n");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->some_us, 20266364);
  EXPECT_EQ(p->full_us, 14052221);
  // An older kernel's cpu file: a "some" line alone.
  auto cpu = ParsePressure("some avg10=1.00 avg60=0.50 avg300=0.10 total=42\n");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->some_us, 42);
  EXPECT_EQ(cpu->full_us, -1);
  EXPECT_FALSE(ParsePressure("").ok());
  EXPECT_FALSE(ParsePressure("some avg10=0.00 total=x\n").ok());
  EXPECT_FALSE(ParsePressure("full avg10=0.00 total=5\n").ok());  // no "some"
}

TEST(OsStats, ParsesStatMemoryFields) {
  // Recorded from a Python process; the name holds a space and a parenthesis, nice is negative.
  const char* stat =
      "1 (process_api) x) S 0 0 0 0 -1 4194560 26149 438704 7 331 663 2139 732 341 10 -10 16 0 "
      "25 42618880 2270 18446744073709551615 1 1 0 0";
  auto m = ParsePidStatMemory(stat);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->major_faults, 7u);
  EXPECT_EQ(m->threads, 16u);
  EXPECT_EQ(m->rss_pages, 2270u);
  EXPECT_FALSE(ParsePidStatMemory("1 (x) S 0 0 0").ok());
}

TEST(OsStats, ParsesCgroupCpuStatV1AndV2) {
  auto v1 = ParseCgroupCpuStat(
      "nr_periods 200\nnr_throttled 150\nthrottled_time 7500000000\nnr_bursts 0\n");
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->nr_periods, 200u);
  EXPECT_EQ(v1->nr_throttled, 150u);
  EXPECT_DOUBLE_EQ(v1->throttled_s, 7.5);
  auto v2 = ParseCgroupCpuStat(
      "usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 10\nnr_throttled 4\n"
      "throttled_usec 250000\n");
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->nr_throttled, 4u);
  EXPECT_DOUBLE_EQ(v2->throttled_s, 0.25);
  EXPECT_FALSE(ParseCgroupCpuStat("usage_usec 100\n").ok());
}

TEST(OsStats, ParsesQuotas) {
  EXPECT_DOUBLE_EQ(ParseCpuMax("25000 100000\n"), 0.25);
  EXPECT_EQ(ParseCpuMax("max 100000\n"), -1);
  EXPECT_EQ(ParseCpuMax("garbage"), -1);
  EXPECT_DOUBLE_EQ(CpuQuotaV1("50000\n", "100000\n"), 0.5);
  EXPECT_EQ(CpuQuotaV1("-1\n", "100000\n"), -1);
}

TEST(OsStats, FindsTheCpuCgroup) {
  // v1 (hybrid): the cpu controller's folder is named after its controller list.
  EXPECT_EQ(CpuCgroupDir("4:memory:/x\n2:cpu,cpuacct:/job/rank2\n0::/\n", "/sys/fs/cgroup"),
            "/sys/fs/cgroup/cpu,cpuacct/job/rank2");
  EXPECT_EQ(CpuCgroupDir("2:cpuacct:/\n1:cpu:/\n", "/r"), "/r/cpu");
  // A path that climbs out of the root is refused.
  EXPECT_EQ(CpuCgroupDir("1:cpu:/../etc\n", "/r"), "");
  // v2: only where the unified folder has cpu.stat.
  const std::string root = fmt::format("{}/pt_cg_{}", testing::TempDir(), getpid());
  std::filesystem::create_directories(root + "/job.slice");
  EXPECT_EQ(CpuCgroupDir("0::/job.slice\n", root), "");
  std::ofstream(root + "/job.slice/cpu.stat") << "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n";
  EXPECT_EQ(CpuCgroupDir("0::/job.slice\n", root), root + "/job.slice");
  std::filesystem::remove_all(root);
}

TEST(OsStats, ParsesMeminfo) {
  HostMemory m = ParseMeminfo(
      "MemTotal:       24683568 kB\nMemFree:        20382000 kB\n"
      "MemAvailable:   23917288 kB\n");
  EXPECT_DOUBLE_EQ(m.total_bytes, 24683568.0 * 1024);
  EXPECT_DOUBLE_EQ(m.available_bytes, 23917288.0 * 1024);
  EXPECT_EQ(ParseMeminfo("x").total_bytes, -1);
}

// A fake /proc and cgroup root: the sampler's window deltas come from the two readings.
TEST(OsStats, SamplerReportsWindowDeltasFromAFakeProc) {
  const std::string dir = fmt::format("{}/pt_proc_{}", testing::TempDir(), getpid());
  const std::string proc = dir + "/proc", cg = dir + "/cg";
  auto write = [](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  };
  auto state = [&](uint64_t run, uint64_t wait, uint64_t rss, uint64_t periods, uint64_t thr,
                   uint64_t wbytes, uint64_t kid_ticks) {
    write(proc + "/7/stat", fmt::format("7 (python) S 1 7 7 0 -1 0 0 0 3 0 100 20 0 0 20 0 3 0 "
                                        "1 1000 {} 0",
                                        rss));
    write(proc + "/7/status", "voluntary_ctxt_switches: 1\nnonvoluntary_ctxt_switches: 2\n");
    write(proc + "/7/task/7/schedstat", fmt::format("{} {} 10\n", run, wait));
    write(proc + "/7/task/8/schedstat", fmt::format("{} {} 10\n", run / 2, wait / 2));
    write(proc + "/7/task/7/children", "9 ");
    write(proc + "/7/task/8/children", "");
    write(proc + "/9/stat", fmt::format("9 (pt_data_worker) S 7 7 7 0 -1 0 0 0 0 0 {} 0 0 0 20 "
                                        "0 1 0 1 1000 100 0",
                                        kid_ticks));
    write(proc + "/9/status", "voluntary_ctxt_switches: 1\nnonvoluntary_ctxt_switches: 2\n");
    write(proc + "/9/task/9/schedstat", "5 5 1\n");
    write(proc + "/7/io",
          fmt::format("rchar: 0\nwchar: {0}\nread_bytes: 0\nwrite_bytes: {0}\n", wbytes));
    write(proc + "/7/cgroup", "1:cpu:/rank\n");
    write(cg + "/cpu/rank/cpu.stat",
          fmt::format("nr_periods {}\nnr_throttled {}\nthrottled_time {}\n", periods, thr,
                      thr * 50000000));
    write(cg + "/cpu/rank/cpu.cfs_quota_us", "25000\n");
    write(cg + "/cpu/rank/cpu.cfs_period_us", "100000\n");
    write(proc + "/meminfo", "MemTotal: 1000 kB\nMemAvailable: 500 kB\n");
    write(proc + "/stat", "cpu  1 0 0 1 0 0 0 0 0 0\n");
    write(proc + "/net/dev", "Inter-|\n face |\n lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
    write(proc + "/pressure/io",
          fmt::format("some avg10=0.00 total={}\nfull avg10=0.00 total={}\n", wbytes, wbytes / 4));
  };
  state(1000000000, 100000000, 1000, 10, 2, 0, 100);
  ProcSampler s(proc, cg);
  s.Begin({7});
  state(3000000000, 1100000000, 1500, 30, 17, 1 << 20, 300);
  auto m = s.End(7);
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  // Two threads: 2 s + 1 s run, 1 s + 0.5 s waiting.
  EXPECT_NEAR(m["proc.run_s"], 3.0, 1e-9);
  EXPECT_NEAR(m["proc.runq_wait_s"], 1.5, 1e-9);
  EXPECT_EQ(m["children.count"], 1);
  EXPECT_NEAR(m["children.cpu_s"], 200 / tick, 1e-9);
  EXPECT_EQ(m["proc.write_bytes"], 1 << 20);
  EXPECT_EQ(m["proc.rss_growth_bytes"], 500.0 * sysconf(_SC_PAGESIZE));
  EXPECT_EQ(m["cgroup.nr_periods"], 20);
  EXPECT_EQ(m["cgroup.nr_throttled"], 15);
  EXPECT_NEAR(m["cgroup.throttled_s"], 0.75, 1e-9);
  EXPECT_DOUBLE_EQ(m["cgroup.quota_cpus"], 0.25);
  EXPECT_EQ(m["host.mem_available_bytes"], 500 * 1024);
  // The storage stall of the window: 1 MiB us of "some", a quarter of it "full".
  EXPECT_NEAR(m["host.io_some_s"], (1 << 20) / 1e6, 1e-9);
  EXPECT_NEAR(m["host.io_full_s"], (1 << 18) / 1e6, 1e-9);
  std::filesystem::remove_all(dir);
}

TEST(OsStats, FindsTheMemoryCgroupAndItsOomKills) {
  const std::string dir = fmt::format("{}/pt_memcg_{}", testing::TempDir(), getpid());
  auto write = [](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  };
  // v1 (this machine's layout): the memory controller's own hierarchy.
  const std::string v1 = MemoryCgroupDir("4:memory:/job/rank1\n1:cpu:/\n0::/\n", dir);
  EXPECT_EQ(v1, dir + "/memory/job/rank1");
  write(v1 + "/memory.limit_in_bytes", "629145600\n");
  write(v1 + "/memory.usage_in_bytes", "600000000\n");
  write(v1 + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  CgroupMemory m = ReadCgroupMemoryAt(v1);
  EXPECT_EQ(m.limit_bytes, 629145600);
  EXPECT_EQ(m.usage_bytes, 600000000);
  EXPECT_EQ(m.oom_kills, 1);
  // v1's "no limit" is the page counter's maximum.
  write(v1 + "/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(ReadCgroupMemoryAt(v1).limit_bytes, -1);
  // v2: the unified hierarchy where it has memory.max; "max" is no limit.
  const std::string v2 = dir + "/v2";
  write(v2 + "/job/memory.max", "max\n");
  write(v2 + "/job/memory.current", "4096\n");
  write(v2 + "/job/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n");
  EXPECT_EQ(MemoryCgroupDir("0::/job\n", v2), v2 + "/job");
  m = ReadCgroupMemoryAt(v2 + "/job");
  EXPECT_EQ(m.limit_bytes, -1);
  EXPECT_EQ(m.usage_bytes, 4096);
  EXPECT_EQ(m.oom_kills, 2);
  // Neither: no folder, nothing read.
  EXPECT_EQ(MemoryCgroupDir("0::/other\n", v2), "");
  EXPECT_EQ(ReadCgroupMemoryAt("").oom_kills, -1);
  std::filesystem::remove_all(dir);
}

TEST(OsStats, ReadsThisProcess) {
  EXPECT_FALSE(ReadThreadSchedStats(getpid()).empty());
  EXPECT_TRUE(ReadPidMemory(getpid()).ok());
  EXPECT_GT(ReadHostMemory().total_bytes, 0);
}

}  // namespace
}  // namespace perftracker::agent
