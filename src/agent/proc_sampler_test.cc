#include "agent/proc_sampler.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

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
  EXPECT_EQ(h->procs_running, -1);
  h = ParseHostCpu(
      "cpu  10 20 30 400 50 6 7 8 9 10\nintr 5 0\nctxt 99\nprocs_running 7\nprocs_blocked 0\n");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->procs_running, 7);
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
  auto m = s.End(getpid());
  EXPECT_TRUE(m.count("host.cpu_util"));
  EXPECT_TRUE(m.count("proc.cpu_s"));
  EXPECT_GE(m["proc.cpu_s"], 0.0);
}

TEST(ProcSampler, ParsesProcNetTcp) {
  const char* v4 =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n"
      "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 111 1\n"
      "   1: 0200E70A:9C75 0100E70A:A144 01 0001E240:00000000 01:00000C05 00000000  0 0 222 3\n"
      "   2: garbage\n";
  auto socks = ParseProcNetTcp(v4, false);
  ASSERT_EQ(socks.size(), 1u);  // the listener is not ESTABLISHED
  EXPECT_EQ(socks[0].local, "10.231.0.2:40053");
  EXPECT_EQ(socks[0].remote, "10.231.0.1:41284");
  EXPECT_EQ(socks[0].send_queue, 123456u);
  EXPECT_EQ(socks[0].inode, 222u);
  const char* v6 =
      "  sl  local_address                         remote_address                        st "
      "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:D431 01 "
      "00000010:00000000 00:00000000 00000000     0        0 333 1\n";
  socks = ParseProcNetTcp(v6, true);
  ASSERT_EQ(socks.size(), 1u);
  EXPECT_EQ(socks[0].local, "127.0.0.1:8080");
  EXPECT_EQ(socks[0].send_queue, 16u);
}

TEST(ProcSampler, SeesABackedUpConnectionOfThisProcess) {
  int srv = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(srv, 1), 0);
  ASSERT_EQ(getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len), 0);
  int cli = socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  ASSERT_EQ(connect(cli, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  int peer = accept(srv, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  // The peer never reads: what the client writes stays queued on its side.
  setsockopt(peer, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  fcntl(cli, F_SETFL, O_NONBLOCK);
  std::string chunk(1 << 16, 'x');
  for (int i = 0; i < 64; ++i)
    if (write(cli, chunk.data(), chunk.size()) < 0) break;
  ProcSampler s;
  s.Begin({getpid()});
  s.Tick();
  s.Tick();
  auto m = s.End(getpid());
  double queued = 0;
  for (const auto& [k, v] : m)
    if (k.rfind("tcp.sendq.127.0.0.1:", 0) == 0) queued = std::max(queued, v);
  EXPECT_GT(queued, 1000.0);
  EXPECT_EQ(m["proc.tcp_samples"], 2.0);
  close(cli);
  close(peer);
  close(srv);
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
