// Server ingestion at scale: N simulated node agents (default 10,000, one rank each, each on a
// connection of its own by default) register with a `perftracker server` process, a window is
// triggered, and every agent uploads its window summary (~500 functions, the real format) over
// loopback gRPC, all at once (--inflight: at most that many in flight), with the real agent's
// 30 s deadline and the server's default window deadlines. Checks and prints: agents registered
// (the server's count), uploads accepted / refused / failed, the summaries the SQLite store holds
// (rows and bytes read back and compared with what was sent), how many were lost, the upload wall
// time, the time from the first upload to the window's diagnosis, the server's peak memory
// (VmHWM) and threads, and the store's size on disk. Exits 1 if any summary was lost.
// --watch also holds every agent's WatchCommands stream open, as real agents do, and times how
// long the window command takes to reach all of them. --ranks-per-agent R makes each agent serve
// R ranks (registered together, one upload per rank: 12,500 x 8 is 100,000 ranks), and
// --iterations N has every agent report N iterations of each of its ranks before the window
// (ReportIterations, as agents do all along), so the server holds every rank's statistics.
// --rank-state instead feeds 100,000 ranks x 1,000,000 iterations into the server's per-rank
// statistics in this process, without a server (server_ingest_memory.cc), and prints peak RSS
// and the percentiles against exact.
//
//   build/server_ingest [--agents 10000] [--ranks-per-agent 1] [--iterations 0]
//                      [--functions 500] [--channels AGENTS] [--inflight RANKS]
//                      [--threads 32] [--deadline 30] [--bin build/perftracker]
//                      [--max-seconds 20 --grace-seconds 30] [--watch] [--keep]
//   build/server_ingest --rank-state [--ranks 100000] [--iterations 1000000]
#include <fcntl.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/net.h"
#include "pattern/pattern.h"
#include "pattern/summary_io.h"
#include "perftracker.grpc.pb.h"
#include "server_ingest_memory.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;
using Clock = std::chrono::steady_clock;
using perftracker::pattern::FunctionClass;
using perftracker::pattern::FunctionPattern;
using perftracker::pattern::RankSummary;
using perftracker::trace::EventKind;

// The server's token (DIR/.perftracker/token, which a server started without --token-file
// writes), sent with every call as the agents send theirs.
std::string g_token;

void Auth(grpc::ClientContext* ctx) {
  if (!g_token.empty()) ctx->AddMetadata("x-perftracker-token", g_token);
}

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One rank's window: ~FUNCTIONS functions of the kinds a GPU job has, with per-rank noise.
RankSummary Synthetic(int rank, int world, int functions) {
  std::mt19937_64 rng(static_cast<uint64_t>(rank) * 7919 + 1);
  std::lognormal_distribution<double> noise(0, 0.03);
  RankSummary s;
  s.rank = rank;
  s.world_size = world;
  s.host = fmt::format("node-{}", rank / 8);
  s.iteration_source = "ProfilerStep";
  s.iteration_ms.assign(20, 100 * noise(rng));
  s.window_ms = 2000;
  s.has_gpu = true;
  for (int i = 0; i < functions; ++i) {
    FunctionPattern f;
    switch (i % 5) {
      case 0:
        f.name = fmt::format("sm90_xmma_gemm_bf16_layer{}", i / 5);
        f.kind = EventKind::kKernel;
        f.fclass = FunctionClass::kCompute;
        break;
      case 1:
        f.name = fmt::format("aten::op{}", i / 5);
        f.kind = EventKind::kCpuOp;
        f.fclass = FunctionClass::kCompute;
        break;
      case 2:
        f.name = "cudaLaunchKernel";
        f.stack = fmt::format("train.py(120): train_step;model.py({}): forward", i);
        f.kind = EventKind::kCudaRuntime;
        f.fclass = FunctionClass::kLaunch;
        break;
      case 3:
        f.name = fmt::format("model.py({}): block", i);
        f.stack = "train.py(120): train_step;model.py(40): forward";
        f.kind = EventKind::kPythonFunction;
        f.fclass = FunctionClass::kPython;
        break;
      default:
        f.name = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";
        f.stack = fmt::format("bucket{}", i);
        f.kind = EventKind::kKernel;
        f.fclass = FunctionClass::kCollective;
        f.coll.op = "all_reduce";
        f.coll.msg_bytes = 1 << 24;
        break;
    }
    f.count = 20;
    f.calls_per_iter = 1;
    f.per_iter_us = 100 * noise(rng);
    f.total_us = 20 * f.per_iter_us;
    f.mean_us = f.p50_us = f.p99_us = f.max_us = f.min_us = f.per_iter_us;
    f.self_per_iter_us = f.per_iter_us;
    f.share = f.per_iter_us / 1e5;
    f.iter_us.assign(20, static_cast<float>(f.per_iter_us));
    s.functions.push_back(std::move(f));
  }
  return s;
}

// A field of /proc/PID/status in its own unit (kB for memory), or -1.
double ProcStatus(pid_t pid, const char* field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::atof(line.c_str() + n + 1);
  return -1;
}

uint64_t FileSize(const std::string& path) {
  std::error_code ec;
  uintmax_t n = fs::file_size(path, ec);
  return ec ? 0 : n;
}

// What the store holds for one window, read back from the database file.
struct StoreReadback {
  bool opened = false;
  int64_t rows = 0;
  int64_t bytes = 0;       // summary blob bytes read back
  int64_t matching = 0;    // ranks whose stored blob equals what was sent
  int64_t mismatched = 0;  // stored for a known rank, but different bytes
  int64_t duplicates = 0;  // second row for a rank
  int64_t unknown = 0;     // a rank nobody sent
};

StoreReadback ReadBack(const std::string& db_path, int64_t window,
                       const std::vector<std::string>& sent) {
  StoreReadback out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT rank, summary FROM rank_summaries WHERE window_id = ?", -1,
                         &st, nullptr) == SQLITE_OK) {
    out.opened = true;
    sqlite3_bind_int64(st, 1, window);
    std::vector<char> seen(sent.size(), 0);
    while (sqlite3_step(st) == SQLITE_ROW) {
      ++out.rows;
      int64_t rank = sqlite3_column_int64(st, 0);
      const void* blob = sqlite3_column_blob(st, 1);
      int n = sqlite3_column_bytes(st, 1);
      out.bytes += n;
      if (rank < 0 || rank >= static_cast<int64_t>(sent.size())) {
        ++out.unknown;
      } else if (seen[rank]) {
        ++out.duplicates;
      } else {
        seen[rank] = 1;
        const std::string& want = sent[rank];
        if (static_cast<size_t>(n) == want.size() &&
            (n == 0 || std::memcmp(blob, want.data(), n) == 0))
          ++out.matching;
        else
          ++out.mismatched;
      }
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

// User + system CPU seconds the process has used (/proc/PID/stat fields 14 and 15).
double ProcCpuSeconds(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i >= 14) ticks += std::atof(field.c_str());
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each figure as it comes, into a log file too
  int agents = 10000, functions = 500, threads = 32, channels = 0, inflight = 0;
  int per_agent = 1, state_ranks = 100000;
  int64_t iterations = -1;  // -1: the mode's default
  bool rank_state = false;
  double deadline_s = 30;                  // the agent's UploadWindow deadline (src/agent/agent.cc)
  std::string max_seconds, grace_seconds;  // empty: the server's defaults
  bool keep = false, watch = false;
  std::string bin = "build/perftracker";
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--keep" || k == "--watch") {
      (k == "--keep" ? keep : watch) = true;
      continue;
    }
    if (k == "--rank-state") {
      rank_state = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "server_ingest: %s needs a value\n", k.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (k == "--agents")
      agents = std::atoi(v);
    else if (k == "--ranks-per-agent")
      per_agent = std::atoi(v);
    else if (k == "--ranks")
      state_ranks = std::atoi(v);
    else if (k == "--iterations")
      iterations = std::atoll(v);
    else if (k == "--functions")
      functions = std::atoi(v);
    else if (k == "--threads")
      threads = std::atoi(v);
    else if (k == "--channels")
      channels = std::atoi(v);
    else if (k == "--inflight")
      inflight = std::atoi(v);
    else if (k == "--deadline")
      deadline_s = std::atof(v);
    else if (k == "--max-seconds")
      max_seconds = v;
    else if (k == "--grace-seconds")
      grace_seconds = v;
    else if (k == "--bin")
      bin = v;
    else {
      std::fprintf(stderr, "server_ingest: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (rank_state)
    return perftracker::bench::RankStateMemory(state_ranks, iterations < 0 ? 1000000 : iterations);
  if (agents <= 0 || threads <= 0 || per_agent <= 0) return 2;
  const int ranks = agents * per_agent;
  iterations = std::max<int64_t>(iterations, 0);
  if (channels <= 0 || channels > agents) channels = agents;
  if (inflight <= 0 || inflight > ranks) inflight = ranks;
  // One connection per agent: the client needs a descriptor per channel, more than the usual
  // soft limit of 1,024. Raise it to the hard limit; the server raises its own.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur != RLIM_INFINITY && static_cast<rlim_t>(channels) + 64 > lim.rlim_cur)
    std::fprintf(stderr,
                 "server_ingest: %d connections but only %llu descriptors (hard limit); expect "
                 "failed calls, or pass --channels\n",
                 channels, static_cast<unsigned long long>(lim.rlim_cur));

  std::string dir = fmt::format("/tmp/pt_ingest_{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string log = dir + "/server.log";
  int port = perftracker::FreeLoopbackPort();
  std::string addr = fmt::format("127.0.0.1:{}", port);
  pid_t server = fork();
  if (server == 0) {
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(out, 2);
    std::vector<std::string> a = {bin, "server", "--listen", addr, "--report-dir", dir};
    if (!max_seconds.empty()) a.insert(a.end(), {"--max-seconds", max_seconds});
    if (!grace_seconds.empty()) a.insert(a.end(), {"--grace-seconds", grace_seconds});
    std::vector<char*> av;
    for (auto& x : a) av.push_back(x.data());
    av.push_back(nullptr);
    execv(bin.c_str(), av.data());
    _exit(127);
  }
  // Peak threads of the server, sampled while the benchmark runs.
  std::atomic<bool> sampling{true};
  std::atomic<int> peak_threads{0};
  std::thread sampler([&] {
    while (sampling) {
      int t = static_cast<int>(ProcStatus(server, "Threads"));
      if (t > peak_threads) peak_threads = t;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto finish = [&](int rc) {
    sampling = false;
    sampler.join();
    kill(server, SIGTERM);
    int status = 0;
    waitpid(server, &status, 0);
    if (rc == 0 && !keep)
      fs::remove_all(dir);
    else
      std::printf("kept %s (server log: %s)\n", dir.c_str(), log.c_str());
    return rc;
  };

  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  // Separate connections (distinct channel arguments: no shared subchannel), as separate agents
  // would have.
  std::vector<std::unique_ptr<v1::Collector::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments a = args;
    a.SetInt("perftracker.channel", c);
    stubs.push_back(v1::Collector::NewStub(
        grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), a)));
  }
  auto wait_up = Clock::now();
  while (true) {
    if (g_token.empty()) {
      std::ifstream in(dir + "/.perftracker/token");
      std::getline(in, g_token);
    }
    grpc::ClientContext ctx;
    Auth(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    v1::StatusReply st;
    if (stubs[0]->Status(&ctx, v1::StatusRequest(), &st).ok()) break;
    if (Since(wait_up) > 30) {
      std::fprintf(stderr, "server_ingest: server did not start (%s)\n", bin.c_str());
      return finish(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // Summaries first (not timed): what each agent would upload.
  auto t_make = Clock::now();
  std::vector<std::string> bytes(ranks);
  {
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 2; ++t)
      pool.emplace_back([&] {
        for (int r = next++; r < ranks; r = next++)
          bytes[r] = perftracker::pattern::SerializeSummary(Synthetic(r, ranks, functions));
      });
    for (auto& t : pool) t.join();
  }
  int64_t total_bytes = 0;
  for (const auto& b : bytes) total_bytes += static_cast<int64_t>(b.size());
  std::printf("summaries: %d x %d functions, %.1f KB each on average (built in %.1f s)\n", ranks,
              functions, total_bytes / 1024.0 / ranks, Since(t_make));

  // Registration (each agent on its own channel; connects it).
  auto t_reg = Clock::now();
  std::atomic<int> reg_failed{0};
  std::vector<std::string> agent_ids(agents);
  {
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        for (int r = next++; r < agents; r = next++) {
          grpc::ClientContext ctx;
          Auth(&ctx);
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
          v1::RegisterRequest req;
          req.set_host(fmt::format("node-{}", r * per_agent / 8));
          for (int k = 0; k < per_agent; ++k) req.add_ranks(r * per_agent + k);
          v1::RegisterReply reply;
          if (!stubs[r % channels]->Register(&ctx, req, &reply).ok())
            ++reg_failed;
          else
            agent_ids[r] = reply.agent_id();
        }
      });
    for (auto& t : pool) t.join();
  }
  int registered = -1;
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::StatusReply st;
    if (stubs[0]->Status(&ctx, v1::StatusRequest(), &st).ok()) registered = st.agents();
  }
  std::printf(
      "register: %d agents registered (server's count) of %d, %d ranks each, on %d connections, "
      "in %.2f s (%d failed)\n",
      registered, agents, per_agent, channels, Since(t_reg), reg_failed.load());
  if (iterations > 0) {
    // Every agent reports its ranks' iterations, as agents do all along (the server's
    // per-rank statistics: server/rank_state.h).
    auto t_it = Clock::now();
    std::atomic<int> it_failed{0};
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        for (int a = next++; a < agents; a = next++) {
          v1::ReportIterationsRequest req;
          req.set_agent_id(agent_ids[a]);
          for (int k = 0; k < per_agent; ++k) {
            v1::IterationBatch* b = req.add_batches();
            b->set_rank(a * per_agent + k);
            b->set_pid(1000 + a * per_agent + k);
            for (int64_t i = 0; i < iterations; ++i) {
              b->add_steps(i);
              b->add_iteration_ms(100 + (i * 7 + k) % 13);
            }
          }
          grpc::ClientContext ctx;
          Auth(&ctx);
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
          v1::ReportIterationsReply reply;
          if (!stubs[a % channels]->ReportIterations(&ctx, req, &reply).ok()) ++it_failed;
        }
      });
    for (auto& t : pool) t.join();
    std::printf(
        "iterations: %lld per rank reported for %d ranks in %.2f s (%d calls failed); server "
        "VmRSS now %.0f MB\n",
        static_cast<long long>(iterations), ranks, Since(t_it), it_failed.load(),
        ProcStatus(server, "VmRSS") / 1024);
  }
  // Every agent's command stream, read on one completion queue: tag 2r = the stream started,
  // 2r + 1 = a command arrived (or the stream ended).
  struct Watch {
    grpc::ClientContext ctx;
    v1::Command cmd;
    std::unique_ptr<grpc::ClientAsyncReader<v1::Command>> reader;
  };
  std::vector<std::unique_ptr<Watch>> watches;
  grpc::CompletionQueue watch_cq;
  std::atomic<int> watching{0}, windows_seen{0};
  std::thread watch_reader;
  if (watch) {
    auto t_watch = Clock::now();
    for (int r = 0; r < agents; ++r) {
      auto w = std::make_unique<Watch>();
      Auth(&w->ctx);
      v1::WatchRequest req;
      req.set_agent_id(agent_ids[r]);
      w->reader = stubs[r % channels]->AsyncWatchCommands(
          &w->ctx, req, &watch_cq, reinterpret_cast<void*>(static_cast<intptr_t>(2 * r)));
      watches.push_back(std::move(w));
    }
    watch_reader = std::thread([&] {
      void* tag;
      bool ok;
      while (watch_cq.Next(&tag, &ok)) {
        const auto t = reinterpret_cast<intptr_t>(tag);
        Watch& w = *watches[static_cast<size_t>(t / 2)];
        if (!ok) continue;  // the stream ended
        if (t % 2 == 0) {
          ++watching;
        } else if (w.cmd.has_profile()) {
          ++windows_seen;
        }
        w.reader->Read(&w.cmd, reinterpret_cast<void*>(t / 2 * 2 + 1));
      }
    });
    while (watching < agents && Since(t_watch) < 120)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // Let the server finish setting the streams up, then see what holding them costs while
    // nothing happens.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double cpu0 = ProcCpuSeconds(server);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::printf(
        "watch: %d command streams open in %.2f s; server threads %.0f, idle server CPU %.0f%% "
        "of a core\n",
        watching.load(), Since(t_watch), ProcStatus(server, "Threads"),
        (ProcCpuSeconds(server) - cpu0) / 5 * 100);
  }
  auto t_trigger = Clock::now();
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::TriggerReply tr;
    stubs[0]->Trigger(&ctx, v1::TriggerRequest(), &tr);
  }
  if (watch) {
    while (windows_seen < agents && Since(t_trigger) < 60)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::printf("watch: the window command reached %d of %d agents in %.3f s\n",
                windows_seen.load(), agents, Since(t_trigger));
  }

  // Uploads: every agent's call started at once (up to --inflight), completions on one queue.
  struct Call {
    grpc::ClientContext ctx;
    v1::UploadWindowReply reply;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::UploadWindowReply>> reader;
  };
  std::vector<std::unique_ptr<Call>> calls(ranks);
  grpc::CompletionQueue cq;
  int accepted = 0, refused = 0, failed = 0;
  std::map<std::string, int> errors;  // failure / refusal message -> count
  auto t_up = Clock::now();
  int started = 0;
  auto start_one = [&](int r) {
    auto c = std::make_unique<Call>();
    Auth(&c->ctx);
    c->ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1e3)));
    const int a = r / per_agent;
    v1::UploadWindowRequest req;
    req.set_agent_id(agent_ids[a]);
    req.set_window_id(1);
    req.set_rank(r);
    req.set_host(fmt::format("node-{}", r / 8));
    req.set_summary(bytes[r]);
    c->reader = stubs[a % channels]->AsyncUploadWindow(&c->ctx, req, &cq);
    c->reader->Finish(&c->reply, &c->status, reinterpret_cast<void*>(static_cast<intptr_t>(r)));
    calls[r] = std::move(c);
  };
  for (; started < inflight; ++started) start_one(started);
  for (int done = 0; done < ranks; ++done) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) break;
    int r = static_cast<int>(reinterpret_cast<intptr_t>(tag));
    Call& c = *calls[r];
    if (!ok || !c.status.ok()) {
      ++failed;
      ++errors[fmt::format("failed: {} {}", static_cast<int>(c.status.error_code()),
                           c.status.error_message())];
    } else if (c.reply.accepted()) {
      ++accepted;
    } else {
      ++refused;
      ++errors["refused: " + c.reply.message()];
    }
    calls[r].reset();
    if (started < ranks) start_one(started++);
  }
  double upload_s = Since(t_up);
  std::printf(
      "upload: %d accepted, %d refused, %d failed in %.2f s (%.0f uploads/s, %.0f MB/s; "
      "%d in flight at most, deadline %.0f s)\n",
      accepted, refused, failed, upload_s, ranks / upload_s, total_bytes / 1e6 / upload_s, inflight,
      deadline_s);
  int shown = 0;
  for (const auto& [msg, n] : errors)
    if (shown++ < 5) std::printf("  %d x %s\n", n, msg.c_str());

  std::string diag = dir + "/windows/1/diagnosis.json";
  while (!fs::exists(diag) && Since(t_up) < 1200)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  bool diagnosed = fs::exists(diag);
  double diag_s = Since(t_up);
  if (diagnosed)
    std::printf(
        "diagnosis: complete %.2f s after the first upload started (%.2f s after the "
        "last reply)\n",
        diag_s, diag_s - upload_s);
  else
    std::printf("diagnosis: NOT written within %.0f s\n", diag_s);

  std::string db = dir + "/perftracker.db";
  StoreReadback rb = ReadBack(db, 1, bytes);
  int64_t lost = ranks - rb.matching;
  std::printf(
      "store: %lld rows, %.1f MB of summaries read back (%.1f MB sent); %lld identical to "
      "what was sent, %lld differ, %lld duplicate, %lld unknown rank\n",
      static_cast<long long>(rb.rows), rb.bytes / 1e6, total_bytes / 1e6,
      static_cast<long long>(rb.matching), static_cast<long long>(rb.mismatched),
      static_cast<long long>(rb.duplicates), static_cast<long long>(rb.unknown));
  std::printf("lost: %lld of %d ranks' summaries%s\n", static_cast<long long>(lost), ranks,
              lost == 0 ? " (none lost)" : "");
  std::printf("server: peak RSS (VmHWM) %.0f MB, peak threads %d\n",
              ProcStatus(server, "VmHWM") / 1024, peak_threads.load());
  uint64_t db_size = FileSize(db), wal_size = FileSize(db + "-wal"),
           shm_size = FileSize(db + "-shm");
  std::printf("store on disk: %.1f MB (database %.1f MB + WAL %.1f MB + shm %.1f MB)\n",
              (db_size + wal_size + shm_size) / 1e6, db_size / 1e6, wal_size / 1e6, shm_size / 1e6);
  if (watch) {
    // Cancel the streams and drain their queue before the contexts go.
    for (auto& w : watches) w->ctx.TryCancel();
    watch_cq.Shutdown();
    watch_reader.join();
  }
  bool ok = rb.opened && lost == 0 && rb.duplicates == 0 && rb.unknown == 0 && accepted == ranks &&
            registered == agents && diagnosed && (!watch || windows_seen >= agents);
  return finish(ok ? 0 : 1);
}
