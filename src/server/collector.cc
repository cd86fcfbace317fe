#include "server/collector.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/json_writer.h"
#include "perftracker.grpc.pb.h"
#include "report/report.h"
#include "server/store.h"
#include "server/window.h"

namespace perftracker::server {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;

bool IsLoopbackListen(const std::string& listen) {
  size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  return host == "127.0.0.1" || host == "localhost" || host == "[::1]";
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  // Touch every byte of the longer input so timing reveals neither the length of a common
  // prefix nor (beyond the max) the token's length.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument(fmt::format("{}: cannot read token file", path));
  std::string line;
  std::getline(in, line);
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  line.erase(line.begin(), std::find_if(line.begin(), line.end(), not_space));
  line.erase(std::find_if(line.rbegin(), line.rend(), not_space).base(), line.end());
  if (line.empty()) return InvalidArgument(fmt::format("{}: token file is empty", path));
  return line;
}

namespace {

std::string HardwareJson(const std::map<std::string, double>& values, const std::string& nvml) {
  JsonWriter w;
  w.BeginObject().Key("nvml").String(nvml).Key("values").BeginObject();
  for (const auto& [k, v] : values) w.Key(k).Number(v);
  w.EndObject().EndObject();
  return w.Take();
}

// Writes through a temporary file and a rename, so readers never see half a report.
Status WriteReport(const diagnose::Diagnosis& diagnosis, const std::string& path) {
  std::string tmp = path + ".tmp";
  PT_RETURN_IF_ERROR(report::WriteJsonFile(diagnosis, tmp));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Internal(fmt::format("{}: cannot rename: {}", path, ec.message()));
  return Status::Ok();
}

}  // namespace

struct AgentState {
  std::string host;
  std::vector<int> ranks;
  std::deque<v1::Command> queue;
};

struct RankState {
  std::string host;
  int64_t last_step = -1;
  double last_ms = 0;
  double sum_ms = 0;
  int64_t count = 0;
};

struct CollectorServer::Impl final : public v1::Collector::Service {
  ServerOptions options;
  std::unique_ptr<Store> store;
  int64_t job_id = 0;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool shutting_down = false;
  bool shut_down = false;
  int64_t next_agent = 1;
  std::map<std::string, AgentState> agents;
  std::map<int, RankState> ranks;
  std::map<int64_t, std::unique_ptr<Window>> windows;
  int64_t open_window = 0;  // 0: none
  int64_t last_window = 0;
  bool wrote_latest = false;
  std::thread timer;

  grpc::Status Authorize(grpc::ServerContext* ctx) {
    if (options.token.empty()) return grpc::Status::OK;
    const auto& md = ctx->client_metadata();
    auto it = md.find("x-perftracker-token");
    if (it == md.end() ||
        !ConstantTimeEquals(std::string(it->second.data(), it->second.size()), options.token))
      return {grpc::StatusCode::UNAUTHENTICATED, "missing or wrong perftracker token"};
    return grpc::Status::OK;
  }

  // Called with mu held.
  TriggerResult OpenWindowLocked(const std::string& reason, int iterations) {
    if (open_window) {
      const WindowSpec& s = windows[open_window]->spec();
      return {s.id, s.start_iteration, true};
    }
    WindowSpec spec;
    spec.id = ++last_window;
    spec.iterations = iterations > 0 ? iterations : options.default_iterations;
    spec.max_seconds = options.max_seconds;
    // A common future iteration, so every rank profiles the same steps; 0 when no rank has
    // reported iterations yet (workers read it as "the next iteration").
    int64_t latest = -1;
    for (const auto& [r, st] : ranks) latest = std::max(latest, st.last_step);
    spec.start_iteration = latest >= 0 ? latest + options.start_lead : 0;
    std::set<int> expected;
    for (const auto& [id, a] : agents) expected.insert(a.ranks.begin(), a.ranks.end());
    auto deadline =
        Window::Clock::now() +
        std::chrono::duration_cast<Window::Clock::duration>(
            std::chrono::duration<double>(options.max_seconds + options.upload_grace_seconds));
    windows[spec.id] = std::make_unique<Window>(spec, expected, deadline);
    open_window = spec.id;
    if (::perftracker::Status st =
            store->AddWindow(job_id, spec.id, spec.start_iteration, spec.iterations, reason);
        !st.ok())
      std::fprintf(stderr, "perftracker server: %s\n", st.message().c_str());
    v1::Command cmd;
    v1::ProfileWindow* p = cmd.mutable_profile();
    p->set_window_id(spec.id);
    p->set_start_iteration(spec.start_iteration);
    p->set_iterations(spec.iterations);
    p->set_max_seconds(spec.max_seconds);
    for (auto& [id, a] : agents) a.queue.push_back(cmd);
    cv.notify_all();
    std::fprintf(stderr,
                 "perftracker server: window %lld opened (%s): iterations %lld..+%d, %zu agents\n",
                 static_cast<long long>(spec.id), reason.c_str(),
                 static_cast<long long>(spec.start_iteration), spec.iterations, agents.size());
    return {spec.id, spec.start_iteration, false};
  }

  // Called with mu held.
  void CloseWindowLocked(int64_t id) {
    Window& w = *windows[id];
    if (w.closed()) return;
    diagnose::Diagnosis d = w.Close();
    if (open_window == id) open_window = 0;
    std::string json = report::RenderJson(d);
    fs::path dir = fs::path(options.report_dir) / "windows" / std::to_string(id);
    std::error_code ec;
    fs::create_directories(dir, ec);
    ::perftracker::Status st = WriteReport(d, (dir / "diagnosis.json").string());
    if (st.ok()) st = WriteReport(d, (fs::path(options.report_dir) / "diagnosis.json").string());
    if (st.ok()) wrote_latest = true;
    if (!st.ok()) std::fprintf(stderr, "perftracker server: %s\n", st.message().c_str());
    if (::perftracker::Status s2 = store->FinishWindow(id, d, json); !s2.ok())
      std::fprintf(stderr, "perftracker server: %s\n", s2.message().c_str());
    if (options.print) {
      std::printf("== window %lld ==\n%s", static_cast<long long>(id),
                  report::RenderText(d).c_str());
      std::fflush(stdout);
    }
  }

  void TimerLoop() {
    std::unique_lock lk(mu);
    while (!shutting_down) {
      cv.wait_for(lk, std::chrono::milliseconds(100));
      if (open_window && windows[open_window]->Expired(Window::Clock::now()))
        CloseWindowLocked(open_window);
    }
  }

  // --- the service ---

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterReply* reply) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::lock_guard lk(mu);
    std::string id = fmt::format("agent-{}", next_agent++);
    AgentState& a = agents[id];
    a.host = req->host();
    a.ranks.assign(req->ranks().begin(), req->ranks().end());
    for (int r : a.ranks) ranks[r].host = a.host;
    reply->set_agent_id(id);
    std::fprintf(stderr, "perftracker server: %s registered from %s (ranks %s)\n", id.c_str(),
                 a.host.c_str(), diagnose::RankList(a.ranks).c_str());
    return grpc::Status::OK;
  }

  grpc::Status ReportIterations(grpc::ServerContext* ctx, const v1::ReportIterationsRequest* req,
                                v1::ReportIterationsReply*) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::lock_guard lk(mu);
    for (const v1::IterationBatch& b : req->batches()) {
      RankState& r = ranks[b.rank()];
      int n = std::min(b.steps_size(), b.iteration_ms_size());
      for (int i = 0; i < n; ++i) {
        r.last_step = std::max(r.last_step, b.steps(i));
        r.last_ms = b.iteration_ms(i);
        r.sum_ms += b.iteration_ms(i);
        ++r.count;
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status WatchCommands(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                             grpc::ServerWriter<v1::Command>* writer) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::unique_lock lk(mu);
    if (!agents.count(req->agent_id()))
      return {grpc::StatusCode::NOT_FOUND, "unknown agent; register first"};
    // Polls for cancellation too: the sync API has no callback when a client goes away.
    while (!shutting_down && !ctx->IsCancelled()) {
      auto it = agents.find(req->agent_id());
      if (it == agents.end()) break;
      if (it->second.queue.empty()) {
        cv.wait_for(lk, std::chrono::milliseconds(200));
        continue;
      }
      v1::Command cmd = std::move(it->second.queue.front());
      it->second.queue.pop_front();
      lk.unlock();
      bool ok = writer->Write(cmd);
      lk.lock();
      if (!ok) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status UploadWindow(grpc::ServerContext* ctx, const v1::UploadWindowRequest* req,
                            v1::UploadWindowReply* reply) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::lock_guard lk(mu);
    auto it = windows.find(req->window_id());
    if (it == windows.end() || it->second->closed()) {
      reply->set_accepted(false);
      reply->set_message(fmt::format("window {} is not open", req->window_id()));
      return grpc::Status::OK;
    }
    RankUpload up;
    up.rank = req->rank();
    up.host = req->host();
    up.summary_bytes = req->summary();
    up.hardware.insert(req->hardware().values().begin(), req->hardware().values().end());
    up.nvml = req->hardware().nvml();
    std::string hw = HardwareJson(up.hardware, up.nvml);
    auto summary = it->second->AddUpload(std::move(up));
    if (!summary.ok()) {
      reply->set_accepted(false);
      reply->set_message(summary.status().message());
      return grpc::Status::OK;
    }
    RankSummaryRow row;
    row.window_id = req->window_id();
    row.rank = summary->rank;
    row.host = summary->host;
    row.summary_bytes = static_cast<int64_t>(req->summary().size());
    row.iterations = static_cast<int>(summary->iteration_ms.size());
    row.mean_iteration_ms = summary->MeanIterationMs();
    row.hardware_json = hw;
    if (::perftracker::Status st = store->AddRankSummary(row); !st.ok())
      std::fprintf(stderr, "perftracker server: %s\n", st.message().c_str());
    RankState& rs = ranks[summary->rank];
    if (rs.host.empty()) rs.host = summary->host;
    if (rs.count == 0 && !summary->iteration_ms.empty()) {
      rs.last_ms = summary->iteration_ms.back();
      rs.sum_ms = summary->MeanIterationMs() * summary->iteration_ms.size();
      rs.count = static_cast<int64_t>(summary->iteration_ms.size());
    }
    std::fprintf(stderr, "perftracker server: window %lld: rank %d from %s, summary %zu bytes\n",
                 static_cast<long long>(req->window_id()), summary->rank, row.host.c_str(),
                 req->summary().size());
    reply->set_accepted(true);
    if (it->second->Complete()) CloseWindowLocked(req->window_id());
    return grpc::Status::OK;
  }

  grpc::Status Trigger(grpc::ServerContext* ctx, const v1::TriggerRequest* req,
                       v1::TriggerReply* reply) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::lock_guard lk(mu);
    TriggerResult r =
        OpenWindowLocked(req->reason().empty() ? "trigger" : req->reason(), req->iterations());
    reply->set_window_id(r.window_id);
    reply->set_start_iteration(r.start_iteration);
    reply->set_already_open(r.already_open);
    return grpc::Status::OK;
  }

  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest*,
                      v1::StatusReply* reply) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::lock_guard lk(mu);
    reply->set_agents(static_cast<int>(agents.size()));
    for (const auto& [r, st] : ranks) {
      v1::RankStatus* rs = reply->add_ranks();
      rs->set_rank(r);
      rs->set_host(st.host);
      rs->set_last_step(st.last_step);
      rs->set_last_iteration_ms(st.last_ms);
      rs->set_mean_iteration_ms(st.count ? st.sum_ms / st.count : 0);
    }
    for (const auto& [id, w] : windows) {
      v1::WindowStatus* ws = reply->add_windows();
      ws->set_window_id(id);
      ws->set_state(w->closed() ? "done" : "open");
      ws->set_start_iteration(w->spec().start_iteration);
      ws->set_iterations(w->spec().iterations);
      for (int r : w->Reported()) ws->add_reported_ranks(r);
      for (int r : w->Missing()) ws->add_missing_ranks(r);
    }
    return grpc::Status::OK;
  }
};

CollectorServer::CollectorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CollectorServer::~CollectorServer() { Shutdown(); }

StatusOr<std::unique_ptr<CollectorServer>> CollectorServer::Start(const ServerOptions& options) {
  if (options.report_dir.empty()) return InvalidArgument("server: --report-dir is required");
  if (!IsLoopbackListen(options.listen) && options.token.empty())
    return InvalidArgument(
        fmt::format("server: listening on {} (not 127.0.0.1) needs a shared token (--token-file)",
                    options.listen));
  std::error_code ec;
  fs::create_directories(options.report_dir, ec);
  if (ec)
    return InvalidArgument(
        fmt::format("{}: cannot create folder: {}", options.report_dir, ec.message()));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  PT_ASSIGN_OR_RETURN(impl->store,
                      Store::Open((fs::path(options.report_dir) / "perftracker.db").string()));
  PT_ASSIGN_OR_RETURN(impl->job_id, impl->store->AddJob(options.report_dir));

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &impl->port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.RegisterService(impl.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0)
    return Unavailable(fmt::format("server: cannot listen on {}", options.listen));
  Impl* raw = impl.get();
  impl->timer = std::thread([raw] { raw->TimerLoop(); });
  return std::unique_ptr<CollectorServer>(new CollectorServer(std::move(impl)));
}

int CollectorServer::port() const { return impl_->port; }

TriggerResult CollectorServer::Trigger(const std::string& reason, int iterations) {
  std::lock_guard lk(impl_->mu);
  return impl_->OpenWindowLocked(reason, iterations);
}

void CollectorServer::Wait() {
  std::unique_lock lk(impl_->mu);
  impl_->cv.wait(lk, [&] { return impl_->shutting_down; });
}

void CollectorServer::Shutdown() {
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
    impl_->shutting_down = true;
    impl_->cv.notify_all();
  }
  // Streams leave their loops on shutting_down; the deadline bounds anything else in flight.
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (impl_->timer.joinable()) impl_->timer.join();
  std::lock_guard lk(impl_->mu);
  if (impl_->open_window) impl_->CloseWindowLocked(impl_->open_window);
  // The job ended: DIR/diagnosis.json always exists, even when no window ever completed.
  fs::path latest = fs::path(impl_->options.report_dir) / "diagnosis.json";
  if (!impl_->wrote_latest && !fs::exists(latest)) {
    diagnose::Diagnosis empty;
    empty.job.notes.push_back("no profiling window completed before the server stopped");
    if (::perftracker::Status st = WriteReport(empty, latest.string()); !st.ok())
      std::fprintf(stderr, "perftracker server: %s\n", st.message().c_str());
  }
}

}  // namespace perftracker::server
