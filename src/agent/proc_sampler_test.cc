#include "agent/proc_sampler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "agent/nvml_sampler.h"

namespace perftracker::agent {
namespace {

TEST(ProcSampler, ParsesStatWithSpacesAndParensInName) {
  auto cpu = ParsePidStat("42 (my (weird) proc) S 1 42 42 0 -1 4194304 100 0 0 0 1234 567 0 0");
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  EXPECT_EQ(cpu->utime_ticks, 1234u);
  EXPECT_EQ(cpu->stime_ticks, 567u);
  EXPECT_FALSE(ParsePidStat("42 (x) S 1").ok());
}

TEST(ProcSampler, ParsesStatusContextSwitches) {
  PidCpu cpu;
  ASSERT_TRUE(ParsePidStatus("Name:\tx\nvoluntary_ctxt_switches:\t17\n"
                             "nonvoluntary_ctxt_switches:\t3\n",
                             &cpu)
                  .ok());
  EXPECT_EQ(cpu.voluntary_ctxt_switches, 17u);
  EXPECT_EQ(cpu.nonvoluntary_ctxt_switches, 3u);
}

TEST(ProcSampler, ParsesHostCpuAndNetDev) {
  auto h = ParseHostCpu("cpu  10 20 30 400 50 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\n");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->total, 10u + 20 + 30 + 400 + 50 + 6 + 7 + 8);
  EXPECT_EQ(h->busy, 10u + 20 + 30 + 6 + 7 + 8);
  auto n = ParseNetDev(
      "Inter-|   Receive                                                |  Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets\n"
      "    lo: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"
      "  eth0: 5 1 0 0 0 0 0 0 7 1 0 0 0 0 0 0\n");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->at("lo").rx_bytes, 1000u);
  EXPECT_EQ(n->at("lo").tx_bytes, 2000u);
  EXPECT_EQ(n->at("eth0").tx_bytes, 7u);
}

TEST(ProcSampler, SamplesThisMachine) {
  ASSERT_TRUE(ReadPidCpu(getpid()).ok());
  ASSERT_TRUE(ReadHostCpu().ok());
  ProcSampler s;
  s.Begin({getpid()});
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + i * 0.5;
  auto m = s.End();
  EXPECT_TRUE(m.count("host.cpu_util"));
  EXPECT_TRUE(m.count(fmt::format("pid.{}.cpu_s", getpid())));
  EXPECT_GE(m[fmt::format("pid.{}.cpu_s", getpid())], 0.0);
}

TEST(NvmlSampler, ReportsUnavailableCleanly) {
  NvmlSampler missing("libnvidia-ml-does-not-exist.so.1");
  EXPECT_FALSE(missing.available());
  EXPECT_EQ(missing.status().rfind("unavailable", 0), 0u);
  EXPECT_TRUE(missing.Sample().empty());
  NvmlSampler real;  // absent on CPU machines; present with a driver
  EXPECT_TRUE(real.available() ? real.status() == "ok"
                               : real.status().rfind("unavailable", 0) == 0);
}

}  // namespace
}  // namespace perftracker::agent
