// Server ingestion at scale: N simulated node agents (default 10,000, one rank each) register
// with a `perftracker server` process, a window is triggered, and every agent uploads its
// window summary (~500 functions, the real format) concurrently over loopback gRPC. Prints the
// upload time, how many uploads were accepted / refused / failed, how many summaries the SQLite
// store holds, the time until the window's diagnosis is written, and the server's peak memory.
//
//   build/server_ingest [--agents 10000] [--functions 500] [--threads 32] [--channels 16]
//                      [--bin build/perftracker]
#include <fcntl.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/net.h"
#include "pattern/pattern.h"
#include "pattern/summary_io.h"
#include "perftracker.grpc.pb.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;
using Clock = std::chrono::steady_clock;
using perftracker::pattern::FunctionClass;
using perftracker::pattern::FunctionPattern;
using perftracker::pattern::RankSummary;
using perftracker::trace::EventKind;

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

double PeakRssMb(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024;
  return 0;
}

int64_t Count(const std::string& db_path, const char* sql) {
  sqlite3* db = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int agents = 10000, functions = 500, threads = 32, channels = 16;
  std::string bin = "build/perftracker";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--agents")
      agents = std::atoi(argv[i + 1]);
    else if (k == "--functions")
      functions = std::atoi(argv[i + 1]);
    else if (k == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (k == "--channels")
      channels = std::atoi(argv[i + 1]);
    else if (k == "--bin")
      bin = argv[i + 1];
  }
  std::string dir = fmt::format("/tmp/pt_ingest_{}", getpid());
  fs::remove_all(dir);
  int port = perftracker::FreeLoopbackPort();
  std::string addr = fmt::format("127.0.0.1:{}", port);
  pid_t server = fork();
  if (server == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(bin.c_str(), bin.c_str(), "server", "--listen", addr.c_str(), "--report-dir", dir.c_str(),
          "--max-seconds", "600", "--grace-seconds", "600", nullptr);
    _exit(127);
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  // Separate connections (a channel per subchannel pool), as separate agents would have.
  std::vector<std::unique_ptr<v1::Collector::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments a = args;
    a.SetInt("perftracker.channel", c);  // distinct args: no shared connection
    stubs.push_back(v1::Collector::NewStub(
        grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), a)));
  }
  auto wait_up = Clock::now();
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    v1::StatusReply st;
    if (stubs[0]->Status(&ctx, v1::StatusRequest(), &st).ok()) break;
    if (Since(wait_up) > 30) {
      std::fprintf(stderr, "ingest_bench: server did not start (%s)\n", bin.c_str());
      kill(server, SIGKILL);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // Summaries first (not timed): what each agent would upload.
  auto t_make = Clock::now();
  std::vector<std::string> bytes(agents);
  {
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 2; ++t)
      pool.emplace_back([&] {
        for (int r = next++; r < agents; r = next++)
          bytes[r] = perftracker::pattern::SerializeSummary(Synthetic(r, agents, functions));
      });
    for (auto& t : pool) t.join();
  }
  size_t total_bytes = 0;
  for (const auto& b : bytes) total_bytes += b.size();
  std::printf("summaries: %d x %d functions, %.1f KB each on average (built in %.1f s)\n", agents,
              functions, total_bytes / 1024.0 / agents, Since(t_make));

  auto parallel = [&](auto&& fn) {
    std::atomic<int> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int r = next++; r < agents; r = next++) fn(r, *stubs[t % channels]);
      });
    for (auto& t : pool) t.join();
  };
  auto t_reg = Clock::now();
  std::atomic<int> reg_failed{0};
  parallel([&](int r, v1::Collector::Stub& stub) {
    grpc::ClientContext ctx;
    v1::RegisterRequest req;
    req.set_host(fmt::format("node-{}", r / 8));
    req.add_ranks(r);
    v1::RegisterReply reply;
    if (!stub.Register(&ctx, req, &reply).ok()) ++reg_failed;
  });
  std::printf("register: %d agents in %.2f s (%d failed)\n", agents, Since(t_reg),
              reg_failed.load());
  {
    grpc::ClientContext ctx;
    v1::TriggerReply tr;
    stubs[0]->Trigger(&ctx, v1::TriggerRequest(), &tr);
  }

  std::atomic<int> accepted{0}, refused{0}, failed{0};
  auto t_up = Clock::now();
  parallel([&](int r, v1::Collector::Stub& stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    v1::UploadWindowRequest req;
    req.set_window_id(1);
    req.set_rank(r);
    req.set_host(fmt::format("node-{}", r / 8));
    req.set_summary(bytes[r]);
    v1::UploadWindowReply reply;
    grpc::Status st = stub.UploadWindow(&ctx, req, &reply);
    if (!st.ok()) {
      ++failed;
    } else if (reply.accepted()) {
      ++accepted;
    } else {
      ++refused;
    }
  });
  double upload_s = Since(t_up);
  std::printf("upload: %d accepted, %d refused, %d failed in %.2f s (%.0f uploads/s, %.0f MB/s)\n",
              accepted.load(), refused.load(), failed.load(), upload_s, agents / upload_s,
              total_bytes / 1e6 / upload_s);
  std::string diag = dir + "/windows/1/diagnosis.json";
  while (!fs::exists(diag) && Since(t_up) < 1200)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::printf("diagnosis written %.2f s after the first upload (%.2f s after the last)\n",
              Since(t_up), Since(t_up) - upload_s);
  std::string db = dir + "/perftracker.db";
  std::printf("store: %lld rank summaries, %lld with their bytes\n",
              static_cast<long long>(Count(db, "SELECT count(*) FROM rank_summaries")),
              static_cast<long long>(
                  Count(db, "SELECT count(*) FROM rank_summaries WHERE length(summary) > 0")));
  std::printf("server peak RSS: %.0f MB\n", PeakRssMb(server));
  kill(server, SIGTERM);
  int status = 0;
  waitpid(server, &status, 0);
  fs::remove_all(dir);
  return accepted.load() == agents ? 0 : 1;
}
