// The server across an elastic restart (torchrun --max-restarts), end to end over gRPC: the
// attempts themselves are server/attempts.h (attempts_test.cc).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>

#include "perftracker.grpc.pb.h"
#include "server/server.h"
#include "server/testing.h"

namespace perftracker::server {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;

using testing::Slurp;

// torchrun --max-restarts: a rank is killed, every rank starts again in a new process, numbered
// from iteration 0. The server starts afresh (a baseline of the new attempt, windows placed by
// its iterations) and the job-end diagnosis shows both attempts.
TEST(Restart, AnElasticRestartIsANewAttemptInTheSameReport) {
  ServerOptions o = testing::TestOptions("restart", 0.5, 0.5);
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  testing::AgentClient c((*server)->port());
  std::string agent;
  c.Register({}, &agent, "vm");  // torchrun starts the ranks: none declared
  ASSERT_FALSE(agent.empty());
  auto report = [&](int rank, int64_t from, int64_t to, int pid, int attempt) {
    std::vector<int64_t> steps;
    std::vector<double> ms;
    for (int64_t i = from; i <= to; ++i) {
      steps.push_back(i);
      ms.push_back(100);  // a window starts 2 s = 20 iterations ahead
    }
    return c.Report(rank, steps, ms, agent, pid, attempt);
  };
  auto status = [&] {
    v1::StatusReply st;
    EXPECT_TRUE(c.Call(&v1::Server::Stub::Status, v1::StatusRequest(), &st).ok());
    return st;
  };
  ASSERT_TRUE(report(0, 0, 59, 100, 0));
  ASSERT_TRUE(report(1, 0, 59, 101, 0));
  // The baseline of attempt 0 opens; nobody uploads it.
  ASSERT_TRUE([&] {
    for (int i = 0; i < 50; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(50)))
      if (status().windows_size() == 1) return true;
    return false;
  }());
  EXPECT_EQ(status().windows(0).start_iteration(), 59 + 20);
  // Rank 1 is killed; rank 0's Python exits.
  v1::ReportIterationsRequest ends;
  ends.set_agent_id(agent);
  for (auto [rank, clean, t] : {std::tuple{1, false, 100.0}, std::tuple{0, true, 100.4}}) {
    v1::WorkerState* e = ends.add_workers();
    e->set_rank(rank);
    e->set_pid(100 + rank);
    e->set_exited(true);
    e->set_exit_message(clean);
    e->set_last_iteration(59);
    e->set_exited_unix_seconds(t);
  }
  v1::ReportIterationsReply none;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, ends, &none).ok());
  // torchrun starts both again (restart count 1); their iterations count from 0.
  ASSERT_TRUE(report(0, 0, 9, 200, 1));
  ASSERT_TRUE(report(1, 0, 9, 201, 1));
  v1::StatusReply st = status();
  ASSERT_EQ(st.windows_size(), 1);
  EXPECT_EQ(st.windows(0).state(), "done");  // attempt 0's window is over (nobody uploaded it)
  EXPECT_EQ(st.ranks(0).last_step(), 9);
  // Attempt 1's own baseline, placed by its own iterations.
  ASSERT_TRUE(report(0, 10, 25, 200, 1));
  ASSERT_TRUE(report(1, 10, 25, 201, 1));
  ASSERT_TRUE([&] {
    for (int i = 0; i < 50; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(50)))
      if (status().windows_size() == 2) return true;
    return false;
  }());
  EXPECT_EQ(status().windows(1).start_iteration(), 25 + 20);  // not after attempt 0's 59
  (*server)->Shutdown();
  const std::string json = Slurp(o.report_dir + "/diagnosis.json");
  EXPECT_NE(json.find("\"attempts\""), std::string::npos) << json;
  EXPECT_NE(json.find("attempt 0 (restart count 0): ranks 0,1, pids 100,101 on vm; up to "
                      "iteration 59; ended: rank 1 (pid 101 on vm) first, killed or crashed (no "
                      "exit hook), after iteration 59, then rank 0 (1 exited, 0 killed or "
                      "crashed)"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("attempt 1 (restart count 1): ranks 0,1, pids 200,201 on vm; up to "
                      "iteration 25"),
            std::string::npos)
      << json;
  RunSummary sum = (*server)->Summary();
  EXPECT_EQ(sum.attempts.size(), 2u);
}

}  // namespace
}  // namespace perftracker::server
