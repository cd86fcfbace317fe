// The server's windows as triggers open them, end to end over gRPC: a worker's trigger before
// any iteration report, hangs (stacks collected, or cleared when iterations resume), slowdowns
// and their cool-down, the baseline and periodic windows. The scheduler's rules alone are
// scheduler_test.cc.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>

#include "perftracker.grpc.pb.h"
#include "server/server.h"
#include "server/store.h"
#include "server/testing.h"

namespace perftracker::server {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;

using testing::Slurp;
using testing::TempDir;
using testing::TestOptions;
using Client = testing::AgentClient;

// A stacks reply of RANK to request ID: its main thread at AT (file, line), outermost first.
v1::UploadStacksRequest Stacks(const std::string& agent, int64_t id, int rank,
                               std::vector<std::pair<std::string, int>> at) {
  v1::UploadStacksRequest s;
  s.set_agent_id(agent);
  s.set_request_id(id);
  s.set_rank(rank);
  s.set_host("node-a");
  auto* t = s.add_threads();
  t->set_name("MainThread");
  t->set_main(true);
  for (const auto& [file, line] : at) {
    auto* f = t->add_frames();
    f->set_file(file);
    f->set_line(line);
    f->set_function(file.find("torch") != std::string::npos ? "backward" : "train_step");
  }
  return s;
}

// A server of its options less the baseline window (the test opens every window), with an
// agent of rank 0 registered: Start() says whether both came up.
struct OneRankServer {
  explicit OneRankServer(ServerOptions o) : options(std::move(o)) {
    options.schedule.baseline_window = false;
  }
  bool Start() {
    auto started = Server::Start(options);
    if (!started.ok()) return false;
    server = std::move(*started);
    client = std::make_unique<Client>(server->port());
    std::string agent;
    return client->Register({0}, &agent);
  }
  ServerOptions options;
  std::unique_ptr<Server> server;
  std::unique_ptr<Client> client;
};

// Rank 0 reports iterations 0..N-1: the first FAST of them FAST_MS each, the rest SLOW_MS.
bool ReportSteps(Client& c, int n, int fast, double fast_ms, double slow_ms) {
  std::vector<int64_t> steps;
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    steps.push_back(i);
    ms.push_back(i < fast ? fast_ms : slow_ms);
  }
  return c.Report(0, steps, ms);
}

// Rank 0's detector: a slowdown at ITERATION (0: not said), its recent iterations MEAN_MS
// against BEST_MS.
v1::TriggerRequest Slowdown(int64_t iteration, double mean_ms, double best_ms) {
  v1::TriggerRequest slow;
  slow.set_kind("slowdown");
  slow.set_rank(0);
  slow.set_iteration(iteration);
  slow.set_mean_ms(mean_ms);
  slow.set_best_ms(best_ms);
  return slow;
}

// --profile-at-iteration on an H200 (4 ms iterations): the agent's trigger came before any
// iteration report, and the window was announced as iterations 0..9.
TEST(Server, ATriggerBeforeAnyReportStartsFromItsOwnStep) {
  ServerOptions o = TestOptions("trigger_step");
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().message();
  Client c((*server)->port());
  v1::RegisterRequest reg;
  reg.set_host("node-a");
  reg.add_ranks(0);
  v1::RegisterReply rr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Register, reg, &rr).ok());
  v1::TriggerRequest req;
  req.set_kind("user");
  req.set_rank(0);
  req.set_iteration(170);
  req.set_mean_ms(4);
  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, req, &tr).ok());
  EXPECT_EQ(tr.start_iteration(), 170 + 500);  // 2 s of 4 ms iterations ahead
}

TEST(Server, HangCollectsStacksNamesTheRankAndCallsBack) {
  ServerOptions o = TestOptions("hang");
  std::atomic<int> hangs{0};
  o.on_hang = [&](const diagnose::Diagnosis& d) { ++hangs; };
  o.schedule.hang_confirm_seconds = 0.3;
  // The dumps are files, read without the server's lock: an agent's call made meanwhile is
  // answered (under the lock it would wait until its deadline).
  std::atomic<int> answered_while_reading{-1};
  int port = 0;
  o.before_reading_dumps = [&] {
    Client other(port);
    v1::RegisterRequest reg;
    reg.set_host("node-b");
    v1::RegisterReply rr;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    answered_while_reading = other.stub()->Register(&ctx, reg, &rr).ok() ? 1 : 0;
  };
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  port = (*server)->port();
  Client c((*server)->port());
  std::string agent;
  ASSERT_TRUE(c.Register({0, 1, 2}, &agent));
  grpc::ClientContext wctx;
  v1::WatchRequest wreq;
  wreq.set_agent_id(agent);
  auto reader = c.stub()->WatchCommands(&wctx, wreq);

  v1::TriggerRequest hang;
  hang.set_kind("hang");
  hang.set_rank(0);
  hang.set_mean_ms(100);
  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, hang, &tr).ok());
  // A second rank's hang trigger joins the same collection.
  hang.set_rank(2);
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, hang, &tr).ok());
  v1::Command cmd;
  ASSERT_TRUE(reader->Read(&cmd));
  ASSERT_TRUE(cmd.has_stacks());
  int64_t id = cmd.stacks().request_id();
  const std::string torch = "/usr/lib/python3/dist-packages/torch/_tensor.py";
  v1::UploadStacksReply ur;
  for (int r : {0, 2})
    ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadStacks,
                       Stacks(agent, id, r, {{"/job/train.py", 150}, {torch, 487}}), &ur)
                    .ok());
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadStacks,
                     Stacks(agent, id, 1, {{"/job/train.py", 150}, {"/job/train.py", 120}}), &ur)
                  .ok());
  EXPECT_TRUE(ur.accepted());
  std::string latest = o.report_dir + "/diagnosis.json";
  for (int i = 0; i < 50 && hangs == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(hangs, 1);
  EXPECT_EQ(answered_while_reading, 1);
  std::string json = Slurp(latest);
  EXPECT_NE(json.find("\"hang\""), std::string::npos) << json;
  EXPECT_NE(json.find("/job/train.py:120"), std::string::npos) << json;
  EXPECT_TRUE(fs::exists(o.report_dir + "/windows/" + std::to_string(id) + "/diagnosis.json"));
  // Stacks for a request that is over are refused.
  ASSERT_TRUE(
      c.Call(&v1::Server::Stub::UploadStacks, Stacks(agent, id, 1, {{"/job/train.py", 150}}), &ur)
          .ok());
  EXPECT_FALSE(ur.accepted());
  wctx.TryCancel();
  (*server)->Shutdown();
}

TEST(Server, HangTriggerClearedByProgressOrJobEndIsNotReported) {
  ServerOptions o = TestOptions("pause");
  o.schedule.hang_confirm_seconds = 0.5;
  std::atomic<int> hangs{0};
  o.on_hang = [&](const diagnose::Diagnosis&) { ++hangs; };
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  std::string agent;
  ASSERT_TRUE(c.Register({0}, &agent));
  ASSERT_TRUE(c.Report(0, {1}, {10}));
  v1::TriggerRequest hang;
  hang.set_kind("hang");
  hang.set_rank(0);
  hang.set_mean_ms(10);
  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, hang, &tr).ok());
  ASSERT_TRUE(c.Report(0, {2}, {10}));  // a pause (an epoch boundary), then progress
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  EXPECT_EQ(hangs, 0);
  EXPECT_FALSE(fs::exists(o.report_dir + "/windows"));
  // At the job's end the workers go silent; the server stops before confirming.
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, hang, &tr).ok());
  (*server)->Shutdown();
  EXPECT_EQ(hangs, 0);
  EXPECT_EQ(Slurp(o.report_dir + "/diagnosis.json").find("\"hang\""), std::string::npos);
}

// A straggler run (torch 2.13, 4 ranks): 44 ms iterations, 81 ms after the fault. At the run's
// mean iteration the window began 3.1 s after the trigger that opened it, not the lead's 2 s.
TEST(Server, ASlowdownsWindowStartsTheLeadAheadAtTheRateTheJobRunsNow) {
  OneRankServer one(TestOptions("slow_lead"));
  ASSERT_TRUE(one.Start());
  Client& c = *one.client;
  ASSERT_TRUE(ReportSteps(c, 220, 200, 40, 80));  // the run's mean: 43.6 ms
  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, Slowdown(219, 80, 40), &tr).ok());
  EXPECT_EQ(tr.window_id(), 1);
  EXPECT_EQ(tr.start_iteration(), 219 + 25);  // 2 s of 80 ms iterations, not 46 of 43.6 ms
}

TEST(Server, SlowdownTriggersCoolDownAndJobEndHasRunStatistics) {
  OneRankServer one(TestOptions("cool", 0.1, 0.1));
  ASSERT_TRUE(one.Start());
  const ServerOptions& o = one.options;
  Client& c = *one.client;
  ASSERT_TRUE(ReportSteps(c, 100, 99, 10, 50));

  v1::TriggerRequest slow = Slowdown(0, 12, 10);
  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, slow, &tr).ok());
  EXPECT_EQ(tr.window_id(), 1);
  EXPECT_FALSE(tr.already_open());
  // The window expires (nobody uploads); a slowdown trigger right after is ignored.
  for (int i = 0; i < 50 && !fs::exists(o.report_dir + "/windows/1/diagnosis.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, slow, &tr).ok());
  EXPECT_EQ(tr.window_id(), 0);
  // A user's trigger is never ignored.
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, v1::TriggerRequest(), &tr).ok());
  EXPECT_EQ(tr.window_id(), 2);
  // A new, bigger slowdown during the cooldown (the job 25% slower than at the trigger that
  // opened window 1) is not the one window 1 profiled: it opens a window once 2 is closed.
  for (int i = 0; i < 50 && !fs::exists(o.report_dir + "/windows/2/diagnosis.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  slow.set_mean_ms(14);  // < 1.25 x 12: the same slowdown, still cooling
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, slow, &tr).ok());
  EXPECT_EQ(tr.window_id(), 0);
  slow.set_mean_ms(20);
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, slow, &tr).ok());
  EXPECT_EQ(tr.window_id(), 3);
  one.server->Shutdown();
  std::string json = Slurp(o.report_dir + "/diagnosis.json");
  EXPECT_NE(json.find("run_iteration_ms"), std::string::npos) << json;
  EXPECT_NE(json.find("\"count\": 100"), std::string::npos) << json;
  EXPECT_NE(json.find("\"max\": 50"), std::string::npos) << json;
}

TEST(Server, BaselineWindowOnceEveryRankIsPastItsWarmupThenPeriodicOnes) {
  ServerOptions o = TestOptions("baseline", 0.1, 0.1);
  o.schedule.profile_every_seconds = 0.6;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  std::string agent;
  ASSERT_TRUE(c.Register({0, 1}, &agent));
  auto report = [&](int rank, int n) {
    std::vector<int64_t> steps;
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
      steps.push_back(i);
      ms.push_back(10);
    }
    return c.Report(rank, steps, ms);
  };
  // Rank 0 is past the warm-up, rank 1 not yet: no window.
  ASSERT_TRUE(report(0, o.schedule.baseline_after_iterations));
  ASSERT_TRUE(report(1, o.schedule.baseline_after_iterations - 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(fs::exists(o.report_dir + "/windows/1"));
  ASSERT_TRUE(report(1, 1));
  for (int i = 0; i < 50 && !fs::exists(o.report_dir + "/windows/1/diagnosis.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(o.report_dir + "/windows/1/diagnosis.json"));
  // Then one every 0.6 s.
  for (int i = 0; i < 50 && !fs::exists(o.report_dir + "/windows/2/diagnosis.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(fs::exists(o.report_dir + "/windows/2/diagnosis.json"));
  (*server)->Shutdown();
}

TEST(Server, ASlowdownThatBeganDuringAnOpenWindowGetsAWindowOfItsOwn) {
  OneRankServer one(TestOptions("followup", 0.1, 0.1));
  ASSERT_TRUE(one.Start());
  const ServerOptions& o = one.options;
  Client& c = *one.client;
  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, v1::TriggerRequest(), &tr).ok());
  ASSERT_EQ(tr.window_id(), 1);
  // The slowdown began at an iteration the open window already profiles (or has profiled).
  ASSERT_TRUE(
      c.Call(&v1::Server::Stub::Trigger, Slowdown(tr.start_iteration() + 3, 12, 10), &tr).ok());
  EXPECT_EQ(tr.window_id(), 1);
  EXPECT_TRUE(tr.already_open());
  // Window 1 expires (nobody uploads); window 2 follows for the slowdown.
  for (int i = 0; i < 50 && !fs::exists(o.report_dir + "/windows/2/diagnosis.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(fs::exists(o.report_dir + "/windows/2/diagnosis.json"));
  one.server->Shutdown();
}

// A leak found while another window is open (a user's, which no rank uploads to) opens its own
// window once that one is over, and only the growing rank records its allocations in it
// (ProfileWindow.memory_ranks): its finding can then name where memory is kept.
TEST(Server, AMemoryGrowthOpensAWindowWhereTheGrowingRankRecordsAllocations) {
  ServerOptions o = TestOptions("memory_window", /*max_seconds=*/0.3, /*upload_grace_seconds=*/0.2);
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  std::string agent;
  ASSERT_TRUE(c.Register({0, 1}, &agent, "node-a"));
  grpc::ClientContext wctx;
  wctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::WatchRequest wreq;
  wreq.set_agent_id(agent);
  auto reader = c.stub()->WatchCommands(&wctx, wreq);
  v1::TriggerRequest user;
  user.set_kind("user");
  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, user, &tr).ok());
  constexpr double kMiB = 1 << 20;
  for (int step = 0; step < 200; ++step) {
    v1::ReportIterationsRequest it;
    it.set_agent_id(agent);
    for (int rank : {0, 1}) {
      auto* b = it.add_batches();
      b->set_rank(rank);
      b->add_steps(step);
      b->add_iteration_ms(50);
      b->set_rss_bytes((300 + (rank == 1 ? 4 * std::max(0, step - 60) : 0)) * kMiB);
    }
    v1::ReportIterationsReply itr;
    ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, it, &itr).ok());
  }
  std::vector<v1::ProfileWindow> windows;
  v1::Command cmd;
  while (reader->Read(&cmd)) {
    if (!cmd.has_profile()) continue;
    windows.push_back(cmd.profile());
    if (cmd.profile().memory_ranks_size() > 0) break;
  }
  ASSERT_GE(windows.size(), 2u);
  EXPECT_EQ(windows.front().memory_ranks_size(), 0);  // the user's
  const v1::ProfileWindow& memory = windows.back();
  ASSERT_EQ(memory.memory_ranks_size(), 1);
  EXPECT_EQ(memory.memory_ranks(0), 1);
  EXPECT_GT(memory.window_id(), windows.front().window_id());
  wctx.TryCancel();
  (*server)->Shutdown();
}

// A server killed with a window open left that window in its database but no report folder:
// the next life on the same folder numbers its windows after it, not into its trace folder.
TEST(Server, ARestartedServerNumbersItsWindowsAfterOneItWasKilledIn) {
  ServerOptions o = TestOptions("killed_in_window");
  {
    auto store = Store::Open(o.report_dir + "/perftracker.db");
    ASSERT_TRUE(store.ok());
    auto job = (*store)->AddJob(o.report_dir);
    ASSERT_TRUE(job.ok());
    ASSERT_TRUE((*store)->AddWindow(*job, 3, 80, 10, "baseline").ok());
  }
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  std::string agent;
  ASSERT_TRUE(c.Register({0}, &agent));
  v1::TriggerRequest user;
  user.set_kind("user");
  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, user, &tr).ok());
  EXPECT_EQ(tr.window_id(), 4);
  (*server)->Shutdown();
}

}  // namespace
}  // namespace perftracker::server
