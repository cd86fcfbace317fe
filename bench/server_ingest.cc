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

// What the command line asks for.
struct Options {
  int agents = 10000, functions = 500, threads = 32, channels = 0, inflight = 0;
  int per_agent = 1, state_ranks = 100000;
  int64_t iterations = -1;  // -1: the mode's default
  bool rank_state = false;
  double deadline_s = 30;                  // the agent's UploadWindow deadline (src/agent/agent.cc)
  std::string max_seconds, grace_seconds;  // empty: the server's defaults
  bool keep = false, watch = false;
  std::string bin = "build/perftracker";
};

// The flags into *O; false (with the message printed) on a bad one.
bool ParseFlags(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--keep" || k == "--watch") {
      (k == "--keep" ? o->keep : o->watch) = true;
      continue;
    }
    if (k == "--rank-state") {
      o->rank_state = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "server_ingest: %s needs a value\n", k.c_str());
      return false;
    }
    const char* v = argv[++i];
    if (k == "--agents")
      o->agents = std::atoi(v);
    else if (k == "--ranks-per-agent")
      o->per_agent = std::atoi(v);
    else if (k == "--ranks")
      o->state_ranks = std::atoi(v);
    else if (k == "--iterations")
      o->iterations = std::atoll(v);
    else if (k == "--functions")
      o->functions = std::atoi(v);
    else if (k == "--threads")
      o->threads = std::atoi(v);
    else if (k == "--channels")
      o->channels = std::atoi(v);
    else if (k == "--inflight")
      o->inflight = std::atoi(v);
    else if (k == "--deadline")
      o->deadline_s = std::atof(v);
    else if (k == "--max-seconds")
      o->max_seconds = v;
    else if (k == "--grace-seconds")
      o->grace_seconds = v;
    else if (k == "--bin")
      o->bin = v;
    else {
      std::fprintf(stderr, "server_ingest: unknown flag %s\n", k.c_str());
      return false;
    }
  }
  return true;
}

// One connection per agent: the client needs a descriptor per channel, more than the usual soft
// limit of 1,024. Raises it to the hard limit (the server raises its own) and warns if that is
// still too few for CHANNELS.
void RaiseDescriptorLimit(int channels) {
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
}

// Runs F(i) for i in [0, N) on THREADS threads.
template <typename F>
void ForEach(int n, int threads, F f) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) f(i);
    });
  for (auto& t : pool) t.join();
}

// One run: a server process, the agents' calls against it, then what it stored. Each phase is a
// step of its own, in the order Run calls them.
class IngestBench {
 public:
  explicit IngestBench(const Options& o) : o_(o), ranks_(o.agents * o.per_agent) {}

  int Run() {
    if (!StartServer()) return Finish(1);
    MakeSummaries();
    Register();
    if (o_.iterations > 0) ReportIterations();
    if (o_.watch) OpenWatches();
    const auto t_trigger = Clock::now();
    {
      grpc::ClientContext ctx;
      Auth(&ctx);
      v1::TriggerReply tr;
      stubs_[0]->Trigger(&ctx, v1::TriggerRequest(), &tr);
    }
    if (o_.watch) {
      while (windows_seen_ < o_.agents && Since(t_trigger) < 60)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::printf("watch: the window command reached %d of %d agents in %.3f s\n",
                  windows_seen_.load(), o_.agents, Since(t_trigger));
    }
    Upload();
    const bool ok = Stored();
    if (o_.watch) CloseWatches();
    return Finish(ok ? 0 : 1);
  }

 private:
  // The server in a child process, its peak threads sampled; true once it answers.
  bool StartServer() {
    dir_ = fmt::format("/tmp/pt_ingest_{}", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    log_ = dir_ + "/server.log";
    const std::string addr = fmt::format("127.0.0.1:{}", perftracker::FreeLoopbackPort());
    server_ = fork();
    if (server_ == 0) {
      int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(out, 2);
      std::vector<std::string> a = {o_.bin, "server", "--listen", addr, "--report-dir", dir_};
      if (!o_.max_seconds.empty()) a.insert(a.end(), {"--max-seconds", o_.max_seconds});
      if (!o_.grace_seconds.empty()) a.insert(a.end(), {"--grace-seconds", o_.grace_seconds});
      std::vector<char*> av;
      for (auto& x : a) av.push_back(x.data());
      av.push_back(nullptr);
      execv(o_.bin.c_str(), av.data());
      _exit(127);
    }
    sampler_ = std::thread([this] {
      while (sampling_) {
        int t = static_cast<int>(ProcStatus(server_, "Threads"));
        if (t > peak_threads_) peak_threads_ = t;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(64 << 20);
    // Separate connections (distinct channel arguments: no shared subchannel), as separate
    // agents would have.
    for (int c = 0; c < o_.channels; ++c) {
      grpc::ChannelArguments a = args;
      a.SetInt("perftracker.channel", c);
      stubs_.push_back(v1::Server::NewStub(
          grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), a)));
    }
    const auto wait_up = Clock::now();
    while (true) {
      if (g_token.empty()) {
        std::ifstream in(dir_ + "/.perftracker/token");
        std::getline(in, g_token);
      }
      grpc::ClientContext ctx;
      Auth(&ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      v1::StatusReply st;
      if (stubs_[0]->Status(&ctx, v1::StatusRequest(), &st).ok()) return true;
      if (Since(wait_up) > 30) {
        std::fprintf(stderr, "server_ingest: server did not start (%s)\n", o_.bin.c_str());
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  int Finish(int rc) {
    sampling_ = false;
    if (sampler_.joinable()) sampler_.join();
    if (server_ > 0) {
      kill(server_, SIGTERM);
      int status = 0;
      waitpid(server_, &status, 0);
    }
    if (rc == 0 && !o_.keep)
      fs::remove_all(dir_);
    else
      std::printf("kept %s (server log: %s)\n", dir_.c_str(), log_.c_str());
    return rc;
  }

  // What each agent would upload (not timed).
  void MakeSummaries() {
    const auto t_make = Clock::now();
    bytes_.assign(ranks_, {});
    ForEach(ranks_, 2, [&](int r) {
      bytes_[r] = perftracker::pattern::SerializeSummary(Synthetic(r, ranks_, o_.functions));
    });
    for (const auto& b : bytes_) total_bytes_ += static_cast<int64_t>(b.size());
    std::printf("summaries: %d x %d functions, %.1f KB each on average (built in %.1f s)\n", ranks_,
                o_.functions, total_bytes_ / 1024.0 / ranks_, Since(t_make));
  }

  // Each agent registers on its own channel (which connects it).
  void Register() {
    const auto t_reg = Clock::now();
    std::atomic<int> failed{0};
    agent_ids_.assign(o_.agents, {});
    ForEach(o_.agents, o_.threads, [&](int r) {
      grpc::ClientContext ctx;
      Auth(&ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::RegisterRequest req;
      req.set_host(fmt::format("node-{}", r * o_.per_agent / 8));
      for (int k = 0; k < o_.per_agent; ++k) req.add_ranks(r * o_.per_agent + k);
      v1::RegisterReply reply;
      if (!stubs_[r % o_.channels]->Register(&ctx, req, &reply).ok())
        ++failed;
      else
        agent_ids_[r] = reply.agent_id();
    });
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::StatusReply st;
    if (stubs_[0]->Status(&ctx, v1::StatusRequest(), &st).ok()) registered_ = st.agents();
    std::printf(
        "register: %d agents registered (server's count) of %d, %d ranks each, on %d "
        "connections, in %.2f s (%d failed)\n",
        registered_, o_.agents, o_.per_agent, o_.channels, Since(t_reg), failed.load());
  }

  // Every agent reports its ranks' iterations, as agents do all along (the server's per-rank
  // statistics: server/rank_state.h).
  void ReportIterations() {
    const auto t_it = Clock::now();
    std::atomic<int> failed{0};
    ForEach(o_.agents, o_.threads, [&](int a) {
      v1::ReportIterationsRequest req;
      req.set_agent_id(agent_ids_[a]);
      for (int k = 0; k < o_.per_agent; ++k) {
        v1::IterationBatch* b = req.add_batches();
        b->set_rank(a * o_.per_agent + k);
        b->set_pid(1000 + a * o_.per_agent + k);
        for (int64_t i = 0; i < o_.iterations; ++i) {
          b->add_steps(i);
          b->add_iteration_ms(100 + (i * 7 + k) % 13);
        }
      }
      grpc::ClientContext ctx;
      Auth(&ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::ReportIterationsReply reply;
      if (!stubs_[a % o_.channels]->ReportIterations(&ctx, req, &reply).ok()) ++failed;
    });
    std::printf(
        "iterations: %lld per rank reported for %d ranks in %.2f s (%d calls failed); server "
        "VmRSS now %.0f MB\n",
        static_cast<long long>(o_.iterations), ranks_, Since(t_it), failed.load(),
        ProcStatus(server_, "VmRSS") / 1024);
  }

  // Every agent's command stream, read on one completion queue: tag 2r = the stream started,
  // 2r + 1 = a command arrived (or the stream ended). Then what holding them costs idle.
  void OpenWatches() {
    const auto t_watch = Clock::now();
    for (int r = 0; r < o_.agents; ++r) {
      auto w = std::make_unique<Watch>();
      Auth(&w->ctx);
      v1::WatchRequest req;
      req.set_agent_id(agent_ids_[r]);
      w->reader = stubs_[r % o_.channels]->AsyncWatchCommands(
          &w->ctx, req, &watch_cq_, reinterpret_cast<void*>(static_cast<intptr_t>(2 * r)));
      watches_.push_back(std::move(w));
    }
    watch_reader_ = std::thread([this] {
      void* tag;
      bool ok;
      while (watch_cq_.Next(&tag, &ok)) {
        const auto t = reinterpret_cast<intptr_t>(tag);
        Watch& w = *watches_[static_cast<size_t>(t / 2)];
        if (!ok) continue;  // the stream ended
        if (t % 2 == 0) {
          ++watching_;
        } else if (w.cmd.has_profile()) {
          ++windows_seen_;
        }
        w.reader->Read(&w.cmd, reinterpret_cast<void*>(t / 2 * 2 + 1));
      }
    });
    while (watching_ < o_.agents && Since(t_watch) < 120)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // Let the server finish setting the streams up, then see what holding them costs while
    // nothing happens.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double cpu0 = ProcCpuSeconds(server_);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::printf(
        "watch: %d command streams open in %.2f s; server threads %.0f, idle server CPU %.0f%% "
        "of a core\n",
        watching_.load(), Since(t_watch), ProcStatus(server_, "Threads"),
        (ProcCpuSeconds(server_) - cpu0) / 5 * 100);
  }

  // Cancels the streams and drains their queue before the contexts go.
  void CloseWatches() {
    for (auto& w : watches_) w->ctx.TryCancel();
    watch_cq_.Shutdown();
    watch_reader_.join();
  }

  // Every agent's upload started at once (up to --inflight), completions on one queue.
  void Upload() {
    struct Call {
      grpc::ClientContext ctx;
      v1::UploadWindowReply reply;
      grpc::Status status;
      std::unique_ptr<grpc::ClientAsyncResponseReader<v1::UploadWindowReply>> reader;
    };
    std::vector<std::unique_ptr<Call>> calls(ranks_);
    grpc::CompletionQueue cq;
    std::map<std::string, int> errors;  // failure / refusal message -> count
    t_upload_ = Clock::now();
    int started = 0;
    auto start_one = [&](int r) {
      auto c = std::make_unique<Call>();
      Auth(&c->ctx);
      c->ctx.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(o_.deadline_s * 1e3)));
      const int a = r / o_.per_agent;
      v1::UploadWindowRequest req;
      req.set_agent_id(agent_ids_[a]);
      req.set_window_id(1);
      req.set_rank(r);
      req.set_host(fmt::format("node-{}", r / 8));
      req.set_summary(bytes_[r]);
      c->reader = stubs_[a % o_.channels]->AsyncUploadWindow(&c->ctx, req, &cq);
      c->reader->Finish(&c->reply, &c->status, reinterpret_cast<void*>(static_cast<intptr_t>(r)));
      calls[r] = std::move(c);
    };
    for (; started < o_.inflight; ++started) start_one(started);
    for (int done = 0; done < ranks_; ++done) {
      void* tag = nullptr;
      bool ok = false;
      if (!cq.Next(&tag, &ok)) break;
      int r = static_cast<int>(reinterpret_cast<intptr_t>(tag));
      Call& c = *calls[r];
      if (!ok || !c.status.ok()) {
        ++failed_;
        ++errors[fmt::format("failed: {} {}", static_cast<int>(c.status.error_code()),
                             c.status.error_message())];
      } else if (c.reply.accepted()) {
        ++accepted_;
      } else {
        ++refused_;
        ++errors["refused: " + c.reply.message()];
      }
      calls[r].reset();
      if (started < ranks_) start_one(started++);
    }
    upload_s_ = Since(t_upload_);
    std::printf(
        "upload: %d accepted, %d refused, %d failed in %.2f s (%.0f uploads/s, %.0f MB/s; "
        "%d in flight at most, deadline %.0f s)\n",
        accepted_, refused_, failed_, upload_s_, ranks_ / upload_s_, total_bytes_ / 1e6 / upload_s_,
        o_.inflight, o_.deadline_s);
    int shown = 0;
    for (const auto& [msg, n] : errors)
      if (shown++ < 5) std::printf("  %d x %s\n", n, msg.c_str());
  }

  // The window's diagnosis, what the store holds against what was sent, the server's peaks;
  // whether nothing was lost.
  bool Stored() {
    const std::string diag = dir_ + "/windows/1/diagnosis.json";
    while (!fs::exists(diag) && Since(t_upload_) < 1200)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const bool diagnosed = fs::exists(diag);
    const double diag_s = Since(t_upload_);
    if (diagnosed)
      std::printf(
          "diagnosis: complete %.2f s after the first upload started (%.2f s after the "
          "last reply)\n",
          diag_s, diag_s - upload_s_);
    else
      std::printf("diagnosis: NOT written within %.0f s\n", diag_s);
    const std::string db = dir_ + "/perftracker.db";
    const StoreReadback rb = ReadBack(db, 1, bytes_);
    const int64_t lost = ranks_ - rb.matching;
    std::printf(
        "store: %lld rows, %.1f MB of summaries read back (%.1f MB sent); %lld identical to "
        "what was sent, %lld differ, %lld duplicate, %lld unknown rank\n",
        static_cast<long long>(rb.rows), rb.bytes / 1e6, total_bytes_ / 1e6,
        static_cast<long long>(rb.matching), static_cast<long long>(rb.mismatched),
        static_cast<long long>(rb.duplicates), static_cast<long long>(rb.unknown));
    std::printf("lost: %lld of %d ranks' summaries%s\n", static_cast<long long>(lost), ranks_,
                lost == 0 ? " (none lost)" : "");
    std::printf("server: peak RSS (VmHWM) %.0f MB, peak threads %d\n",
                ProcStatus(server_, "VmHWM") / 1024, peak_threads_.load());
    const uint64_t db_size = FileSize(db), wal_size = FileSize(db + "-wal"),
                   shm_size = FileSize(db + "-shm");
    std::printf("store on disk: %.1f MB (database %.1f MB + WAL %.1f MB + shm %.1f MB)\n",
                (db_size + wal_size + shm_size) / 1e6, db_size / 1e6, wal_size / 1e6,
                shm_size / 1e6);
    return rb.opened && lost == 0 && rb.duplicates == 0 && rb.unknown == 0 && accepted_ == ranks_ &&
           registered_ == o_.agents && diagnosed && (!o_.watch || windows_seen_ >= o_.agents);
  }

  struct Watch {
    grpc::ClientContext ctx;
    v1::Command cmd;
    std::unique_ptr<grpc::ClientAsyncReader<v1::Command>> reader;
  };

  const Options o_;
  const int ranks_;
  std::string dir_, log_;
  pid_t server_ = -1;
  std::atomic<bool> sampling_{true};
  std::atomic<int> peak_threads_{0};
  std::thread sampler_;
  std::vector<std::unique_ptr<v1::Server::Stub>> stubs_;
  std::vector<std::string> bytes_;  // each rank's summary file
  int64_t total_bytes_ = 0;
  std::vector<std::string> agent_ids_;
  int registered_ = -1;  // the server's count
  std::vector<std::unique_ptr<Watch>> watches_;
  grpc::CompletionQueue watch_cq_;
  std::atomic<int> watching_{0}, windows_seen_{0};
  std::thread watch_reader_;
  Clock::time_point t_upload_;
  double upload_s_ = 0;
  int accepted_ = 0, refused_ = 0, failed_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each figure as it comes, into a log file too
  Options o;
  if (!ParseFlags(argc, argv, &o)) return 2;
  if (o.rank_state)
    return perftracker::bench::RankStateMemory(o.state_ranks,
                                               o.iterations < 0 ? 1000000 : o.iterations);
  if (o.agents <= 0 || o.threads <= 0 || o.per_agent <= 0) return 2;
  const int ranks = o.agents * o.per_agent;
  o.iterations = std::max<int64_t>(o.iterations, 0);
  if (o.channels <= 0 || o.channels > o.agents) o.channels = o.agents;
  if (o.inflight <= 0 || o.inflight > ranks) o.inflight = ranks;
  RaiseDescriptorLimit(o.channels);
  return IngestBench(o).Run();
}
