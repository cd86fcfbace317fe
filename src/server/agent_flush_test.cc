// agent::Agent::Flush against a real server: what a worker said before its connection closed is
// at the server when Flush returns, without waiting for the agent's next poll.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "agent/agent.h"
#include "server/server.h"
#include "server/testing.h"

namespace perftracker::server {
namespace {

// One worker (pid 42, rank 0) whose iterations the test hands over and whose connection it
// closes.
class FlushTestSink : public agent::AgentLocalSink {
 public:
  Status StartWindow(const agent::WindowCommand&) override { return Status::Ok(); }
  std::vector<agent::WorkerTrace> PollFinished() override { return {}; }
  std::vector<agent::IterationReport> PollIterations() override {
    std::lock_guard lk(mu_);
    return std::exchange(pending_, {});
  }
  std::vector<int> WorkerPids() override {
    std::lock_guard lk(mu_);
    return connected_ ? std::vector<int>{42} : std::vector<int>{};
  }
  // The worker's last iteration, then its connection closes.
  void LastWords(int64_t step) {
    std::lock_guard lk(mu_);
    pending_.push_back({.rank = 0, .step = step, .iteration_ms = 10, .pid = 42});
    connected_ = false;
  }

 private:
  std::mutex mu_;
  std::vector<agent::IterationReport> pending_;
  bool connected_ = true;
};

TEST(AgentFlush, WhatTheWorkersSaidIsAtTheServerWhenItReturns) {
  auto server = Server::Start(testing::TestOptions("agent_flush"));
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  agent::AgentOptions o;
  o.server = addr;
  o.host = "node-f";
  o.ranks = {0};
  o.poll_seconds = 30;  // the loop's own rounds never come in this test's time
  auto owned = std::make_unique<FlushTestSink>();
  FlushTestSink* sink = owned.get();
  agent::Agent a(o, std::move(owned));
  std::thread run([&] { EXPECT_TRUE(a.Run().ok()); });
  // Registered: the server lists the agent's rank.
  const auto registered = [&] {
    auto text = agent::ServerStatus(addr, "");
    return text.ok() && text->find("agents: 1") != std::string::npos;
  };
  for (int i = 0; i < 500 && !registered(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(registered());

  // Still connected: Flush waits for the connection, and gives up at its timeout.
  EXPECT_FALSE(a.Flush(std::chrono::milliseconds(50)));
  sink->LastWords(77);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(a.Flush(std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // not the poll's 30
  EXPECT_EQ(a.Progress().iteration, 77);
  auto text = agent::ServerStatus(addr, "");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_NE(text->find("rank 0 on node-f: last step 77"), std::string::npos) << *text;
  a.Stop();
  run.join();
  (*server)->Shutdown();
}

}  // namespace
}  // namespace perftracker::server
