#include "agent/socket_sink.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "temp_dir.h"

namespace perftracker::agent {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Polls COND until it holds or 5 s pass (the I/O thread runs on its own schedule).
bool WaitFor(const std::function<bool()>& cond) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

// Collects what a Poll* call returns until there are N items (or 5 s pass).
template <typename T>
std::vector<T> Collect(size_t n, const std::function<std::vector<T>()>& poll) {
  std::vector<T> all;
  WaitFor([&] {
    for (auto& x : poll()) all.push_back(std::move(x));
    return all.size() >= n;
  });
  return all;
}

using testing_support::TempDir;

// A worker as hooks.py behaves: one Unix stream connection, newline-delimited JSON.
class FakeWorker {
 public:
  explicit FakeWorker(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~FakeWorker() { Close(); }
  bool connected() const { return connected_; }

  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // JSON: a "/t/NAME" path in it names NAME in the trace folder (set_trace_dir), made there as
  // a regular file: the agent reads only those.
  bool Line(std::string json) {
    for (size_t at = json.find("\"/t/"); !trace_dir_.empty() && at != std::string::npos;
         at = json.find("\"/t/", at)) {
      const size_t end = json.find('"', at + 4);
      const std::string path = trace_dir_ + "/" + json.substr(at + 4, end - at - 4);
      if (std::FILE* f = std::fopen(path.c_str(), "a")) std::fclose(f);
      json.replace(at + 1, end - at - 1, path);
    }
    return Send(json + "\n");
  }
  void set_trace_dir(const std::string& dir) { trace_dir_ = dir; }

  // The next line from the agent, or "" after TIMEOUT_MS.
  std::string ReadLine(int timeout_ms = 5000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      if (size_t nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return "";
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) return "";
      char chunk[4096];
      ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
  std::string trace_dir_;
};

std::string Ident(int pid, const std::string& rank) {
  return fmt::format(R"("pid":{},"rank":{},"local_rank":0,"world_size":2,"host":"node1")", pid,
                     rank);
}

std::string Hello(int pid, const std::string& rank = "null") {
  return fmt::format(R"({{"type":"hello","v":1,"clock_offset_ns":1000,{}}})", Ident(pid, rank));
}

class SocketSinkTest : public testing::Test {
 protected:
  void SetUp() override { StartSink({}); }

  void StartSink(SocketSink::Options options) {
    sink_.reset();
    sink_ = std::make_unique<SocketSink>(SocketPath(), TraceDir(), options);
    Status st = sink_->Start();
    ASSERT_TRUE(st.ok()) << st.message();
  }

  std::string SocketPath() const { return dir_.path() + "/agent.sock"; }
  std::string TraceDir() const { return dir_.path() + "/traces"; }
  // A trace file the agent accepts: NAME in its trace folder.
  std::string T(const std::string& name) const { return TraceDir() + "/" + name; }

  // A connected worker whose hello the sink has seen.
  std::unique_ptr<FakeWorker> Connect(int pid, const std::string& rank = "null") {
    auto w = std::make_unique<FakeWorker>(SocketPath());
    EXPECT_TRUE(w->connected());
    w->set_trace_dir(TraceDir());
    EXPECT_TRUE(w->Line(Hello(pid, rank)));
    EXPECT_TRUE(WaitFor([&] {
      for (int p : sink_->WorkerPids()) {
        if (p == pid) return true;
      }
      return false;
    }));
    return w;
  }

  std::vector<WorkerTrace> Finished(size_t n) {
    return Collect<WorkerTrace>(n, [&] { return sink_->PollFinished(); });
  }

  TempDir dir_{"pt-sink"};
  std::unique_ptr<SocketSink> sink_;
};

TEST_F(SocketSinkTest, StartRefusesAPathItCannotUse) {
  const std::string file = dir_.path() + "/not-a-socket";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fclose(f);
  }
  SocketSink nowhere(file + "/agent.sock", dir_.path());  // its folder is a file
  Status st = nowhere.Start();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), testing::HasSubstr(file + "/agent.sock"));

  SocketSink onto_file(file, dir_.path());
  st = onto_file.Start();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), testing::HasSubstr(file));
  EXPECT_TRUE(fs::exists(file));  // never removed

  // The running sink's socket is live: a second agent must not steal it.
  SocketSink second(SocketPath(), dir_.path());
  st = second.Start();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), testing::HasSubstr(SocketPath()));
}

TEST_F(SocketSinkTest, StartRefusesATraceFolderOthersMayWriteIn) {
  // A folder someone made first for everyone (0777): a link planted there would take torch's
  // export elsewhere, a trace planted there would be read as a rank's.
  const std::string shared = dir_.path() + "/shared-traces";
  ASSERT_TRUE(fs::create_directory(shared));
  fs::permissions(shared, fs::perms::all);
  SocketSink sink(dir_.path() + "/own/agent.sock", shared);
  Status st = sink.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), testing::HasSubstr("the trace folder " + shared));
  EXPECT_EQ(fs::status(shared).permissions(), fs::perms::all);  // refused, never chmod-ed
  // A folder it makes is made private.
  SocketSink fresh(dir_.path() + "/own2/agent.sock", dir_.path() + "/new-traces");
  ASSERT_TRUE(fresh.Start().ok());
  EXPECT_EQ(fs::status(dir_.path() + "/new-traces").permissions(), fs::perms::owner_all);
  fresh.Stop();
}

TEST_F(SocketSinkTest, ReplacesAStaleSocketFileAndRemovesItOnStop) {
  sink_->Stop();
  EXPECT_FALSE(fs::exists(SocketPath()));
  // A crashed agent's socket file: bound, never unlinked, nobody listening.
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, SocketPath().c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  ASSERT_TRUE(fs::is_socket(SocketPath()));
  StartSink({});
  auto w = Connect(11, "0");
  EXPECT_THAT(sink_->WorkerPids(), testing::ElementsAre(11));
}

TEST_F(SocketSinkTest, IterationsWaitForTheRank) {
  auto w = Connect(42);
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"iterations","items":[[0,1000000,3500000,true],[1,3500000,5500000,false]],)"
      R"("cuda":[10,20,15],{}}})",
      Ident(42, "null"))));
  // Not reported while the rank is unknown; a later message carries it.
  ASSERT_TRUE(w->Line(fmt::format(R"({{"type":"learned","pattern":"DO",{}}})", Ident(42, "1"))));
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"iterations","items":[[2,5500000,6500000,true]],{}}})", Ident(42, "1"))));
  std::vector<IterationReport> got =
      Collect<IterationReport>(3, [&] { return sink_->PollIterations(); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].rank, 1);
  EXPECT_EQ(got[0].step, 0);
  EXPECT_DOUBLE_EQ(got[0].iteration_ms, 2.5);
  EXPECT_EQ(got[1].step, 1);
  EXPECT_DOUBLE_EQ(got[1].iteration_ms, 2.0);
  EXPECT_EQ(got[2].rank, 1);
  EXPECT_EQ(got[2].step, 2);
  EXPECT_DOUBLE_EQ(got[2].iteration_ms, 1.0);
  // The CUDA allocator's figures ride on their message's last iteration.
  EXPECT_FALSE(got[0].cuda);
  ASSERT_TRUE(got[1].cuda);
  EXPECT_EQ(got[1].cuda->allocated, 10);
  EXPECT_EQ(got[1].cuda->reserved, 20);
  EXPECT_EQ(got[1].cuda->peak_allocated, 15);
  EXPECT_FALSE(got[2].cuda);
  EXPECT_TRUE(sink_->PollIterations().empty());
}

TEST_F(SocketSinkTest, Triggers) {
  auto w = Connect(42, "3");
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"trigger","kind":"slowdown","iteration":120,"mean_ns":12000000,"best_ns":10000000,{}}})",
      Ident(42, "3"))));
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"trigger","kind":"hang","iteration":130,"now_ns":99,"mean_ns":11000000,{}}})",
      Ident(42, "3"))));
  std::vector<WorkerTrigger> got = Collect<WorkerTrigger>(2, [&] { return sink_->PollTriggers(); });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].rank, 3);
  EXPECT_EQ(got[0].kind, "slowdown");
  EXPECT_EQ(got[0].iteration, 120);
  EXPECT_DOUBLE_EQ(got[0].mean_ms, 12);
  EXPECT_DOUBLE_EQ(got[0].best_ms, 10);
  EXPECT_EQ(got[1].kind, "hang");
  EXPECT_EQ(got[1].iteration, 130);
  EXPECT_DOUBLE_EQ(got[1].mean_ms, 11);
}

TEST_F(SocketSinkTest, PythonTraceThenTorchTrace) {
  auto w = Connect(42, "0");
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"python_trace","path":"/t/rank-0.python.json","torch":true,"window":5,{}}})",
      Ident(42, "0"))));
  // Waiting for the torch trace: nothing yet.
  ASSERT_TRUE(w->Line(fmt::format(R"({{"type":"relearn",{}}})", Ident(42, "0"))));
  ASSERT_TRUE(WaitFor([&] { return sink_->counters().lines >= 3; }));
  EXPECT_TRUE(sink_->PollFinished().empty());
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"torch_trace","path":"/t/rank-0.python.json.torch.json","window":5,{}}})",
      Ident(42, "0"))));
  std::vector<WorkerTrace> got = Finished(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_THAT(got[0].paths,
              testing::ElementsAre(T("rank-0.python.json"), T("rank-0.python.json.torch.json")));
  EXPECT_EQ(got[0].rank, 0);
  EXPECT_EQ(got[0].pid, 42);
}

TEST_F(SocketSinkTest, TorchTraceThenPythonTrace) {
  auto w = Connect(43, "1");
  // No window ids: the paths pair them (hooks.py names the torch trace after the Python one).
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"torch_trace","path":"/t/rank-1.python.json.torch.json",{}}})", Ident(43, "1"))));
  ASSERT_TRUE(w->Line(fmt::format(R"({{"type":"python_trace","path":"/t/rank-1.python.json",{}}})",
                                  Ident(43, "1"))));
  std::vector<WorkerTrace> got = Finished(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_THAT(got[0].paths,
              testing::ElementsAre(T("rank-1.python.json"), T("rank-1.python.json.torch.json")));
  EXPECT_EQ(got[0].rank, 1);
}

TEST_F(SocketSinkTest, PythonTraceWithoutTorchIsFinishedAtOnce) {
  auto w = Connect(44, "2");
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"python_trace","path":"/t/rank-2.python.json","torch":false,"window":1,{}}})",
      Ident(44, "2"))));
  std::vector<WorkerTrace> got = Finished(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_THAT(got[0].paths, testing::ElementsAre(T("rank-2.python.json")));
  EXPECT_EQ(got[0].missing_part, "");  // no torch trace was started: nothing is missing
}

TEST_F(SocketSinkTest, TorchTraceErrorFinishesThePythonTrace) {
  auto w = Connect(44, "2");
  ASSERT_TRUE(w->Line(
      fmt::format(R"({{"type":"python_trace","path":"/t/a.json","torch":true,"window":3,{}}})",
                  Ident(44, "2"))));
  ASSERT_TRUE(w->Line(
      fmt::format(R"({{"type":"torch_trace","path":"","window":3,"error":"export failed",{}}})",
                  Ident(44, "2"))));
  std::vector<WorkerTrace> got = Finished(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_THAT(got[0].paths, testing::ElementsAre(T("a.json")));
  EXPECT_EQ(got[0].missing_part, "torch.profiler");
  EXPECT_EQ(got[0].missing_why, "export failed");
}

TEST_F(SocketSinkTest, WaitsForTheTorchTraceOnlySoLong) {
  SocketSink::Options options;
  options.torch_wait_seconds = 0.2;
  options.orphan_torch_seconds = 0.3;
  StartSink(options);
  auto w = Connect(45, "4");
  ASSERT_TRUE(w->Line(
      fmt::format(R"({{"type":"python_trace","path":"/t/p.json","torch":true,"window":8,{}}})",
                  Ident(45, "4"))));
  std::vector<WorkerTrace> got = Finished(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_THAT(got[0].paths, testing::ElementsAre(T("p.json")));
  EXPECT_EQ(got[0].missing_part, "torch.profiler");
  EXPECT_NE(got[0].missing_why.find("did not arrive within"), std::string::npos);
  // Its torch trace after the upload is not uploaded alone; an orphan one (no Python trace) is.
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"torch_trace","path":"/t/p.json.torch.json","window":8,{}}})", Ident(45, "4"))));
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"torch_trace","path":"/t/q.json.torch.json","window":9,{}}})", Ident(45, "4"))));
  got = Finished(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_THAT(got[0].paths, testing::ElementsAre(T("q.json.torch.json")));
  EXPECT_EQ(got[0].rank, 4);
  EXPECT_EQ(got[0].missing_part, "python");
}

TEST_F(SocketSinkTest, GarbageAndOversizedLinesAreSkipped) {
  auto w = Connect(46, "5");
  ASSERT_TRUE(w->Line("this is not json"));
  ASSERT_TRUE(w->Line("[1,2,3]"));
  ASSERT_TRUE(w->Line(R"({"no_type":1})"));
  ASSERT_TRUE(w->Line(R"({"type":"from_the_future","pid":46})"));
  ASSERT_TRUE(w->Line(R"({"type":"iterations","items":"nope","pid":46})"));
  ASSERT_TRUE(w->Line(R"({"type":"iterations","items":[["x",1,2,true],[7,1,2]],"pid":46})"));
  // Over 1 MiB without a newline, sent in pieces, then the rest of that line.
  const std::string big(SocketSink::kMaxLineBytes + 1000, 'x');
  ASSERT_TRUE(w->Send(R"({"type":"iterations","items":[)"));
  ASSERT_TRUE(w->Send(big));
  ASSERT_TRUE(w->Line(R"(]})"));
  ASSERT_TRUE(w->Line(
      fmt::format(R"({{"type":"iterations","items":[[9,0,4000000,true]],{}}})", Ident(46, "5"))));
  std::vector<IterationReport> got =
      Collect<IterationReport>(2, [&] { return sink_->PollIterations(); });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].step, 7);  // the well-formed item of a partly bad batch
  EXPECT_EQ(got[1].step, 9);
  EXPECT_DOUBLE_EQ(got[1].iteration_ms, 4);
  SocketSink::Counters c = sink_->counters();
  EXPECT_EQ(c.malformed, 4u);
  EXPECT_EQ(c.unknown_type, 1u);
  EXPECT_EQ(c.oversized_lines, 1u);
  EXPECT_THAT(sink_->WorkerPids(), testing::ElementsAre(46));  // still connected
}

// A memory growth's window lists the ranks that record their allocations; each worker sees
// the list and decides for itself (python/perftracker/client.py).
TEST_F(SocketSinkTest, AMemoryWindowListsItsRecordingRanks) {
  auto w = Connect(52, "1");
  WindowCommand cmd{8, 300, 10, 20, false, {1, 3}};
  ASSERT_TRUE(sink_->StartWindow(cmd).ok());
  EXPECT_EQ(w->ReadLine(),
            fmt::format(R"({{"type":"profile","window":8,"iters":10,"max_s":20,"start_iter":300,)"
                        R"("shapes":false,"memory_ranks":[1,3],"dir":"{}"}})",
                        dir_.path() + "/traces/window-8"));
}

TEST_F(SocketSinkTest, StartWindowSendsProfileAndLateWorkersGetItToo) {
  auto early = Connect(50, "0");
  WindowCommand cmd{7, 120, 10, 20};
  ASSERT_TRUE(sink_->StartWindow(cmd).ok());
  const std::string dir = dir_.path() + "/traces/window-7";
  EXPECT_TRUE(fs::is_directory(dir));
  std::fclose(std::fopen((dir + "/rank-0.python.json").c_str(), "w"));
  const std::string expected = fmt::format(
      R"({{"type":"profile","window":7,"iters":10,"max_s":20,"start_iter":120,"shapes":false,"dir":"{}"}})",
      dir);
  EXPECT_EQ(early->ReadLine(), expected);

  // A rank that connects while the window is open.
  auto late = Connect(51);
  EXPECT_EQ(late->ReadLine(), expected);

  // A worker that delivered its trace and reconnects does not profile the window again.
  ASSERT_TRUE(early->Line(fmt::format(
      R"({{"type":"python_trace","path":"{}/rank-0.python.json","torch":false,"window":7,{}}})",
      dir, Ident(50, "0"))));
  ASSERT_EQ(Finished(1).size(), 1u);
  early->Close();
  ASSERT_TRUE(WaitFor([&] { return sink_->WorkerPids() == std::vector<int>{51}; }));
  auto again = Connect(50, "0");
  ASSERT_TRUE(sink_->RequestStacks(3).ok());
  EXPECT_EQ(again->ReadLine(), R"({"type":"stacks","request_id":3})");
}

// An elastic restart: torchrun starts every rank again, their iterations count from 0, and the
// old window's command would keep them from the next window.
TEST_F(SocketSinkTest, ARestartedRankDoesNotGetTheOldAttemptsWindow) {
  auto a = Connect(70, "0");
  auto b = Connect(71, "1");
  ASSERT_TRUE(sink_->StartWindow({8, 60, 10, 20}).ok());
  EXPECT_NE(a->ReadLine(), "");
  EXPECT_NE(b->ReadLine(), "");
  // A worker with a higher restart count is a later attempt, even while the old ones live.
  auto later = std::make_unique<FakeWorker>(SocketPath());
  ASSERT_TRUE(later->Line(R"({"type":"hello","v":1,"pid":80,"rank":0,"attempt":1})"));
  EXPECT_EQ(later->ReadLine(500), "");
  // Its iterations say which process and attempt they come from (the server tells the
  // attempts apart by them).
  ASSERT_TRUE(later->Line(
      R"({"type":"iterations","items":[[3,0,1000000,true]],"pid":80,"rank":0,"attempt":1})"));
  std::vector<IterationReport> its =
      Collect<IterationReport>(1, [&] { return sink_->PollIterations(); });
  ASSERT_EQ(its.size(), 1u);
  EXPECT_EQ(its[0].pid, 80);
  EXPECT_EQ(its[0].attempt, 1);
  // The old attempt's processes are gone: a new process gets no command, whatever it says.
  a->Close();
  b->Close();
  ASSERT_TRUE(WaitFor([&] { return sink_->WorkerPids() == std::vector<int>{80}; }));
  auto fresh = Connect(81, "1");
  EXPECT_EQ(fresh->ReadLine(500), "");
  // The next window reaches the new attempt.
  ASSERT_TRUE(sink_->StartWindow({9, 25, 10, 20}).ok());
  EXPECT_NE(later->ReadLine().find(R"("window":9)"), std::string::npos);
  EXPECT_NE(fresh->ReadLine().find(R"("window":9)"), std::string::npos);
}

// What the server hears of each worker (issue 23: why a rank did not report): the window's
// command sent and answered, and how the worker ended: its process gone, or a normal exit.
TEST_F(SocketSinkTest, WorkerStatusFollowsTheCommandAndTheExit) {
  const pid_t gone = fork();  // a pid whose process has ended
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  const int alive = getpid();
  std::map<int, WorkerStatus> latest;  // by rank
  // Polls until rank RANK's newest status satisfies PRED.
  auto until = [&](int rank, const std::function<bool(const WorkerStatus&)>& pred) {
    return WaitFor([&] {
      for (const WorkerStatus& w : sink_->PollWorkerChanges()) latest[w.rank] = w;
      auto it = latest.find(rank);
      return it != latest.end() && pred(it->second);
    });
  };
  auto dead = Connect(gone, "0");
  auto live = Connect(alive, "1");
  ASSERT_TRUE(until(0, [&](const WorkerStatus& w) { return w.pid == gone && !w.exited; }));
  ASSERT_TRUE(until(1, [&](const WorkerStatus& w) { return w.window_sent == 0; }));

  ASSERT_TRUE(sink_->StartWindow({7, 120, 10, 20}).ok());
  EXPECT_NE(live->ReadLine(), "");
  ASSERT_TRUE(until(0, [](const WorkerStatus& w) { return w.window_sent == 7; }));
  EXPECT_EQ(latest[0].window_acked, 0);
  ASSERT_TRUE(live->Line(fmt::format(
      R"({{"type":"iterations","items":[[118,1000000,3500000,true]],{}}})", Ident(alive, "1"))));
  ASSERT_TRUE(live->Line(fmt::format(
      R"({{"type":"profile_ack","accepted":true,"path":"x","window":7,{}}})", Ident(alive, "1"))));
  ASSERT_TRUE(until(1, [](const WorkerStatus& w) { return w.window_acked == 7; }));
  EXPECT_TRUE(latest[1].window_accepted);
  EXPECT_EQ(latest[1].last_iteration, 118);

  dead->Close();  // killed: no exit message, its process is gone
  ASSERT_TRUE(until(0, [](const WorkerStatus& w) { return w.exited; }));
  EXPECT_TRUE(latest[0].process_gone);
  EXPECT_FALSE(latest[0].exit_message);
  EXPECT_GT(latest[0].exited_unix_s, 1e9);  // when: orders an attempt's ends across nodes
  EXPECT_EQ(latest[0].attempt, 0);

  ASSERT_TRUE(
      live->Line(fmt::format(R"({{"type":"stats","iterations":119,{}}})", Ident(alive, "1"))));
  live->Close();  // said goodbye; its process (this test) still runs
  ASSERT_TRUE(until(1, [](const WorkerStatus& w) { return w.exited; }));
  EXPECT_TRUE(latest[1].exit_message);
  EXPECT_FALSE(latest[1].process_gone);
  EXPECT_EQ(latest[1].window_acked, 7);

  // After the agent registers again, every worker is said again.
  std::vector<WorkerStatus> all = sink_->AllWorkers();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(sink_->RelaysWorkers());
}

TEST_F(SocketSinkTest, UploadedIsSentToTheWorkerWhoseWindowItWas) {
  auto a = Connect(61, "0");
  auto b = Connect(62, "1");
  sink_->WindowUploaded(62, 4);
  EXPECT_EQ(b->ReadLine(), R"({"type":"uploaded","window":4})");
  EXPECT_EQ(a->ReadLine(300), "");
}

TEST_F(SocketSinkTest, StacksRequestAndReply) {
  auto w = Connect(60, "1");
  ASSERT_TRUE(sink_->RequestStacks(7).ok());
  EXPECT_EQ(w->ReadLine(), R"({"type":"stacks","request_id":7})");
  ASSERT_TRUE(w->Line(
      R"({"type":"stacks","request_id":7,"pid":60,"rank":1,"local_rank":1,"world_size":2,)"
      R"("host":"node1","iteration":41,"threads":[{"tid":123,"name":"MainThread","main":true,)"
      R"("frames":[{"file":"/x/train.py","line":10,"function":"main"},)"
      R"({"file":"/x/model.py","line":20,"function":"forward"}]},)"
      R"({"tid":124,"name":"pt_autograd","main":false,"frames":[]}],)"
      R"("last_collective":{"op":"all_reduce","count":12,"file":"/x/train.py","line":99,)"
      R"("in_progress":true,"seconds":3.2}})"));
  ASSERT_TRUE(
      w->Line(R"({"type":"stacks","request_id":7,"pid":60,"rank":1,"host":"node1","iteration":-1,)"
              R"("threads":[],"last_collective":null})"));
  auto got =
      Collect<std::pair<int64_t, pattern::RankStacks>>(2, [&] { return sink_->PollStacks(); });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, 7);
  const pattern::RankStacks& s = got[0].second;
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.pid, 60);
  EXPECT_EQ(s.host, "node1");
  EXPECT_EQ(s.iteration, 41);
  ASSERT_EQ(s.threads.size(), 2u);
  EXPECT_EQ(s.threads[0].tid, 123);
  EXPECT_EQ(s.threads[0].name, "MainThread");
  EXPECT_TRUE(s.threads[0].main);
  ASSERT_EQ(s.threads[0].frames.size(), 2u);
  EXPECT_EQ(s.threads[0].frames[0].file, "/x/train.py");
  EXPECT_EQ(s.threads[0].frames[0].line, 10);
  EXPECT_EQ(s.threads[0].frames[1].function, "forward");
  EXPECT_FALSE(s.threads[1].main);
  EXPECT_EQ(s.last_collective.op, "all_reduce");
  EXPECT_EQ(s.last_collective.count, 12);
  EXPECT_EQ(s.last_collective.line, 99);
  EXPECT_TRUE(s.last_collective.in_progress);
  EXPECT_DOUBLE_EQ(s.last_collective.seconds, 3.2);
  EXPECT_EQ(got[1].second.iteration, -1);
  EXPECT_TRUE(got[1].second.last_collective.op.empty());
}

TEST_F(SocketSinkTest, StopWithAConnectedWorkerIsPrompt) {
  auto w = Connect(70, "0");
  const auto t0 = Clock::now();
  sink_->Stop();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_FALSE(fs::exists(SocketPath()));
  EXPECT_EQ(w->ReadLine(1000), "");  // the connection was closed
  sink_->Stop();                     // idempotent
}

// Issue 26: the socket's folder is this user's alone, the socket 0600, and the workers find the
// trace folder through a link next to the socket.
TEST_F(SocketSinkTest, SocketFolderAndSocketArePrivate) {
  struct stat st {};
  ASSERT_EQ(stat(dir_.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(stat(SocketPath().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(fs::read_symlink(SocketSink::TraceDirLink(SocketPath())).string(), TraceDir());
  sink_->Stop();
  EXPECT_FALSE(fs::exists(fs::symlink_status(SocketSink::TraceDirLink(SocketPath()))));

  // A folder others may write into is refused, and left as it is.
  const std::string open_dir = dir_.path() + "/open";
  fs::create_directory(open_dir);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  SocketSink shared(open_dir + "/agent.sock", TraceDir());
  const Status refused = shared.Start();
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), testing::HasSubstr(open_dir));
  EXPECT_FALSE(fs::exists(open_dir + "/agent.sock"));
  ASSERT_EQ(stat(open_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);
}

// Another local user's process is refused however it reaches the socket (here: with root's
// file access, its own effective uid).
TEST_F(SocketSinkTest, RefusesAnotherUsersProcess) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a process as another user";
  const pid_t child = fork();
  if (child == 0) {
    // The effective uid is nobody's (what SO_PEERCRED reports); the file-system uid stays
    // root's, so the path is reachable and only the peer check can refuse.
    if (seteuid(65534) != 0) _exit(2);
    setfsuid(0);
    FakeWorker w(SocketPath());
    if (!w.connected()) _exit(3);
    w.Line(Hello(99, "0"));
    w.Line(R"({"type":"trigger","kind":"slowdown","iteration":5,"mean_ns":2e7,"best_ns":1e7,)"
           R"("pid":99,"rank":0})");
    _exit(w.ReadLine(3000).empty() ? 0 : 4);  // closed at once, nothing sent
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(sink_->counters().refused_peers, 1u);
  EXPECT_EQ(sink_->counters().connections, 0u);
  EXPECT_TRUE(sink_->PollTriggers().empty());
  EXPECT_TRUE(sink_->WorkerPids().empty());
  // This user's workers still connect.
  auto w = Connect(12, "0");
  EXPECT_THAT(sink_->WorkerPids(), testing::ElementsAre(12));
}

// A connection speaks for the worker it first named: messages naming another rank or pid are
// dropped, and a second process claiming a live worker's rank is refused.
TEST_F(SocketSinkTest, AConnectionSpeaksOnlyForItsOwnRank) {
  auto w = Connect(42, "3");
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"trigger","kind":"slowdown","iteration":9,"mean_ns":2e7,"best_ns":1e7,{}}})",
      Ident(42, "5"))));
  ASSERT_TRUE(w->Line(fmt::format(R"({{"type":"iterations","items":[[1,0,1000000,true]],{}}})",
                                  Ident(43, "3"))));
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"stacks","request_id":1,"iteration":1,"threads":[],{}}})", Ident(42, "0"))));
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"trigger","kind":"hang","iteration":10,"mean_ns":2e7,{}}})", Ident(42, "3"))));
  std::vector<WorkerTrigger> got = Collect<WorkerTrigger>(1, [&] { return sink_->PollTriggers(); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rank, 3);
  EXPECT_EQ(got[0].kind, "hang");
  EXPECT_EQ(sink_->counters().forged_messages, 3u);
  EXPECT_TRUE(sink_->PollIterations().empty());
  EXPECT_TRUE(sink_->PollStacks().empty());

  // Another process of the same attempt claiming rank 3: refused, its connection closed.
  auto thief = std::make_unique<FakeWorker>(SocketPath());
  ASSERT_TRUE(thief->Line(Hello(44, "3")));
  EXPECT_EQ(thief->ReadLine(2000), "");
  ASSERT_TRUE(WaitFor([&] { return sink_->counters().rank_conflicts == 1; }));
  EXPECT_THAT(sink_->WorkerPids(), testing::ElementsAre(42));
  // The same process reconnecting (its old connection not yet seen closed) is itself.
  auto again = Connect(42, "3");
  EXPECT_EQ(sink_->counters().rank_conflicts, 1u);
}

// Issue 26: the agent reads only regular files inside its trace folder. Another rank's or
// user's file outside it, a link, or a FIFO (which blocked the agent's thread, and the
// launcher's SIGTERM, until someone wrote into it) is counted and dropped.
TEST_F(SocketSinkTest, ReadsOnlyRegularFilesInsideTheTraceFolder) {
  auto w = Connect(47, "6");
  const std::string outside = dir_.path() + "/elsewhere.json";
  std::fclose(std::fopen(outside.c_str(), "w"));
  const std::string link = T("link.json");
  fs::create_symlink(outside, link);
  const std::string fifo = T("fifo.json");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = Clock::now();
  for (const std::string& path : {outside, link, fifo, std::string("relative.json")}) {
    ASSERT_TRUE(w->Line(fmt::format(
        R"({{"type":"python_trace","path":"{}","torch":false,"window":2,{}}})", path,
        Ident(47, "6"))));
  }
  ASSERT_TRUE(WaitFor([&] { return sink_->counters().refused_traces == 4; }));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  // The agent still answers (its thread is not stuck on the FIFO).
  ASSERT_TRUE(sink_->RequestStacks(5).ok());
  EXPECT_EQ(w->ReadLine(), R"({"type":"stacks","request_id":5})");
  EXPECT_TRUE(sink_->PollFinished().empty());
  // A torch trace refused is a torch trace that failed: the Python trace is not kept waiting.
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"python_trace","path":"/t/ok.json","torch":true,"window":3,{}}})",
      Ident(47, "6"))));
  ASSERT_TRUE(w->Line(fmt::format(
      R"({{"type":"torch_trace","path":"{}","window":3,{}}})", fifo, Ident(47, "6"))));
  std::vector<WorkerTrace> got = Finished(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_THAT(got[0].paths, testing::ElementsAre(T("ok.json")));
  EXPECT_EQ(got[0].missing_part, "torch.profiler");
  EXPECT_EQ(sink_->counters().refused_traces, 5u);
}

}  // namespace
}  // namespace perftracker::agent
