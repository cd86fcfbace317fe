#include "cli/job_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>

namespace perftracker::cli {
namespace {

RunOptions WithCommand() {
  RunOptions o;
  o.command = {"python", "train.py"};
  return o;
}

TEST(JobPlanTest, RunOptionsNeedACommandAndAConsistentLayout) {
  EXPECT_TRUE(CheckRunOptions(WithCommand()).ok());
  EXPECT_EQ(CheckRunOptions(RunOptions{}).message(), "run: no command after --");
  const std::string layout = "run: --nproc must be >= 0 and --node-rank in [0, --nnodes)";
  for (auto [nproc, nnodes, node_rank] : {std::tuple{-1, 1, 0}, {1, 0, 0}, {1, 2, 2}, {1, 2, -1}}) {
    RunOptions o = WithCommand();
    o.nproc = nproc;
    o.nnodes = nnodes;
    o.node_rank = node_rank;
    EXPECT_EQ(CheckRunOptions(o).message(), layout) << nproc << " " << nnodes << " " << node_rank;
  }
  RunOptions last = WithCommand();
  last.nproc = 8;
  last.nnodes = 2;
  last.node_rank = 1;
  EXPECT_TRUE(CheckRunOptions(last).ok());
}

TEST(JobPlanTest, MetricsOnlyForTheEmbeddedServer) {
  RunOptions o = WithCommand();
  o.metrics = "127.0.0.1:9464";
  EXPECT_TRUE(CheckServerOptions(o).ok());
  o.server = "head:50551";
  EXPECT_FALSE(CheckServerOptions(o).ok());
  o.metrics.clear();
  EXPECT_TRUE(CheckServerOptions(o).ok());
}

TEST(JobPlanTest, TheEmbeddedServerListensOnLoopbackOnly) {
  RunOptions o = WithCommand();
  o.listen = "127.0.0.1:50551";
  EXPECT_TRUE(CheckServerOptions(o).ok());
  o.listen = "0.0.0.0:50551";  // no certificate: the token would cross the network in clear
  const Status st = CheckServerOptions(o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("loopback only"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--server"), std::string::npos) << st.message();
}

TEST(JobPlanTest, EmbeddedServerTakesTheRunsWindowOptions) {
  RunOptions o = WithCommand();
  o.listen = "127.0.0.1:7000";
  o.iterations = 7;
  o.max_seconds = 12.5;
  o.baseline_window = false;
  o.profile_every_seconds = 900;
  o.metrics = "127.0.0.1:9464";
  o.diagnose.min_fraction = 0.2;
  server::ServerOptions so = EmbeddedServerOptions(o, "/abs/report", "tok");
  EXPECT_EQ(so.listen, "127.0.0.1:7000");
  EXPECT_EQ(so.report_dir, "/abs/report");
  EXPECT_EQ(so.token, "tok");
  EXPECT_EQ(so.schedule.default_iterations, 7);
  EXPECT_EQ(so.max_seconds, 12.5);
  EXPECT_FALSE(so.schedule.baseline_window);
  EXPECT_EQ(so.schedule.profile_every_seconds, 900);
  EXPECT_EQ(so.metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(so.diagnose.min_fraction, 0.2);
  EXPECT_FALSE(so.on_hang);
}

TEST(JobPlanTest, JobIdGivenElseRendezvousElseRandom) {
  RunOptions o = WithCommand();
  o.job_id = "mine";
  o.master_port = 29500;
  EXPECT_EQ(JobId(o), "mine");
  o.job_id.clear();
  o.master_addr = "node1";
  EXPECT_EQ(JobId(o), "node1:29500");
  o.master_port = 0;
  std::set<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    std::string id = JobId(o);
    EXPECT_EQ(id.size(), 16u);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 4u);
}

TEST(JobPlanTest, LocalAgentReportsThisNodesRanks) {
  RunOptions o = WithCommand();
  o.nproc = 3;
  o.nnodes = 2;
  o.node_rank = 1;
  o.job_id = "j";
  o.profile_at_iteration = 50;
  o.tls.ca = "ca.pem";
  agent::AgentOptions ao = LocalAgentOptions(o, "127.0.0.1:1234", "tok", /*embedded=*/false);
  EXPECT_EQ(ao.server, "127.0.0.1:1234");
  EXPECT_EQ(ao.token, "tok");
  EXPECT_EQ(ao.job_id, "j");
  EXPECT_EQ(ao.ranks, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(ao.profile_at_iteration, 50);
  EXPECT_EQ(ao.tls.ca, "ca.pem");
  // The embedded server is on loopback without TLS.
  EXPECT_TRUE(LocalAgentOptions(o, "s", "t", /*embedded=*/true).tls.ca.empty());
  o.nproc = 0;  // the command starts the ranks: unknown here
  EXPECT_TRUE(LocalAgentOptions(o, "s", "t", false).ranks.empty());
}

TEST(JobPlanTest, ClosingSummaryWithAnOutsideServer) {
  JobOutcome j;
  j.exit_code = 143;
  j.elapsed = std::chrono::seconds(75);
  j.log_path = "/r/perftracker.log";
  j.server = "head:50551";
  EXPECT_EQ(ClosingSummary(j),
            "job ended (exit 143) after 1:15; the diagnosis is at the server (head:50551)\n"
            "  log: /r/perftracker.log");
}

TEST(JobPlanTest, ClosingSummaryWithTheEmbeddedServer) {
  server::RunSummary sum;
  JobOutcome j;
  j.elapsed = std::chrono::seconds(42);
  j.progress.iteration = 119;
  j.progress.iteration_ms = 84.34;
  j.embedded = &sum;
  j.report_dir = "/r";
  j.log_path = "/r/perftracker.log";
  EXPECT_EQ(ClosingSummary(j),
            "job ended (exit 0) after 0:42, 120 iterations, last 84.3 ms; 0 window(s) diagnosed\n"
            "  no diagnosis\n"
            "  report: /r/diagnosis.json   log: /r/perftracker.log");
  sum.windows = 2;
  sum.has_latest = true;
  EXPECT_EQ(ClosingSummary(j),
            "job ended (exit 0) after 0:42, 120 iterations, last 84.3 ms; 2 window(s) diagnosed\n"
            "  latest diagnosis: no findings\n"
            "  report: /r/diagnosis.json   log: /r/perftracker.log");
  sum.hangs = 1;
  sum.latest.findings.resize(2);
  sum.latest.findings[0].summary = "rank 5 is slow";
  EXPECT_EQ(ClosingSummary(j),
            "job ended (exit 0) after 0:42, 120 iterations, last 84.3 ms; 2 window(s) "
            "diagnosed, 1 hang(s)\n"
            "  latest diagnosis: 2 finding(s); first: rank 5 is slow\n"
            "  report: /r/diagnosis.json   log: /r/perftracker.log");
  // An elastic restart: every attempt, one line each.
  sum.attempts = {"attempt 0 (restart count 0): ranks 0-3; ended: rank 1 first", "attempt 1"};
  EXPECT_EQ(ClosingSummary(j),
            "job ended (exit 0) after 0:42, 120 iterations, last 84.3 ms; 2 window(s) "
            "diagnosed, 1 hang(s)\n"
            "  2 attempts (the ranks were started again):\n"
            "    attempt 0 (restart count 0): ranks 0-3; ended: rank 1 first\n"
            "    attempt 1\n"
            "  latest diagnosis: 2 finding(s); first: rank 5 is slow\n"
            "  report: /r/diagnosis.json   log: /r/perftracker.log");
}

}  // namespace
}  // namespace perftracker::cli
