#include "server/server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "base/credentials.h"
#include "base/log.h"
#include "base/net.h"
#include "base/private_dir.h"
#include "diagnose/finding_text.h"
#include "server/job_end.h"
#include "server/server_impl.h"

namespace perftracker::server {

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

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Shutdown(); }

StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.report_dir.empty()) return InvalidArgument("server: --report-dir is required");
  if (!IsLoopbackAddress(options.listen) && options.token.empty())
    return InvalidArgument(
        fmt::format("server: listening on {} (not 127.0.0.1) needs a shared token (--token-file)",
                    options.listen));
  // Off this machine the token and every summary cross the network: encrypted, or not at all.
  if (!IsLoopbackAddress(options.listen) && !options.tls.enabled())
    return InvalidArgument(
        fmt::format("server: listening on {} (not 127.0.0.1) needs TLS (--tls-cert and --tls-key; "
                    "--tls-ca to require client certificates)",
                    options.listen));
  PT_RETURN_IF_ERROR(MakeOwnFolder(options.report_dir, "report folder"));
  std::error_code ec;
  // Every agent holds a connection (a descriptor) for the whole job; the usual soft limit of
  // 1,024 descriptors would refuse agents long before 10,000. Raise it to the hard limit (no
  // privilege needed); a limit still too low shows as refused connections, not a crash.
  if (rlimit lim{}; getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->reports.emplace(options.report_dir);
  impl->sched.emplace(options.schedule, std::chrono::steady_clock::now());
  PT_ASSIGN_OR_RETURN(impl->store,
                      Store::Open((fs::path(options.report_dir) / "perftracker.db").string()));
  PT_ASSIGN_OR_RETURN(impl->job_id, impl->store->AddJob(options.report_dir));
  // A server restarted on the same folder numbers its windows after the last one there (its
  // database's, and its folders'): the reports of the windows before the restart stay.
  PT_ASSIGN_OR_RETURN(const int64_t last_window, impl->store->LastWindowId());
  impl->windows.UsedId(last_window);
  for (const auto& e : fs::directory_iterator(fs::path(options.report_dir) / "windows", ec)) {
    int64_t n = 0;
    const std::string name = e.path().filename().string();
    auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (err == std::errc() && end == name.data() + name.size()) impl->windows.UsedId(n);
  }

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (options.tls.enabled()) {
    PT_ASSIGN_OR_RETURN(TlsPem pem, ReadTls(options.tls, /*server=*/true));
    grpc::SslServerCredentialsOptions ssl(
        pem.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                       : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = pem.ca;
    ssl.pem_key_cert_pairs.push_back({pem.key, pem.cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, creds, &impl->port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  impl->service = std::make_unique<ServerService>(impl.get());
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0)
    return Unavailable(fmt::format("server: cannot listen on {}", options.listen));
  Impl* raw = impl.get();
  if (!options.metrics_listen.empty()) {
    PT_ASSIGN_OR_RETURN(impl->metrics, MetricsHttp::Start(options.metrics_listen,
                                                          [raw] {
                                                            std::lock_guard lk(raw->mu);
                                                            return raw->MetricsLocked();
                                                          },
                                                          {options.metrics_public, options.token}));
  }
  impl->timer = std::thread([raw] { raw->TimerLoop(); });
  impl->publishing.Start();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port; }
int Server::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : 0; }

std::string Server::MetricsText() const {
  std::lock_guard lk(impl_->mu);
  return impl_->MetricsLocked();
}

RunSummary Server::Summary() const {
  std::lock_guard lk(impl_->mu);
  RunSummary r;
  r.windows = impl_->counters.windows_diagnosed;
  r.hangs = impl_->counters.hangs_diagnosed;
  if (impl_->reports->latest().diagnosis) {
    r.has_latest = true;
    r.latest = *impl_->reports->latest().diagnosis;
  }
  if (impl_->attempts.attempts().size() > 1)
    for (const diagnose::AttemptInfo& a : impl_->attempts.Report()) r.attempts.push_back(a.summary);
  return r;
}

void Server::SetFirstFailure(const diagnose::RankExit& first) {
  std::lock_guard lk(impl_->mu);
  impl_->first_failure = first;
}

TriggerResult Server::Trigger(const std::string& reason, int iterations) {
  std::lock_guard lk(impl_->mu);
  return impl_->OpenWindowLocked(reason, iterations);
}

void Server::Wait() {
  std::unique_lock lk(impl_->mu);
  impl_->cv.wait(lk, [&] { return impl_->shutting_down; });
}

void Server::Shutdown() {
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
    impl_->shutting_down = true;
    impl_->cv.notify_all();
    for (auto& [id, a] : impl_->agents)
      if (a.stream != nullptr) a.stream->Close();
  }
  impl_->metrics.reset();  // its thread takes mu
  // Command streams were closed above; the deadline bounds the unary calls still in flight.
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (impl_->timer.joinable()) impl_->timer.join();
  // The job ended while a window was open: what arrived is diagnosed as every window is (the
  // publisher's path: the baseline comparison and the memory findings too); a window no rank
  // could report (training ended before it) is no finding about anyone, only a note. The
  // windows closed are published before the run's last page is written.
  std::optional<std::string> unprofiled;
  {
    std::lock_guard lk(impl_->mu);
    if (const int64_t open = impl_->sched->open_window()) {
      Window& w = *impl_->windows.Find(open);
      if (w.Reported().empty()) {
        unprofiled =
            fmt::format("window {} opened but the job ended before any rank reported it", open);
        w.Seal();
        impl_->sched->Closed(open, std::chrono::steady_clock::now());
      } else {
        impl_->publishing.CloseLater(open);
      }
    }
    impl_->publishing.StopLocked();
  }
  impl_->publishing.Join();
  // The ranks' dumps are read before the lock (the workers wrote their last ones at exit).
  CollectiveDumps dumps = ReadCollectiveDumps(CollectivesDir(impl_->options.report_dir));
  std::lock_guard lk(impl_->mu);
  // The job ended: a silence not yet reported was its exit, not a hang.
  if (impl_->sched->pending_hang() || impl_->hangs.collecting())
    log::Detail("server", "a hang trigger was pending when the job ended; not reported");
  impl_->sched->ForgetHang();
  impl_->hangs.Drop();
  // The job ended: DIR/diagnosis.json always exists: the latest diagnosis, or no findings,
  // with the whole run's iteration statistics per rank.
  LatestReport& latest = impl_->reports->latest();
  diagnose::Diagnosis final_d;
  if (latest.diagnosis) {
    final_d = *latest.diagnosis;
  } else {
    final_d.job.notes.push_back("no profiling window fired or completed during the run");
  }
  if (unprofiled) final_d.job.notes.push_back(*unprofiled);
  // Every attempt of the job: its ranks, processes, how far it got and how it ended.
  final_d.job.attempts = impl_->attempts.Report();
  if (impl_->attempts.dropped() > 0)
    final_d.job.notes.push_back(fmt::format("{} earlier attempt(s) not kept (the newest {} are)",
                                            impl_->attempts.dropped(), AttemptLog::kMaxAttempts));
  std::vector<double> means;
  for (const auto& [r, st] : impl_->ranks) {
    if (st.count == 0) continue;
    diagnose::IterationStats s = st.Stats();
    final_d.job.run_iterations[r] = s;
    if (!latest.diagnosis) {
      final_d.job.ranks.push_back(r);
      final_d.job.iteration_ms_per_rank[r] = s.mean_ms;
      final_d.job.iterations = std::max<int>(final_d.job.iterations, static_cast<int>(s.count));
      means.push_back(s.p50_ms);
    }
  }
  if (!means.empty()) {
    std::sort(means.begin(), means.end());
    final_d.job.iteration_ms_median = means[means.size() / 2];
    final_d.job.world_size =
        std::max<int>(final_d.job.world_size, impl_->ranks.rbegin()->first + 1);
  }
  // The run's memory as it ended: a growth found after the latest window, or whose window never
  // reported (a job that ended or was killed first), is the run's report's too.
  diagnose::SetRunMemory(impl_->MemoryFindingsLocked(),
                         MemoryTimelines(impl_->ranks, impl_->CurrentRanksLocked()), &final_d);
  diagnose::internal::SortFindings(&final_d.findings);
  if (latest.diagnosis || !final_d.findings.empty()) latest.diagnosis = final_d;
  // How the job stopped: the ranks' collectives and the first failure, before any window's
  // findings (a job that died is told so first).
  if (AddCollectiveFindings(std::move(dumps), impl_->first_failure, 0, &final_d) > 0)
    latest.diagnosis = final_d;
  if (::perftracker::Status st =
          WriteReport(final_d, (fs::path(impl_->options.report_dir) / "diagnosis.json").string());
      !st.ok())
    log::Error("server", "{}", st.message());
  // The run's page: the latest diagnosis with the whole run's iteration times and windows.
  if (::perftracker::Status st =
          WriteAtomically((fs::path(impl_->options.report_dir) / "report.html").string(),
                          impl_->RenderHtmlLocked(final_d, latest.job.get(), 0, latest.waits,
                                                  latest.waits.empty() ? 0 : latest.window_id));
      !st.ok())
    log::Error("server", "{}", st.message());
  if (::perftracker::Status st = impl_->store->ReplaceIterationSeries(RunSeriesOf(impl_->ranks));
      !st.ok())
    log::Error("server", "{}", st.message());
}

}  // namespace perftracker::server
