#include "cli/online_commands.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "agent/agent.h"
#include "agent/socket_sink.h"
#include "base/net.h"
#include "base/private_dir.h"
#include "base/terminal.h"
#include "pattern/compact_job.h"
#include "pattern/summary_io.h"
#include "report/diagnosis_reader.h"
#include "report/html.h"
#include "server/server.h"
#include "server/store.h"

namespace perftracker::cli {
namespace {

StatusOr<std::string> Token(const OnlineFlags& f) {
  if (f.token_file.empty()) return std::string();
  return ReadTokenFile(f.token_file);
}

// Blocks SIGINT/SIGTERM in every thread and returns a thread that calls STOP on the first one.
template <typename F>
std::thread SignalThread(F stop) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return std::thread([set, stop] {
    int sig = 0;
    sigwait(&set, &sig);
    stop();
  });
}

}  // namespace

StatusOr<double> ParseDuration(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (used == 0 || scale < 0 || !(v >= 0) || v * scale > 1e9)
    return InvalidArgument(
        fmt::format("{}: '{}' is not a duration (e.g. 90s, 15m, 2h)", flag, text));
  return v * scale;
}

std::string ForNode(std::string path) {
  const size_t at = path.find("{node}");
  if (at == std::string::npos) return path;
  return path.replace(at, 6, NodeName());
}

// The token a standalone server wants: --token-file's, none with --insecure-no-token, else its
// own, kept in REPORT_DIR/.perftracker/token (made once, the same after a restart, so agents
// holding the file reconnect).
StatusOr<std::string> ServerToken(const OnlineFlags& f) {
  if (!f.token_file.empty()) return Token(f);
  if (f.no_token) return std::string();
  PT_RETURN_IF_ERROR(MakeOwnFolder(f.report_dir, "report folder"));
  auto earlier = ReadRunCredentials(f.report_dir);
  if (earlier.ok()) return earlier->token;
  return NewToken();
}

Status RunServer(const OnlineFlags& f) {
  UsePrivateUmask();  // its database, log and reports are the user's alone
  if (f.no_token && !f.token_file.empty())
    return InvalidArgument("server: --insecure-no-token and --token-file contradict each other");
  auto token = ServerToken(f);
  if (!token.ok()) return token.status();
  server::ServerOptions o;
  o.listen = f.listen;
  o.report_dir = f.report_dir;
  o.token = *token;
  o.tls = f.tls;
  o.max_seconds = f.max_seconds;
  o.upload_grace_seconds = f.grace_seconds;
  o.metrics_listen = f.metrics;
  o.metrics_public = f.metrics_public;
  o.schedule.default_iterations = f.iterations;
  o.diagnose = f.diagnose;
  o.schedule.baseline_window = f.baseline == "on";
  if (!f.profile_every.empty()) {
    auto every = ParseDuration("--profile-every", f.profile_every);
    if (!every.ok()) return every.status();
    o.schedule.profile_every_seconds = *every;
  }
  std::thread sig;
  auto server = [&]() -> StatusOr<std::unique_ptr<server::Server>> {
    return server::Server::Start(o);
  };
  // Signals are blocked before gRPC starts its threads, so only the signal thread sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto s = server();
  if (!s.ok()) return s.status();
  server::Server* raw = s->get();
  std::fprintf(stderr, "perftracker server: listening on %s (port %d)\n", f.listen.c_str(),
               raw->port());
  if (!o.token.empty()) {
    const std::string host = f.listen.substr(0, f.listen.rfind(':'));
    if (Status st =
            WriteRunCredentials(f.report_dir, {fmt::format("{}:{}", host, raw->port()), o.token});
        !st.ok())
      return st;
    std::fprintf(stderr,
                 "perftracker server: callers need the token in %s/token (agents and run "
                 "--server: --token-file that file; status and trigger: --report-dir %s)\n",
                 CredentialsDir(f.report_dir).c_str(), f.report_dir.c_str());
  } else {
    std::fprintf(stderr,
                 "perftracker server: no token (--insecure-no-token): any local process may "
                 "register, trigger and read status\n");
  }
  if (raw->metrics_port())
    std::fprintf(stderr, "perftracker server: metrics at http://%s:%d/metrics\n",
                 f.metrics.substr(0, f.metrics.rfind(':')).c_str(), raw->metrics_port());
  sig = std::thread([set, raw] {
    int signo = 0;
    sigwait(&set, &signo);
    raw->Shutdown();
  });
  raw->Wait();
  sig.join();
  s->reset();
  return Status::Ok();
}

Status RunAgent(OnlineFlags f) {
  UsePrivateUmask();  // the workers' raw traces and the agent's summaries are the user's alone
  f.socket = ForNode(f.socket);
  f.trace_dir = ForNode(f.trace_dir);
  auto token = Token(f);
  if (!token.ok()) return token.status();
  if (f.watch_dir.empty() == f.socket.empty())
    return InvalidArgument(
        "agent: say where the workers are: --socket PATH (they connect to it) or --watch DIR");
  std::unique_ptr<agent::AgentLocalSink> sink;
  if (!f.watch_dir.empty()) {
    if (!std::filesystem::is_directory(f.watch_dir))
      return InvalidArgument(fmt::format("{}: --watch needs a folder", f.watch_dir));
    // Whatever lands in it is read and uploaded as this user's traces: nobody else may write
    // (or plant a link or a FIFO) there.
    if (Status st = MakePrivateDir(f.watch_dir); !st.ok())
      return InvalidArgument(fmt::format("agent --watch: {}", st.message()));
    sink = std::make_unique<agent::FolderSink>(f.watch_dir);
  } else {
    // The node agent of `perftracker run --agent-socket PATH`: workers connect and are told
    // where to write their windows' traces.
    // Not relative to wherever the agent was started: beside its socket, in the socket's
    // private folder.
    if (f.trace_dir.empty())
      f.trace_dir = (std::filesystem::path(f.socket).parent_path() / "traces").string();
    // SocketSink::Start makes the socket's folder and the trace folder private, or refuses ones
    // that are not (base/private_dir.h): whoever may write there could put their own socket in
    // its place, or plant links and traces.
    agent::SocketSink::Options so;
    so.retention.keep_windows = f.keep_traces;
    auto socket_sink = std::make_unique<agent::SocketSink>(
        f.socket, std::filesystem::absolute(f.trace_dir).string(), so);
    if (Status st = socket_sink->Start(); !st.ok()) return st;
    sink = std::move(socket_sink);
  }
  agent::Agent agent({.server = f.server,
                      .token = *token,
                      .tls = f.tls,
                      .host = "",
                      .job_id = f.job_id,
                      .ranks = f.ranks,
                      .poll_seconds = 0.2},
                     std::move(sink));
  std::thread sig = SignalThread([&agent] { agent.Stop(); });
  Status st = agent.Run();
  if (!st.ok()) {
    // Run returned by itself: wake the signal thread so it can be joined.
    kill(getpid(), SIGTERM);
    sig.join();
    return st;
  }
  sig.join();
  return Status::Ok();
}

Status RunReport(const std::string& dir, std::string out, int64_t window) {
  namespace fs = std::filesystem;
  const std::string db = (fs::path(dir) / "perftracker.db").string();
  std::error_code ec;
  if (!fs::exists(db, ec))
    return InvalidArgument(
        fmt::format("{}: no perftracker.db here; give the report folder of a `perftracker run` "
                    "or `perftracker server`",
                    dir));
  auto run = server::Store::ReadRun(db, window);
  if (!run.ok()) return run.status();
  StatusOr<diagnose::Diagnosis> diagnosis = InvalidArgument("");
  const std::string latest = (fs::path(dir) / "diagnosis.json").string();
  if (window == 0 && fs::exists(latest, ec)) {
    diagnosis = report::ReadDiagnosisFile(latest);
  } else if (!run->diagnosis_json.empty()) {
    diagnosis = report::ParseDiagnosisJson(run->diagnosis_json,
                                           fmt::format("{} (window {})", db, run->window_id));
  } else {
    return InvalidArgument(fmt::format("{}: no diagnosed window yet", dir));
  }
  if (!diagnosis.ok()) return diagnosis.status();
  pattern::CompactJob job;
  int bad = 0;
  for (const std::string& bytes : run->summaries) {
    auto s = pattern::ParseSummary(bytes, db);
    if (s.ok()) {
      job.Add(std::move(*s));
    } else {
      ++bad;
    }
  }
  job.SortByRank();
  if (bad) diagnosis->job.notes.push_back(fmt::format("{} stored summaries unreadable", bad));
  report::HtmlInput in;
  in.title = window > 0 ? fmt::format("perftracker: window {} of {}", window, dir)
                        : fmt::format("perftracker: {}", dir);
  in.diagnosis = &*diagnosis;
  in.job = job.ranks().empty() ? nullptr : &job;
  in.series = std::move(run->series);
  in.windows = std::move(run->windows);
  in.generated = fmt::format("perftracker {}", PT_VERSION);
  if (out.empty()) out = (fs::path(dir) / "report.html").string();
  if (Status st = report::WriteHtmlFile(in, out); !st.ok()) return st;
  std::printf("%s\n", out.c_str());
  return Status::Ok();
}

Status RunClient(const OnlineFlags& f, bool trigger) {
  std::string server = f.server;
  StatusOr<std::string> token = std::string();
  if (!f.report_dir.empty()) {
    // A `perftracker run`'s own report folder says where its server is and holds its token.
    auto c = ReadRunCredentials(f.report_dir);
    if (!c.ok()) return c.status();
    if (server.empty()) server = c->server;
    token = c->token;
  }
  if (!f.token_file.empty()) token = Token(f);
  if (!token.ok()) return token.status();
  if (server.empty())
    return InvalidArgument(
        "say which server: --report-dir DIR of a `perftracker run`, or --server ADDR");
  auto out = trigger ? agent::TriggerNow(server, *token, f.tls, "user")
                     : agent::ServerStatus(server, *token, f.tls);
  if (!out.ok()) return out.status();
  PutSafe(*out, stdout);
  return Status::Ok();
}

}  // namespace perftracker::cli
