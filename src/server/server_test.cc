#include "server/server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "diagnose/memory_growth.h"
#include "pattern/summarizer.h"
#include "pattern/summary_io.h"
#include "perftracker.grpc.pb.h"
#include "report/diagnosis_reader.h"
#include "server/store.h"
#include "server/testing.h"
#include "server/window.h"

namespace perftracker::server {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;

pattern::RankSummary Synthetic(int rank, int world, double ms) {
  pattern::RankSummary s;
  s.rank = rank;
  s.world_size = world;
  s.host = "h" + std::to_string(rank);
  s.iteration_source = "ProfilerStep";
  s.iteration_ms = {ms, ms, ms, ms};
  s.window_ms = 4 * ms;
  return s;
}

using testing::Slurp;
using testing::TempDir;
using testing::TestOptions;
using Client = testing::AgentClient;

TEST(Auth, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
}

TEST(Server, NonLoopbackNeedsToken) {
  ServerOptions o;
  o.listen = "127.0.0.2:0";
  o.report_dir = TempDir("tok");
  auto s = Server::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("token"), std::string::npos);
}

TEST(Window, MissingRankIsAFinding) {
  Window w({1, 0, 4, 1}, {}, Window::Clock::now());
  RankUpload u;
  u.rank = 0;
  u.summary_bytes = pattern::SerializeSummary(Synthetic(0, 3, 10));
  ASSERT_TRUE(w.AddUpload(u).ok());
  EXPECT_FALSE(w.AddUpload(u).ok());  // twice
  EXPECT_FALSE(w.Complete());
  EXPECT_EQ(w.Missing(), (std::vector<int>{1, 2}));  // world size 3 from the summary
  Window::Sealed sealed = w.Seal();
  diagnose::BaselineState baseline;
  diagnose::Diagnosis d = diagnose::DiagnoseWindow(sealed.DiagnosisInput(), &baseline);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].category, diagnose::Category::kMissingRank);
  EXPECT_EQ(d.findings[0].ranks, (std::vector<int>{1, 2}));
}

TEST(Store, KeepsWindowsAndFindings) {
  auto store = Store::Open(":memory:");
  ASSERT_TRUE(store.ok());
  auto job = (*store)->AddJob("/tmp/x");
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE((*store)->AddWindow(*job, 1, 100, 10, "user").ok());
  ASSERT_TRUE((*store)->AddRankSummary({1, 0, "h", 1234, 10, 5.0, "{}", "PTSUMMRY..."}).ok());
  diagnose::Diagnosis d;
  diagnose::Finding f;
  f.category = diagnose::Category::kMissingRank;
  f.ranks = {3};
  d.findings.push_back(f);
  ASSERT_TRUE((*store)->FinishWindow(1, d, "{}").ok());
  EXPECT_EQ(*(*store)->QueryColumn("SELECT state FROM windows"), std::vector<std::string>{"done"});
  EXPECT_EQ(*(*store)->QueryColumn("SELECT category || ':' || ranks FROM findings"),
            std::vector<std::string>{"missing_rank:3"});
  EXPECT_EQ(*(*store)->QueryColumn("SELECT summary_bytes FROM rank_summaries"),
            std::vector<std::string>{"1234"});
  EXPECT_EQ(*(*store)->QueryColumn("SELECT length(summary) FROM rank_summaries"),
            std::vector<std::string>{"11"});
  // Every column where it belongs, the summary as a BLOB (a TEXT would be cut at a NUL).
  EXPECT_EQ(*(*store)->QueryColumn("SELECT window_id || ',' || rank || ',' || host || ',' || "
                                   "iterations || ',' || mean_iteration_ms || ',' || "
                                   "hardware_json || ',' || typeof(summary) FROM rank_summaries"),
            std::vector<std::string>{"1,0,h,10,5.0,{},blob"});
  EXPECT_EQ(*(*store)->QueryColumn("SELECT window_id || ',' || start_iteration || ',' || "
                                   "iterations || ',' || reason FROM windows"),
            std::vector<std::string>{"1,100,10,user"});
}

TEST(Store, ReadsAnUntrustedDatabaseWithoutRunningItsSchema) {
  // Issue 40: `perftracker report` opens a database from a report folder that may be anyone's.
  // A view in place of a table runs whatever query it holds (here an endless recursion, cut to
  // a million rows to end on any build); views and triggers are refused instead.
  const std::string path = ::testing::TempDir() + "/pt_hostile.db";
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE VIEW rank_summaries AS WITH RECURSIVE c(x) AS (SELECT 1 UNION "
                         "ALL SELECT x + 1 FROM c LIMIT 1000000) SELECT x AS job_id, 1 AS "
                         "window_id, 0 AS rank, x'00' AS summary FROM c",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto run = Store::ReadRun(path, 0);
  ASSERT_FALSE(run.ok());
  // The view's query is never run: its table (the recursion's) is unknown to a schema without
  // views.
  EXPECT_NE(run.status().message().find("not a perftracker database (rank_summaries: no such "
                                        "table"),
            std::string::npos)
      << run.status().message();
  std::remove(path.c_str());
}

TEST(Server, CollectsRealTracesFansOutAndWritesReports) {
  ServerOptions o = TestOptions("full", 5, 5);
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().message();
  Client c((*server)->port());

  v1::RegisterRequest reg;
  reg.set_host("node-a");
  reg.add_ranks(0);
  reg.add_ranks(1);
  v1::RegisterReply rr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Register, reg, &rr).ok());

  // Iterations reported before the trigger set the common start iteration.
  v1::ReportIterationsRequest it;
  it.set_agent_id(rr.agent_id());
  auto* b = it.add_batches();
  b->set_rank(0);
  b->add_steps(41);
  b->add_iteration_ms(12.5);
  v1::ReportIterationsReply itr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, it, &itr).ok());

  grpc::ClientContext wctx;
  v1::WatchRequest wreq;
  wreq.set_agent_id(rr.agent_id());
  auto reader = c.stub()->WatchCommands(&wctx, wreq);

  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, v1::TriggerRequest(), &tr).ok());
  EXPECT_EQ(tr.window_id(), 1);
  // At least lead_seconds ahead: 2 s of 12.5 ms iterations.
  EXPECT_EQ(tr.start_iteration(), 41 + 160);
  v1::Command cmd;
  ASSERT_TRUE(reader->Read(&cmd));
  EXPECT_EQ(cmd.profile().window_id(), 1);
  EXPECT_EQ(cmd.profile().start_iteration(), tr.start_iteration());

  for (int r = 0; r < 2; ++r) {
    auto s = pattern::SummarizeTrace(std::string(PT_SHARED_TRACES) + "/kineto/job128_rank-" +
                                     std::to_string(r) + ".json.gz");
    ASSERT_TRUE(s.ok()) << s.status().message();
    v1::UploadWindowRequest up;
    up.set_agent_id(rr.agent_id());
    up.set_window_id(1);
    up.set_rank(r);
    up.set_host("node-a");
    up.set_summary(pattern::SerializeSummary(*s));
    EXPECT_LT(up.summary().size(), 100u * 1024);
    (*up.mutable_hardware()->mutable_values())["host.cpu_util"] = 0.5;
    v1::UploadWindowReply ur;
    ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
    EXPECT_TRUE(ur.accepted()) << ur.message();
  }
  std::string latest = o.report_dir + "/diagnosis.json";
  ASSERT_TRUE(fs::exists(latest));
  ASSERT_TRUE(fs::exists(o.report_dir + "/windows/1/diagnosis.json"));
  EXPECT_NE(Slurp(latest).find("perftracker.diagnosis/1"), std::string::npos);

  v1::StatusReply st;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Status, v1::StatusRequest(), &st).ok());
  ASSERT_EQ(st.windows_size(), 1);
  EXPECT_EQ(st.windows(0).state(), "done");
  EXPECT_EQ(st.windows(0).reported_ranks_size(), 2);
  wctx.TryCancel();
  (*server)->Shutdown();
}

// Command streams: a command queued while an agent has no stream waits for its next one; a
// second stream of the same agent replaces the first, which ends; an unknown agent is refused.
TEST(Server, CommandStreamsQueueReplaceAndRefuse) {
  ServerOptions o = TestOptions("streams");
  o.schedule.hang_confirm_seconds = 0.3;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().message();
  Client c((*server)->port());
  std::string id;
  ASSERT_TRUE(c.Register({0}, &id));

  v1::TriggerReply tr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, v1::TriggerRequest(), &tr).ok());
  v1::WatchRequest wreq;
  wreq.set_agent_id(id);
  grpc::ClientContext first_ctx;
  auto first = c.stub()->WatchCommands(&first_ctx, wreq);
  v1::Command cmd;
  ASSERT_TRUE(first->Read(&cmd));  // queued before the stream existed
  EXPECT_EQ(cmd.profile().window_id(), tr.window_id());

  grpc::ClientContext second_ctx;
  auto second = c.stub()->WatchCommands(&second_ctx, wreq);
  EXPECT_FALSE(first->Read(&cmd));  // replaced: the server ended it
  EXPECT_TRUE(first->Finish().ok());

  // The next command reaches the newer stream.
  v1::TriggerRequest hang;
  hang.set_kind("hang");
  hang.set_rank(0);
  hang.set_mean_ms(100);
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, hang, &tr).ok());
  ASSERT_TRUE(second->Read(&cmd));
  EXPECT_TRUE(cmd.has_stacks());

  grpc::ClientContext bad_ctx;
  wreq.set_agent_id("agent-999");
  auto bad = c.stub()->WatchCommands(&bad_ctx, wreq);
  EXPECT_FALSE(bad->Read(&cmd));
  EXPECT_EQ(bad->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  second_ctx.TryCancel();
}

TEST(Server, DeadlineTurnsSilentRankIntoFindingAndTokenIsChecked) {
  ServerOptions o = TestOptions("deadline", 0.2, 0.3);
  o.token = "s3cret";
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client bad((*server)->port(), "wrong");
  v1::RegisterRequest reg;
  reg.add_ranks(0);
  reg.add_ranks(1);
  v1::RegisterReply rr;
  EXPECT_EQ(bad.Call(&v1::Server::Stub::Register, reg, &rr).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  Client c((*server)->port(), "s3cret");
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Register, reg, &rr).ok());
  TriggerResult t = (*server)->Trigger("test", 4);
  v1::UploadWindowRequest up;
  up.set_agent_id(rr.agent_id());
  up.set_window_id(t.window_id);
  up.set_rank(0);
  up.set_summary(pattern::SerializeSummary(Synthetic(0, 2, 10)));
  v1::UploadWindowReply ur;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  EXPECT_TRUE(ur.accepted());
  std::string latest = o.report_dir + "/diagnosis.json";
  for (int i = 0; i < 50 && !fs::exists(latest); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(latest));
  EXPECT_NE(Slurp(latest).find("missing_rank"), std::string::npos);
  (*server)->Shutdown();
}

// Issue 23: a window's silent ranks are one missing_rank finding (not one from the window and one
// from the traces' world size), and it says why each rank is silent from what the agent
// reported: rank 1's process exited, rank 3 took the command but made no iteration since.
TEST(Server, SilentRanksAreOneFindingThatSaysWhy) {
  ServerOptions o = TestOptions("why", 0.2, 0.5);
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().message();
  Client c((*server)->port());
  std::string id;
  ASSERT_TRUE(c.Register({0, 1, 2, 3}, &id, "node-a"));
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(c.Report(r, {10}, {12.5}));
  TriggerResult t = (*server)->Trigger("test", 4);
  ASSERT_EQ(t.window_id, 1);

  v1::ReportIterationsRequest req;
  req.set_agent_id(id);
  req.set_window_received(t.window_id);
  req.set_relays_workers(true);
  for (int r = 0; r < 4; ++r) {
    v1::WorkerState* w = req.add_workers();
    w->set_rank(r);
    w->set_pid(100 + r);
    w->set_window_sent(t.window_id);
    w->set_window_acked(t.window_id);
    w->set_window_accepted(true);
    w->set_last_iteration(10);
    if (r == 1) {
      w->set_exited(true);
      w->set_process_gone(true);
    }
  }
  v1::ReportIterationsReply rr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, req, &rr).ok());
  for (int r : {0, 2}) {
    v1::UploadWindowRequest up;
    up.set_agent_id(id);
    up.set_window_id(t.window_id);
    up.set_rank(r);
    up.set_summary(pattern::SerializeSummary(Synthetic(r, 4, 10)));
    v1::UploadWindowReply ur;
    ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
    ASSERT_TRUE(ur.accepted()) << ur.message();
  }
  const std::string path = o.report_dir + "/windows/1/diagnosis.json";
  for (int i = 0; i < 100 && !fs::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto d = report::ReadDiagnosisFile(path);
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<diagnose::Finding> missing;
  for (const auto& f : d->findings)
    if (f.category == diagnose::Category::kMissingRank) missing.push_back(f);
  ASSERT_EQ(missing.size(), 1u) << Slurp(path);
  EXPECT_EQ(d->findings[0].category, diagnose::Category::kMissingRank);
  EXPECT_EQ(missing[0].ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(missing[0].summary,
            "ranks 1,3 did not report for window 1: rank 1 dead (process exited at iteration 10, "
            "killed or crashed without an exit message, pid 101); rank 3 no iteration since the "
            "command (last iteration 10). The diagnosis covers 2 of 4 ranks.");
  EXPECT_EQ(missing[0].evidence.at("missing_rank_dead"), 1);
  EXPECT_EQ(missing[0].evidence.at("missing_no_iteration_since_command"), 1);
  (*server)->Shutdown();
}

// Every way a window closes goes through one diagnosis (issue 41): the same window, two of its
// three ranks uploaded and the third dead, closed by its deadline, by the job's end and by a hang,
// gives the same diagnosis.json, byte for byte.
TEST(Server, TheSameWindowGivesTheSameDiagnosisWhicheverWayItCloses) {
  std::map<std::string, std::string> json;
  for (const std::string how : {"deadline", "shutdown", "hang"}) {
    // The deadline path waits for its 3 s; the others close the window well before them.
    ServerOptions o = TestOptions("close_" + how, 2, 1);
    o.schedule.baseline_window = false;
    o.schedule.hang_confirm_seconds = 0;  // a hang trigger is confirmed at once
    o.stacks_seconds = 0.2;
    auto server = Server::Start(o);
    ASSERT_TRUE(server.ok()) << server.status().message();
    Client c((*server)->port());
    std::string id;
    ASSERT_TRUE(c.Register({0, 1, 2}, &id, "node-a"));
    for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.Report(r, {10}, {12.5}));
    TriggerResult t = (*server)->Trigger("test", 4);
    ASSERT_EQ(t.window_id, 1);
    v1::ReportIterationsRequest req;  // rank 2's process is gone
    req.set_agent_id(id);
    v1::WorkerState* w = req.add_workers();
    w->set_rank(2);
    w->set_pid(102);
    w->set_last_iteration(10);
    w->set_exited(true);
    w->set_process_gone(true);
    v1::ReportIterationsReply rr;
    ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, req, &rr).ok());
    for (int r : {0, 1}) {
      v1::UploadWindowRequest up;
      up.set_agent_id(id);
      up.set_window_id(t.window_id);
      up.set_rank(r);
      up.set_summary(pattern::SerializeSummary(Synthetic(r, 3, 10 + r)));
      v1::UploadWindowReply ur;
      ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
      ASSERT_TRUE(ur.accepted()) << ur.message();
    }
    const std::string path = o.report_dir + "/windows/1/diagnosis.json";
    if (how == "hang") {
      v1::TriggerRequest hang;
      hang.set_kind("hang");
      hang.set_rank(0);
      hang.set_mean_ms(12.5);
      v1::TriggerReply tr;
      ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, hang, &tr).ok());
      EXPECT_EQ(tr.window_id(), 2);  // the hang's, after the window it closed
    }
    if (how != "shutdown") {
      for (int i = 0; i < 100 && !fs::exists(path); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    (*server)->Shutdown();
    json[how] = Slurp(path);
  }
  ASSERT_NE(json["deadline"].find("\"missing_rank\""), std::string::npos) << json["deadline"];
  EXPECT_EQ(json["shutdown"], json["deadline"]);
  EXPECT_EQ(json["hang"], json["deadline"]);
}

// A window opened in the job's last iterations: every rank exited normally before its first
// iteration. That is no dead rank: the window's diagnosis notes it, with no finding, and the
// job's report stays the window before it.
TEST(Server, AWindowTheJobEndedBeforeIsANoteAndLeavesTheReport) {
  ServerOptions o = TestOptions("ended", 0.2, 0.3);
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().message();
  Client c((*server)->port());
  std::string id;
  ASSERT_TRUE(c.Register({0, 1}, &id, "node-a"));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.Report(r, {10}, {12.5}));
  TriggerResult t = (*server)->Trigger("test", 4);
  ASSERT_EQ(t.window_id, 1);
  for (int r : {0, 1}) {
    v1::UploadWindowRequest up;
    up.set_agent_id(id);
    up.set_window_id(t.window_id);
    up.set_rank(r);
    up.set_summary(pattern::SerializeSummary(Synthetic(r, 2, 10)));
    v1::UploadWindowReply ur;
    ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  }
  for (int i = 0; i < 100 && !fs::exists(o.report_dir + "/windows/1/diagnosis.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  TriggerResult t2 = (*server)->Trigger("test", 4);
  ASSERT_EQ(t2.window_id, 2);
  v1::ReportIterationsRequest req;
  req.set_agent_id(id);
  req.set_window_received(t2.window_id);
  req.set_relays_workers(true);
  for (int r = 0; r < 2; ++r) {
    v1::WorkerState* w = req.add_workers();
    w->set_rank(r);
    w->set_pid(100 + r);
    w->set_window_sent(t2.window_id);
    w->set_window_acked(t2.window_id);
    w->set_window_accepted(true);
    w->set_last_iteration(12);  // the window starts further on
    w->set_exited(true);
    w->set_exit_message(true);
  }
  v1::ReportIterationsReply rr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, req, &rr).ok());
  const std::string path = o.report_dir + "/windows/2/diagnosis.json";
  for (int i = 0; i < 100 && !fs::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto d = report::ReadDiagnosisFile(path);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d->findings.empty()) << Slurp(path);
  EXPECT_NE(Slurp(path).find("ranks 0,1 of 2 missing from window 2: ended before the window"),
            std::string::npos)
      << Slurp(path);
  auto root = report::ReadDiagnosisFile(o.report_dir + "/diagnosis.json");
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(root->job.ranks, (std::vector<int>{0, 1}));
  (*server)->Shutdown();
}

// The agent went away: its ranks' silence is its agent's, and a restarted agent that registered
// after the window opened never got the command.
TEST(Server, SilentRanksOfAGoneOrRestartedAgent) {
  ServerOptions o = TestOptions("gone", 0.2, 1.0);
  o.agent_expiry_seconds = 0.5;  // the agent of rank 1 is forgotten before the deadline
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().message();
  Client c((*server)->port());
  std::string a0, a1, a2;
  ASSERT_TRUE(c.Register({0}, &a0));
  ASSERT_TRUE(c.Register({1}, &a1));
  ASSERT_TRUE(c.Register({2}, &a2));
  TriggerResult t = (*server)->Trigger("test", 4);
  // Rank 2's agent restarts: its new self registers after the window opened and says it has
  // received no window.
  std::string a2b;
  ASSERT_TRUE(c.Register({2}, &a2b));
  v1::ReportIterationsRequest req;
  req.set_agent_id(a2b);
  req.set_window_received(0);
  v1::ReportIterationsReply rr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, req, &rr).ok());
  v1::UploadWindowRequest up;
  up.set_agent_id(a0);
  up.set_window_id(t.window_id);
  up.set_rank(0);
  up.set_summary(pattern::SerializeSummary(Synthetic(0, 3, 10)));
  v1::UploadWindowReply ur;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  // Rank 2's new agent keeps calling, so it is not forgotten.
  const std::string path = o.report_dir + "/windows/1/diagnosis.json";
  for (int i = 0; i < 100 && !fs::exists(path); ++i) {
    ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, req, &rr).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto d = report::ReadDiagnosisFile(path);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_FALSE(d->findings.empty());
  const diagnose::Finding& f = d->findings[0];
  EXPECT_EQ(f.category, diagnose::Category::kMissingRank);
  EXPECT_EQ(f.ranks, (std::vector<int>{1, 2}));
  EXPECT_NE(f.summary.find("rank 1 agent gone"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("rank 2 command not delivered (its agent registered after the window "
                           "opened (restarted?) and never got the command)"),
            std::string::npos)
      << f.summary;
  (*server)->Shutdown();
}

// Issue 14: a summary declaring two billion ranks reached the diagnosis on the timer thread,
// whose exception ended the launcher. Uploads with impossible ranks are refused; the window
// is still diagnosed with what was valid, and the server goes on.
TEST(Server, UploadsWithImpossibleRanksAreRefusedAndTheServerGoesOn) {
  ServerOptions o = TestOptions("huge", 0.3, 0.3);
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client c((*server)->port(), "");
  v1::RegisterRequest reg;
  reg.add_ranks(0);
  reg.add_ranks(2000000000);
  v1::RegisterReply rr;
  EXPECT_EQ(c.Call(&v1::Server::Stub::Register, reg, &rr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  reg.clear_ranks();
  reg.add_ranks(0);
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Register, reg, &rr).ok());
  v1::ReportIterationsRequest it;
  it.set_agent_id(rr.agent_id());
  v1::IterationBatch* b = it.add_batches();
  b->set_rank(-5);
  b->add_steps(1);
  b->add_iteration_ms(10);
  v1::ReportIterationsReply ir;
  EXPECT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, it, &ir).ok());
  TriggerResult t = (*server)->Trigger("test", 4);
  v1::UploadWindowRequest up;
  up.set_agent_id(rr.agent_id());
  up.set_window_id(t.window_id);
  up.set_rank(0);
  up.set_summary(pattern::SerializeSummary(Synthetic(0, 2000000000, 10)));
  v1::UploadWindowReply ur;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  EXPECT_FALSE(ur.accepted());
  EXPECT_NE(ur.message().find("world size 2000000000"), std::string::npos) << ur.message();
  up.set_rank(-3);
  up.set_summary(pattern::SerializeSummary(Synthetic(0, 1, 10)));
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  EXPECT_FALSE(ur.accepted());
  up.set_rank(0);
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  EXPECT_TRUE(ur.accepted()) << ur.message();
  std::string latest = o.report_dir + "/diagnosis.json";
  for (int i = 0; i < 50 && !fs::exists(latest); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(fs::exists(latest));
  v1::StatusRequest sreq;
  v1::StatusReply sr;
  EXPECT_TRUE(c.Call(&v1::Server::Stub::Status, sreq, &sr).ok());
  (*server)->Shutdown();
}

// A long job's server forgets what it no longer needs, and `status` pages a large job.
TEST(Server, StatusPagesLargeJobsAndSilentAgentsExpire) {
  ServerOptions o = TestOptions("pages");
  o.agent_expiry_seconds = 0.5;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  std::vector<int> many;
  for (int r = 0; r < 25000; ++r) many.push_back(r);
  std::string agent;
  ASSERT_TRUE(c.Register(many, &agent));
  const std::string addr = "127.0.0.1:" + std::to_string((*server)->port());
  auto text = agent::ServerStatus(addr, "");
  ASSERT_TRUE(text.ok()) << text.status().message();
  size_t lines = 0;
  for (size_t p = text->find("\nrank "); p != std::string::npos; p = text->find("\nrank ", p + 1))
    ++lines;
  EXPECT_EQ(lines, 25000u);
  EXPECT_NE(text->find("rank 24999 on"), std::string::npos);
  EXPECT_NE(text->find("agents: 1"), std::string::npos);
  // No stream and no call for longer than agent_expiry_seconds: forgotten; a later call from
  // it is told to register again.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  text = agent::ServerStatus(addr, "");
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("agents: 0"), std::string::npos) << text->substr(0, 200);
  EXPECT_FALSE(c.Report(0, {1}, {10.0}));
  (*server)->Shutdown();
}

// An agent speaks only for the ranks it registered; a user's trigger opens at most one window
// per caller host per cooldown.
TEST(Server, UploadsBelongToTheirAgentAndUserTriggersCoolDown) {
  ServerOptions o = TestOptions("owner", 0.2, 0.2);
  o.schedule.user_trigger_cooldown_seconds = 30;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  std::string a, b;
  ASSERT_TRUE(c.Register({0}, &a));
  ASSERT_TRUE(c.Register({1}, &b));
  EXPECT_NE(a, b);
  EXPECT_GT(a.size(), 20u);  // not "agent-1": an id is a capability
  v1::TriggerReply tr;
  v1::TriggerRequest user;
  user.set_reason("user");
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Trigger, user, &tr).ok());
  v1::UploadWindowRequest up;
  up.set_window_id(tr.window_id());
  up.set_rank(1);
  up.set_summary(pattern::SerializeSummary(Synthetic(1, 2, 10)));
  up.set_agent_id(a);  // agent a registered rank 0 only
  v1::UploadWindowReply ur;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  EXPECT_FALSE(ur.accepted());
  EXPECT_NE(ur.message().find("another agent"), std::string::npos) << ur.message();
  // Refused before its summary was inflated: ownership is checked first.
  const std::string decoded = "perftracker_summaries_decoded_total{job=\"\"} ";
  EXPECT_NE((*server)->MetricsText().find(decoded + "0\n"), std::string::npos)
      << (*server)->MetricsText();
  up.set_agent_id("agent-2");  // a guess
  EXPECT_EQ(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).error_code(),
            grpc::StatusCode::NOT_FOUND);
  up.set_agent_id(b);
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  EXPECT_TRUE(ur.accepted()) << ur.message();
  EXPECT_NE((*server)->MetricsText().find(decoded + "1\n"), std::string::npos)
      << (*server)->MetricsText();
  // The window closes (rank 0 never uploads: its deadline); a second user trigger from this
  // host within the cooldown is refused, with when to try again.
  for (int i = 0; i < 50 && !fs::exists(o.report_dir + "/diagnosis.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  grpc::Status again = c.Call(&v1::Server::Stub::Trigger, user, &tr);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(again.error_message().find("try again in"), std::string::npos);
  (*server)->Shutdown();
}

// Two jobs pointed at one server are not mixed into one diagnosis: the second job's agents
// are refused while the first's are connected, and welcome once they are gone.
TEST(Server, OneJobAtATime) {
  ServerOptions o = TestOptions("jobs");
  o.agent_expiry_seconds = 0.5;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  Client c((*server)->port());
  auto reg = [&](const std::string& job, int rank) {
    v1::RegisterRequest req;
    req.set_job_id(job);
    req.add_ranks(rank);
    v1::RegisterReply reply;
    return c.Call(&v1::Server::Stub::Register, req, &reply);
  };
  ASSERT_TRUE(reg("10.0.0.1:29500", 0).ok());
  ASSERT_TRUE(reg("10.0.0.1:29500", 1).ok());  // another node of the same job
  grpc::Status other = reg("10.0.0.9:29500", 0);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(other.error_message().find("needs a server of its own"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the first job's agents expire
  v1::StatusRequest sreq;
  v1::StatusReply sr;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Status, sreq, &sr).ok());
  EXPECT_EQ(sr.agents(), 0);
  EXPECT_TRUE(reg("10.0.0.9:29500", 0).ok());
  // The next job after that one: its agent never opened a stream, and is silent now only
  // because the test does not wait 10 s; a third job is still refused meanwhile.
  EXPECT_EQ(reg("third", 0).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(c.Call(&v1::Server::Stub::Status, sreq, &sr).ok());
  EXPECT_EQ(sr.total_ranks(), 1);  // the old job's ranks are forgotten
  (*server)->Shutdown();
}

// Ranks 0 and 1 of one agent on node-a report STEPS iterations of 50 ms to SERVER, one batch
// each a step, filled in by FILL(rank, step, its batch).
void ReportMemorySteps(Server& server, int steps,
                       const std::function<void(int, int, v1::IterationBatch*)>& fill,
                       std::string* agent_id = nullptr) {
  Client c(server.port());
  std::string agent;
  ASSERT_TRUE(c.Register({0, 1}, &agent, "node-a"));
  if (agent_id != nullptr) *agent_id = agent;
  for (int step = 0; step < steps; ++step) {
    v1::ReportIterationsRequest it;
    it.set_agent_id(agent);
    for (int r = 0; r < 2; ++r) {
      v1::IterationBatch* b = it.add_batches();
      b->set_rank(r);
      b->add_steps(step);
      b->add_iteration_ms(50);
      fill(r, step, b);
    }
    v1::ReportIterationsReply itr;
    ASSERT_TRUE(c.Call(&v1::Server::Stub::ReportIterations, it, &itr).ok());
  }
}

// /metrics shows each rank's memory with every report, the limits it runs into, and a leak's
// rate once the memory rule found it: an alert can fire before the job dies of it.
TEST(Server, MetricsShowEachRanksMemoryItsLimitsAndALeaksRate) {
  ServerOptions o = TestOptions("memory");
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  constexpr double kMiB = 1 << 20;
  ReportMemorySteps(**server, 200, [&](int r, int step, v1::IterationBatch* b) {
    if (r == 0) {  // rank 0: flat host memory, 2 GiB on GPU 3 of 80 GiB
      b->set_rss_bytes(300 * kMiB);
      b->set_gpu_memory_bytes(2048 * kMiB);
      b->set_gpu_index(3);
      b->set_gpu_total_bytes(80 * 1024 * kMiB);
      b->set_gpu_free_bytes(70 * 1024 * kMiB);
    } else {  // rank 1: keeps 4 MiB a step from step 60, in an 8 GiB cgroup
      b->set_rss_bytes((300 + 4 * std::max(0, step - 60)) * kMiB);
      b->set_cgroup_memory_limit_bytes(8192 * kMiB);
      b->set_cgroup_memory_usage_bytes(1024 * kMiB);
    }
  });
  const std::string m = (*server)->MetricsText();
  auto has = [&](const std::string& line) { return m.find(line + "\n") != std::string::npos; };
  const std::string r0 = "job=\"\",rank=\"0\",host=\"node-a\"";
  const std::string r1 = "job=\"\",rank=\"1\",host=\"node-a\"";
  EXPECT_TRUE(has("perftracker_memory_bytes{" + r0 + ",kind=\"host\"} 314572800")) << m;
  EXPECT_TRUE(has("perftracker_memory_bytes{" + r0 + ",kind=\"gpu\"} 2147483648")) << m;
  EXPECT_TRUE(has("perftracker_memory_bytes{" + r1 + ",kind=\"host\"} 897581056")) << m;
  EXPECT_TRUE(has("perftracker_memory_limit_bytes{" + r0 + ",limit=\"gpu\"} 85899345920")) << m;
  EXPECT_TRUE(has("perftracker_memory_limit_bytes{" + r1 + ",limit=\"cgroup\"} 8589934592")) << m;
  // The leak's rate on rank 1 alone: the memory rule's slope of the same series.
  diagnose::MemorySeries series;
  for (int step = 0; step < 200; ++step)
    series.Add(step, (300 + 4 * std::max(0, step - 60)) * kMiB);
  const std::optional<diagnose::MemoryGrowth> rule = diagnose::FindMemoryGrowth(series);
  ASSERT_TRUE(rule.has_value());
  const std::string growth =
      "perftracker_memory_growth_bytes_per_iteration{" + r1 + ",kind=\"host\"} ";
  const size_t at = m.find(growth);
  ASSERT_NE(at, std::string::npos) << m;
  EXPECT_NEAR(std::stod(m.substr(at + growth.size())), rule->bytes_per_iteration, 1) << m;
  EXPECT_EQ(m.find("perftracker_memory_growth_bytes_per_iteration{" + r0), std::string::npos) << m;
  // One group per family, as the text format asks: each name's lines follow its TYPE line.
  EXPECT_LT(m.find("# TYPE perftracker_memory_bytes"), m.find("perftracker_memory_bytes{"));
  EXPECT_LT(m.rfind("perftracker_memory_bytes{"), m.find("# TYPE perftracker_memory_limit_bytes"));
  (*server)->Shutdown();
}

// /metrics shows the job's healthy rate and how much slower it runs now: an alert on the job's
// own slowdown reads them.
TEST(Server, MetricsShowTheJobsHealthyRateAndItsSlowdown) {
  ServerOptions o = TestOptions("rate_metrics");
  o.schedule.baseline_window = false;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  const std::string none = (*server)->MetricsText();  // no history yet: the families, no value
  EXPECT_NE(none.find("# TYPE perftracker_slowdown_ratio gauge"), std::string::npos) << none;
  EXPECT_EQ(none.find("perftracker_slowdown_ratio{"), std::string::npos) << none;
  ReportMemorySteps(**server, 300, [&](int r, int step, v1::IterationBatch* b) {
    b->set_iteration_ms(0, step < 200 ? 50 : 80);  // 1.6x slower from step 200
  });
  const std::string m = (*server)->MetricsText();
  EXPECT_NE(m.find("perftracker_healthy_iteration_seconds{job=\"\"} 0.050000\n"), std::string::npos)
      << m;
  EXPECT_NE(m.find("perftracker_slowdown_ratio{job=\"\"} 1.6000\n"), std::string::npos) << m;
  (*server)->Shutdown();
}

// A window still open when the job ends is diagnosed as every window is: with the memory
// findings (and the baseline comparison) the publisher adds, not the peer comparison alone.
TEST(Server, AWindowOpenAtTheJobsEndIsDiagnosedAsEveryWindowIs) {
  ServerOptions o = TestOptions("open_at_end");
  o.schedule.baseline_window = false;  // the memory growth's window is window 1
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  constexpr double kMiB = 1 << 20;
  std::string agent;
  ReportMemorySteps(
      **server, 200,
      [&](int r, int step, v1::IterationBatch* b) {
        b->set_rss_bytes((300 + (r == 1 ? 4 * std::max(0, step - 60) : 0)) * kMiB);
      },
      &agent);
  Client c((*server)->port());
  v1::UploadWindowRequest up;  // rank 0 reports, rank 1 not yet: the window stays open
  up.set_agent_id(agent);
  up.set_window_id(1);
  up.set_rank(0);
  up.set_summary(pattern::SerializeSummary(Synthetic(0, 2, 10)));
  v1::UploadWindowReply ur;
  ASSERT_TRUE(c.Call(&v1::Server::Stub::UploadWindow, up, &ur).ok());
  ASSERT_TRUE(ur.accepted());
  (*server)->Shutdown();
  const std::string json = Slurp(o.report_dir + "/windows/1/diagnosis.json");
  EXPECT_NE(json.find("\"memory_growth\""), std::string::npos) << json;
  // /metrics names the rank the latest diagnosis names, for an alert with its rank.
  const std::string m = (*server)->MetricsText();
  EXPECT_NE(m.find("perftracker_named_rank{job=\"\",rank=\"1\",category=\"memory_growth\"} 1\n"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("perftracker_named_rank{job=\"\",rank=\"0\""), std::string::npos) << m;
}

// On a GPU the collector sends the CUDA allocator's figures: a tensor leak is told from the
// allocator's cache filling (NVML's usage climbs on both ranks, then holds), and the forecast
// counts the cache the allocator reuses before it asks the driver.
TEST(Server, AGpuLeakIsPyTorchsAllocatedMemoryNotTheAllocatorsCache) {
  ServerOptions o = TestOptions("cuda");
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  constexpr double kMiB = 1 << 20;
  ReportMemorySteps(**server, 300, [&](int r, int step, v1::IterationBatch* b) {
    b->set_rss_bytes(300 * kMiB);
    // The allocator's cache fills for 150 steps, 20 MiB a step, then holds: on both ranks.
    const double reserved = (1024 + 20 * std::min(step, 150)) * kMiB;
    b->set_gpu_memory_bytes(reserved + 500 * kMiB);  // and the CUDA context
    b->set_gpu_index(r);
    b->set_gpu_total_bytes(80 * 1024 * kMiB);
    b->set_gpu_free_bytes(10 * 1024 * kMiB);
    // Rank 0's tensors: a sawtooth (an activation buffer grown and freed every 10 steps).
    // Rank 1's: 16 MiB kept every step from step 120.
    const double allocated =
        r == 0 ? (900 + 8 * (step % 10)) * kMiB : (900 + 16 * std::max(0, step - 120)) * kMiB;
    b->set_cuda_allocated_bytes(allocated);
    b->set_cuda_reserved_bytes(std::max(reserved, allocated));
    b->set_cuda_peak_allocated_bytes(allocated);
  });
  // /metrics: each rank's tensors (rank 0 under 1 GiB, NVML's usage above 4 GiB), not the cache.
  const std::string m = (*server)->MetricsText();
  auto gpu_metric = [&](int r) {
    const std::string key = fmt::format(
        "perftracker_memory_bytes{{job=\"\",rank=\"{}\",host=\"node-a\",kind=\"gpu\"}} ", r);
    const size_t at = m.find(key);
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + key.size())) / kMiB;
  };
  EXPECT_NEAR(gpu_metric(0), 940, 40) << m;
  EXPECT_NEAR(gpu_metric(1), 3756, 9) << m;  // its series' last sample: step 298 or 299
  (*server)->Shutdown();
  const std::string path = o.report_dir + "/diagnosis.json";
  auto d = report::ReadDiagnosisFile(path);
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<const diagnose::Finding*> gpu;
  for (const auto& f : d->findings)
    if (f.category == diagnose::Category::kMemoryGrowth && f.evidence_text.count("memory") &&
        f.evidence_text.at("memory") == "gpu")
      gpu.push_back(&f);
  ASSERT_EQ(gpu.size(), 1u) << Slurp(path);
  EXPECT_EQ(gpu[0]->ranks, (std::vector<int>{1})) << Slurp(path);
  EXPECT_EQ(gpu[0]->evidence_text.at("gpu_series"), "torch.cuda.memory_allocated");
  EXPECT_NEAR(gpu[0]->evidence.at("bytes_per_iteration"), 16 * kMiB, 0.5 * kMiB) << Slurp(path);
  // 10 GiB free on the GPU and the 1,024 + 3,000 - ~3,756 MiB the allocator holds unused.
  EXPECT_NEAR(gpu[0]->evidence.at("gpu_free_bytes") / kMiB, 10 * 1024 + 4024 - 3756, 9)
      << Slurp(path);
  EXPECT_NEAR(gpu[0]->evidence.at("cuda_reserved_bytes") / kMiB, 4024, 1) << Slurp(path);
}

TEST(Server, DiagnosisExistsWhenJobEndsWithoutWindows) {
  ServerOptions o = TestOptions("empty");
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok());
  (*server)->Shutdown();
  EXPECT_TRUE(fs::exists(o.report_dir + "/diagnosis.json"));
}

}  // namespace
}  // namespace perftracker::server
