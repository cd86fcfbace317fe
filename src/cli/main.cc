// The `perftracker` command. Offline: analyze (traces -> diagnosis), summarize (one trace ->
// a compact summary, the per-rank map step), diagnose (summaries -> diagnosis, the reduce
// step), diff (two runs). Every user error is one line naming the file and what is wrong, and a
// non-zero exit.
#include <fmt/format.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/diagnose.h"
#include "pattern/job.h"
#include "pattern/steady_state.h"
#include "pattern/summarizer.h"
#include "pattern/summary_io.h"
#include "report/breakdown.h"
#include "report/diagnosis_reader.h"
#include "report/html.h"
#include "report/report.h"
#include "report/trace_export.h"
#include "sim/simulator.h"
#include "trace/reader.h"
#ifdef PT_ONLINE
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include "agent/agent.h"
#include "agent/socket_sink.h"
#include "base/net.h"
#include "base/window_defaults.h"
#include "cli/launcher.h"
#include "server/collector.h"
#include "server/store.h"
#endif

namespace pt = perftracker;

namespace {

#ifdef PT_ONLINE
constexpr bool kOnline = true;
#else
constexpr bool kOnline = false;
#endif

// "90", "90s", "15m", "2h", "1.5h" as seconds.
pt::StatusOr<double> ParseDuration(const std::string& flag, const std::string& text) {
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
    return pt::InvalidArgument(
        fmt::format("{}: '{}' is not a duration (e.g. 90s, 15m, 2h)", flag, text));
  return v * scale;
}

int Fail(const pt::Status& status) {
  std::fprintf(stderr, "perftracker: error: %s\n", status.message().c_str());
  return 1;
}

double PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

struct OutputFlags {
  std::string json_path;
  std::string html_path;
  bool quiet = false;
  bool stats = false;
  int threads = 0;
  pt::diagnose::DiagnoseOptions diagnose;
};

// The diagnosis numbers users tune (diagnose/policy.h has them all, with their reasons).
void AddDiagnoseFlags(CLI::App* cmd, pt::diagnose::DiagnoseOptions* o) {
  cmd->add_option("--min-impact", o->min_fraction,
                  "smallest share of an iteration a finding must cost (default 0.05)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--expected-busbw", o->expected_busbw_gbps,
                  "bus bandwidth (GB/s) large collectives should reach (default 50: NVLink; "
                  "lower it for PCIe or cross-node jobs)")
      ->check(CLI::PositiveNumber);
}

void AddOutputFlags(CLI::App* cmd, OutputFlags* flags) {
  cmd->add_option("--json", flags->json_path,
                  "write the diagnosis as JSON (perftracker.diagnosis/1)");
  cmd->add_option("--html", flags->html_path,
                  "write the report as one self-contained HTML page (charts, no outside request)");
  cmd->add_option("--threads", flags->threads, "parallel readers (default: all cores)");
  cmd->add_flag("-q,--quiet", flags->quiet, "no terminal report");
  cmd->add_flag("--stats", flags->stats, "print read throughput, time and peak memory to stderr");
  AddDiagnoseFlags(cmd, &flags->diagnose);
}

// An output file named like one of the inputs (`show --json TRACE ...` when `--json OUT TRACE`
// was meant) would be overwritten after it was read: refused before any work.
pt::Status OutputIsNotAnInput(const std::string& out, const std::vector<std::string>& inputs) {
  if (out.empty()) return pt::Status::Ok();
  std::error_code ec;
  for (const std::string& in : inputs) {
    if (std::filesystem::equivalent(out, in, ec) && !ec)
      return pt::InvalidArgument(
          fmt::format("{}: the output would overwrite an input; name another file", out));
  }
  return pt::Status::Ok();
}

// JOB: the patterns the diagnosis came from (the HTML report's per-rank views), or null.
int Emit(const pt::diagnose::Diagnosis& diagnosis, const OutputFlags& flags,
         const pt::pattern::CompactJob* job = nullptr, const std::string& title = "") {
  if (!flags.quiet) std::fputs(pt::report::RenderText(diagnosis).c_str(), stdout);
  if (!flags.json_path.empty()) {
    pt::Status st = pt::report::WriteJsonFile(diagnosis, flags.json_path);
    if (!st.ok()) return Fail(st);
  }
  if (!flags.html_path.empty()) {
    pt::report::HtmlInput in;
    in.title = title.empty() ? "perftracker report" : title;
    in.diagnosis = &diagnosis;
    in.job = job;
    in.generated = fmt::format("perftracker {}", PT_VERSION);
    pt::Status st = pt::report::WriteHtmlFile(in, flags.html_path);
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

// What a report calls the job: its input, shortened ("traces/job1 (8 files)").
std::string JobTitle(const std::vector<std::string>& paths) {
  if (paths.empty()) return "";
  std::string first = std::filesystem::path(paths[0]).lexically_normal().string();
  if (first.size() > 1 && first.back() == '/') first.pop_back();
  return paths.size() == 1 ? "perftracker: " + first
                           : fmt::format("perftracker: {} and {} more", first, paths.size() - 1);
}

void PrintStats(const pt::pattern::LoadStats& s, double seconds) {
  double mb = s.json_bytes / 1e6;
  std::fprintf(stderr,
               "perftracker: %zu files, %.1f MB of JSON, %llu events, %llu skipped, %.3f s, "
               "%.0f MB/s, peak RSS %.0f MB\n",
               s.files, mb, static_cast<unsigned long long>(s.events),
               static_cast<unsigned long long>(s.skipped), seconds,
               seconds > 0 ? mb / seconds : 0.0, PeakRssMb());
}

int RunAnalyze(const std::vector<std::string>& paths, const OutputFlags& flags) {
  if (pt::Status st = OutputIsNotAnInput(flags.json_path, paths); !st.ok()) return Fail(st);
  if (pt::Status st = OutputIsNotAnInput(flags.html_path, paths); !st.ok()) return Fail(st);
  auto start = std::chrono::steady_clock::now();
  pt::pattern::LoadStats stats;
  auto job = pt::pattern::LoadCompactJob(paths, {.threads = flags.threads}, &stats);
  if (!job.ok()) return Fail(job.status());
  pt::diagnose::Diagnosis diagnosis = pt::diagnose::Diagnose(*job, flags.diagnose);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int rc = Emit(diagnosis, flags, &*job, JobTitle(paths));
  if (flags.stats) PrintStats(stats, seconds);
  return rc;
}

// `perftracker export-trace`: the ranks' traces as one Chrome JSON trace (report/trace_export.h).
int RunExportTrace(const std::vector<std::string>& paths, const std::string& out,
                   std::string diagnosis_path) {
  namespace fs = std::filesystem;
  if (pt::Status st = OutputIsNotAnInput(out, paths); !st.ok()) return Fail(st);
  auto files = pt::trace::ExpandTracePaths(paths);
  if (!files.ok()) return Fail(files.status());
  // A run's window folder (REPORT_DIR/traces/window-<n>): that window's findings, if diagnosed.
  std::error_code ec;
  if (diagnosis_path.empty() && paths.size() == 1 && fs::is_directory(paths[0], ec)) {
    fs::path dir = fs::path(paths[0]).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    const std::string name = dir.filename().string();
    if (name.rfind("window-", 0) == 0) {
      fs::path d = dir.parent_path().parent_path() / "windows" / name.substr(7) / "diagnosis.json";
      if (fs::exists(d, ec)) diagnosis_path = d.string();
    }
  }
  std::optional<pt::diagnose::Diagnosis> diagnosis;
  if (!diagnosis_path.empty()) {
    auto d = pt::report::ReadDiagnosisFile(diagnosis_path);
    if (!d.ok()) return Fail(d.status());
    diagnosis = std::move(*d);
  }
  auto stats =
      pt::report::ExportTrace(*files, out, {.diagnosis = diagnosis ? &*diagnosis : nullptr});
  if (!stats.ok()) return Fail(stats.status());
  for (const std::string& n : stats->notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  std::printf(
      "%s: %d rank(s), %d file(s), %llu events%s (open it in ui.perfetto.dev)\n", out.c_str(),
      stats->ranks, stats->files, static_cast<unsigned long long>(stats->events),
      diagnosis ? fmt::format(", {} finding(s) marked", diagnosis->findings.size()).c_str() : "");
  return 0;
}

int RunSummarize(const std::vector<std::string>& traces, const std::string& out) {
  if (traces.size() == 1 && !std::filesystem::is_directory(traces[0])) {
    auto summary = pt::pattern::SummarizeTrace(traces[0]);
    if (!summary.ok()) return Fail(summary.status());
    pt::Status st = pt::pattern::WriteSummaryFile(*summary, out);
    return st.ok() ? 0 : Fail(st);
  }
  // Several traces: OUT is a folder that receives rank-<R>.summary per trace.
  auto job = pt::pattern::LoadJob(traces);
  if (!job.ok()) return Fail(job.status());
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec)
    return Fail(
        pt::InvalidArgument(fmt::format("{}: cannot create folder: {}", out, ec.message())));
  for (const auto& r : *job) {
    pt::Status st =
        pt::pattern::WriteSummaryFile(r, fmt::format("{}/rank-{}.summary", out, r.rank));
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

// Prints what a rank's behaviour patterns hold: the top functions by time per iteration.
int RunShow(const std::vector<std::string>& paths, int top, const std::string& json_path) {
  if (pt::Status st = OutputIsNotAnInput(json_path, paths); !st.ok()) return Fail(st);
  auto job = pt::pattern::LoadJob(paths);
  if (!job.ok()) return Fail(job.status());
  std::fputs(pt::report::BreakdownTable(*job).c_str(), stdout);
  if (!json_path.empty()) {
    pt::Status st = pt::report::WriteTextFile(json_path, pt::report::BreakdownJson(*job));
    if (!st.ok()) return Fail(st);
  }
  for (const pt::pattern::RankSummary& r : *job) {
    for (const std::string& note : pt::pattern::SteadyStateNotes(r))
      std::printf("note: rank %d: %s\n", r.rank, note.c_str());
  }
  std::printf("\n");
  for (const pt::pattern::RankSummary& r : *job) {
    std::printf("rank %d (%s): %zu iterations from %s, mean %.2f ms, %zu functions\n", r.rank,
                r.source.c_str(), r.iteration_ms.size(), r.iteration_source.c_str(),
                r.MeanIterationMs(), r.functions.size());
    if (r.has_gpu) {
      std::printf(
          "  gpu per iteration: busy %.2f ms, idle %.2f ms, compute %.2f, comm %.2f, "
          "memcpy %.2f, overlap %.2f, cpu-critical %.2f\n",
          r.gpu_busy_us / 1e3, r.gpu_idle_us / 1e3, r.compute_us / 1e3, r.comm_us / 1e3,
          r.memcpy_us / 1e3, r.comm_compute_overlap_us / 1e3, r.cpu_critical_us / 1e3);
    }
    std::printf("  %10s %10s %8s %7s %10s %-11s %s\n", "ms/iter", "self ms", "calls", "share",
                "p99 us", "class", "function");
    int shown = 0;
    for (const auto& f : r.functions) {
      if (shown++ >= top) break;
      std::printf("  %10.3f %10.3f %8.1f %6.1f%% %10.1f %-11s %s%s%s\n", f.per_iter_us / 1e3,
                  f.self_per_iter_us / 1e3, f.calls_per_iter, 100 * f.share, f.p99_us,
                  pt::pattern::FunctionClassName(f.fclass), f.name.c_str(),
                  f.stack.empty() ? "" : "  <- ", f.stack.c_str());
    }
  }
  return 0;
}

int RunDiff(const std::string& base, const std::string& test, const OutputFlags& flags) {
  if (pt::Status st = OutputIsNotAnInput(flags.json_path, {base, test}); !st.ok()) return Fail(st);
  auto b = pt::pattern::LoadJob({base}, {.threads = flags.threads});
  if (!b.ok()) return Fail(b.status());
  auto t = pt::pattern::LoadJob({test}, {.threads = flags.threads});
  if (!t.ok()) return Fail(t.status());
  return Emit(pt::diagnose::Diff(*b, *t, flags.diagnose), flags);
}

#ifdef PT_ONLINE
// The online path: one server, one agent per node; both stop on SIGINT/SIGTERM (a signal
// thread, so shutdown work does not run inside a signal handler).
struct OnlineFlags {
  pt::diagnose::DiagnoseOptions diagnose;
  std::string baseline = "on";
  std::string profile_every;
  std::string listen = "127.0.0.1:50551";
  std::string server;  // status, trigger: else from --report-dir
  std::string report_dir;
  std::string token_file;
  std::string job_id;
  pt::TlsFiles tls;
  std::string watch_dir;
  std::string metrics;    // server: Prometheus endpoint
  std::string socket;     // agent: serve workers on this Unix socket
  std::string trace_dir;  // agent --socket: where the workers write their traces
  int keep_traces = 3;
  std::vector<int> ranks;
  double max_seconds = pt::window_defaults::kMaxSeconds;
  double grace_seconds = 30;
  int iterations = pt::window_defaults::kIterations;
};

// --tls-cert, --tls-key, --tls-ca: what a server presents and checks, or what a client checks
// the server with and presents.
void AddTlsFlags(CLI::App* cmd, pt::TlsFiles* tls, bool server) {
  cmd->add_option("--tls-cert", tls->cert,
                  server ? "PEM certificate the server presents (needed off 127.0.0.1)"
                         : "PEM certificate this client presents (mutual TLS)");
  cmd->add_option("--tls-key", tls->key, "PEM private key of --tls-cert (mode 0600)");
  cmd->add_option("--tls-ca", tls->ca,
                  server ? "PEM CA: only clients with a certificate it signed are accepted"
                         : "PEM CA the server's certificate must be signed by");
}

pt::StatusOr<std::string> Token(const OnlineFlags& f) {
  if (f.token_file.empty()) return std::string();
  return pt::ReadTokenFile(f.token_file);
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

int RunServer(const OnlineFlags& f) {
  auto token = Token(f);
  if (!token.ok()) return Fail(token.status());
  pt::server::ServerOptions o;
  o.listen = f.listen;
  o.report_dir = f.report_dir;
  o.token = *token;
  o.tls = f.tls;
  o.max_seconds = f.max_seconds;
  o.upload_grace_seconds = f.grace_seconds;
  o.metrics_listen = f.metrics;
  o.schedule.default_iterations = f.iterations;
  o.diagnose = f.diagnose;
  o.schedule.baseline_window = f.baseline == "on";
  if (!f.profile_every.empty()) {
    auto every = ParseDuration("--profile-every", f.profile_every);
    if (!every.ok()) return Fail(every.status());
    o.schedule.profile_every_seconds = *every;
  }
  std::thread sig;
  auto server = [&]() -> pt::StatusOr<std::unique_ptr<pt::server::CollectorServer>> {
    return pt::server::CollectorServer::Start(o);
  };
  // Signals are blocked before gRPC starts its threads, so only the signal thread sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto s = server();
  if (!s.ok()) return Fail(s.status());
  pt::server::CollectorServer* raw = s->get();
  std::fprintf(stderr, "perftracker server: listening on %s (port %d)\n", f.listen.c_str(),
               raw->port());
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
  return 0;
}

// {node} in a path: this node's name (Slurm's, else the host's): `perftracker run` inside an
// allocation starts one agent per node with one command line.
std::string ForNode(std::string path) {
  const size_t at = path.find("{node}");
  if (at == std::string::npos) return path;
  return path.replace(at, 6, pt::NodeName());
}

int RunAgent(OnlineFlags f) {
  f.socket = ForNode(f.socket);
  f.trace_dir = ForNode(f.trace_dir);
  auto token = Token(f);
  if (!token.ok()) return Fail(token.status());
  if (f.watch_dir.empty() == f.socket.empty())
    return Fail(pt::InvalidArgument(
        "agent: say where the workers are: --socket PATH (they connect to it) or --watch DIR"));
  std::unique_ptr<pt::agent::AgentLocalSink> sink;
  if (!f.watch_dir.empty()) {
    if (!std::filesystem::is_directory(f.watch_dir))
      return Fail(pt::InvalidArgument(fmt::format("{}: --watch needs a folder", f.watch_dir)));
    sink = std::make_unique<pt::agent::FolderSink>(f.watch_dir);
  } else {
    // The node agent of `perftracker run --agent-socket PATH`: workers connect and are told
    // where to write their windows' traces.
    std::error_code ec;
    std::filesystem::create_directories(f.trace_dir, ec);
    if (ec)
      return Fail(pt::InvalidArgument(
          fmt::format("{}: cannot create the trace folder: {}", f.trace_dir, ec.message())));
    // The socket's folder, when it is missing, is made private: only this user's workers
    // connect (an existing folder is the caller's to set up).
    if (const std::filesystem::path parent = std::filesystem::path(f.socket).parent_path();
        !parent.empty() && !std::filesystem::exists(parent, ec)) {
      if (mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST)
        return Fail(pt::InvalidArgument(fmt::format("{}: cannot create the socket's folder: {}",
                                                    parent.string(), std::strerror(errno))));
    }
    pt::agent::SocketSink::Options so;
    so.retention.keep_windows = f.keep_traces;
    auto socket_sink = std::make_unique<pt::agent::SocketSink>(
        f.socket, std::filesystem::absolute(f.trace_dir).string(), so);
    if (pt::Status st = socket_sink->Start(); !st.ok()) return Fail(st);
    sink = std::move(socket_sink);
  }
  pt::agent::Agent agent({.server = f.server,
                          .token = *token,
                          .tls = f.tls,
                          .host = "",
                          .job_id = f.job_id,
                          .ranks = f.ranks,
                          .poll_seconds = 0.2},
                         std::move(sink));
  std::thread sig = SignalThread([&agent] { agent.Stop(); });
  pt::Status st = agent.Run();
  if (!st.ok()) {
    // Run returned by itself: wake the signal thread so it can be joined.
    kill(getpid(), SIGTERM);
    sig.join();
    return Fail(st);
  }
  sig.join();
  return 0;
}

// `perftracker report DIR`: the HTML page of a run from what its server stored: the diagnosis
// (DIR/diagnosis.json, or window N's), that window's summaries (the per-rank views), the
// windows and the run's iteration times (DIR/perftracker.db).
int RunReport(const std::string& dir, std::string out, int64_t window) {
  namespace fs = std::filesystem;
  const std::string db = (fs::path(dir) / "perftracker.db").string();
  std::error_code ec;
  if (!fs::exists(db, ec))
    return Fail(pt::InvalidArgument(
        fmt::format("{}: no perftracker.db here; give the report folder of a `perftracker run` "
                    "or `perftracker server`",
                    dir)));
  auto run = pt::server::Store::ReadRun(db, window);
  if (!run.ok()) return Fail(run.status());
  pt::StatusOr<pt::diagnose::Diagnosis> diagnosis = pt::InvalidArgument("");
  const std::string latest = (fs::path(dir) / "diagnosis.json").string();
  if (window == 0 && fs::exists(latest, ec)) {
    diagnosis = pt::report::ReadDiagnosisFile(latest);
  } else if (!run->diagnosis_json.empty()) {
    diagnosis = pt::report::ParseDiagnosisJson(run->diagnosis_json,
                                               fmt::format("{} (window {})", db, run->window_id));
  } else {
    return Fail(pt::InvalidArgument(fmt::format("{}: no diagnosed window yet", dir)));
  }
  if (!diagnosis.ok()) return Fail(diagnosis.status());
  pt::pattern::CompactJob job;
  int bad = 0;
  for (const std::string& bytes : run->summaries) {
    auto s = pt::pattern::ParseSummary(bytes, db);
    if (s.ok()) {
      job.Add(std::move(*s));
    } else {
      ++bad;
    }
  }
  job.SortByRank();
  if (bad) diagnosis->job.notes.push_back(fmt::format("{} stored summaries unreadable", bad));
  pt::report::HtmlInput in;
  in.title = window > 0 ? fmt::format("perftracker: window {} of {}", window, dir)
                        : fmt::format("perftracker: {}", dir);
  in.diagnosis = &*diagnosis;
  in.job = job.ranks().empty() ? nullptr : &job;
  in.series = std::move(run->series);
  in.windows = std::move(run->windows);
  in.generated = fmt::format("perftracker {}", PT_VERSION);
  if (out.empty()) out = (fs::path(dir) / "report.html").string();
  if (pt::Status st = pt::report::WriteHtmlFile(in, out); !st.ok()) return Fail(st);
  std::printf("%s\n", out.c_str());
  return 0;
}

int RunClient(const OnlineFlags& f, bool trigger) {
  std::string server = f.server;
  pt::StatusOr<std::string> token = std::string();
  if (!f.report_dir.empty()) {
    // A `perftracker run`'s own report folder says where its server is and holds its token.
    auto c = pt::ReadRunCredentials(f.report_dir);
    if (!c.ok()) return Fail(c.status());
    if (server.empty()) server = c->server;
    token = c->token;
  }
  if (!f.token_file.empty()) token = Token(f);
  if (!token.ok()) return Fail(token.status());
  if (server.empty())
    return Fail(pt::InvalidArgument(
        "say which server: --report-dir DIR of a `perftracker run`, or --server ADDR"));
  auto out = trigger ? pt::agent::TriggerNow(server, *token, f.tls, "user")
                     : pt::agent::ServerStatus(server, *token, f.tls);
  if (!out.ok()) return Fail(out.status());
  std::fputs(out->c_str(), stdout);
  return 0;
}
#endif

struct SimulateFlags {
  int workers = 0;
  std::string layout;
  int gpus_per_node = 8;
  int nodes_per_switch = 4;
  std::vector<std::string> faults;
  int iterations = 20;
  int layers = 16;
  bool traces = false;
  uint64_t seed = 0;
  std::string out;
  int threads = 2;
  double noise = 0.03;
};

int RunSimulate(const SimulateFlags& f) {
  pt::sim::Config config;
  config.workers = f.workers;
  if (f.workers < 1) return Fail(pt::InvalidArgument("--workers: must be at least 1"));
  auto layout = pt::sim::ParseLayout(f.layout, f.workers);
  if (!layout.ok()) return Fail(layout.status());
  config.layout = *layout;
  config.gpus_per_node = f.gpus_per_node;
  config.nodes_per_switch = f.nodes_per_switch;
  config.iterations = f.iterations;
  config.layers = f.layers;
  config.traces = f.traces;
  config.seed = f.seed;
  config.threads = f.threads;
  config.noise = f.noise;
  for (const std::string& text : f.faults) {
    auto fault = pt::sim::ParseFault(text);
    if (!fault.ok()) return Fail(fault.status());
    config.faults.push_back(*fault);
  }
  auto stats = pt::sim::Run(config, f.out);
  if (!stats.ok()) return Fail(stats.status());
  std::fprintf(stderr, "perftracker: simulated %d workers (%d written) to %s: %.1f MB, %.2f s\n",
               f.workers, stats->ranks_written, f.out.c_str(), stats->bytes / 1e6, stats->seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perftracker: finds why a PyTorch training job runs slower than it should"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("perftracker ") + PT_VERSION +
                                        (kOnline ? "" : " (offline build: no run/server/agent)"));
  app.footer(
      "Examples:\n"
      "  perftracker run --nproc 4 -- python train.py      profile a job while it runs\n"
      "  perftracker analyze traces/ --json diagnosis.json  diagnose profiler traces\n"
      "Run 'perftracker SUBCOMMAND --help' for a subcommand's options and an example.");

  OutputFlags analyze_flags;
  std::vector<std::string> analyze_paths;
  CLI::App* analyze = app.add_subcommand(
      "analyze", "diagnose a job from its profiler traces (one file per rank, or folders)");
  analyze->add_option("PATH", analyze_paths, "trace files or folders")->required();
  AddOutputFlags(analyze, &analyze_flags);
  analyze->footer(
      "Example:\n  perftracker analyze run1/rank-0.json.gz run1/rank-1.json.gz --json d.json\n"
      "  perftracker analyze run1/    (every trace in the folder, one per rank)");

  std::vector<std::string> summarize_paths;
  std::string summarize_out;
  CLI::App* summarize = app.add_subcommand(
      "summarize", "turn one rank's trace into a compact summary (the per-rank map step)");
  summarize->add_option("TRACE", summarize_paths, "trace file (or several, or a folder)")
      ->required();
  summarize
      ->add_option("-o,--output", summarize_out,
                   "summary file (a folder when several traces are given)")
      ->required();
  summarize->footer(
      "Example:\n  perftracker summarize traces/rank-3.json.gz -o summaries/rank-3.summary\n"
      "  perftracker summarize traces/ -o summaries/    (one rank-R.summary per trace)");

  OutputFlags diagnose_flags;
  std::vector<std::string> diagnose_paths;
  CLI::App* diagnose =
      app.add_subcommand("diagnose", "diagnose a job from summaries (or traces): the reduce step");
  diagnose->add_option("PATH", diagnose_paths, "summary files, traces or folders")->required();
  AddOutputFlags(diagnose, &diagnose_flags);
  diagnose->footer("Example:\n  perftracker diagnose summaries/ --json diagnosis.json");

  OutputFlags diff_flags;
  std::string diff_base, diff_test;
  CLI::App* diff = app.add_subcommand("diff", "compare two runs: which functions changed");
  diff->add_option("BASE", diff_base, "trace, summary or folder of the baseline run")->required();
  diff->add_option("TEST", diff_test, "trace, summary or folder of the run to compare")->required();
  AddOutputFlags(diff, &diff_flags);
  diff->footer("Example:\n  perftracker diff before/ after/ --json diff.json");

  std::vector<std::string> show_paths;
  int show_top = 25;
  CLI::App* show =
      app.add_subcommand("show", "print the behaviour patterns of traces or summaries");
  show->add_option("PATH", show_paths, "trace or summary files, or folders")->required();
  std::string show_json;
  show->add_option("--top", show_top, "functions per rank");
  show->add_option("--json", show_json,
                   "write the per-rank breakdown (schema perftracker.breakdown/1) to FILE");
  show->footer("Example:\n  perftracker show traces/rank-0.json.gz --top 10 --json breakdown.json");

  std::vector<std::string> export_paths;
  std::string export_out, export_diagnosis;
  CLI::App* export_trace = app.add_subcommand(
      "export-trace", "one Perfetto / Chrome trace of a window or a job: a process per rank");
  export_trace
      ->add_option("PATH", export_paths,
                   "a window's trace folder (REPORT_DIR/traces/window-<n>), trace files "
                   "or folders")
      ->required();
  export_trace->add_option("-o,--output", export_out, "the trace to write (.json or .json.gz)")
      ->required();
  export_trace->add_option("--diagnosis", export_diagnosis,
                           "mark this diagnosis's findings on their ranks (default for a window "
                           "folder: REPORT_DIR/windows/<n>/diagnosis.json)");
  export_trace->footer(
      "Example:\n  perftracker export-trace perftracker-report/traces/window-1 -o window-1.json.gz"
      "\n  (open it in ui.perfetto.dev)");

  SimulateFlags sim;
  CLI::App* simulate = app.add_subcommand(
      "simulate", "simulate a job's summaries (and small jobs' traces) with injected faults");
  simulate->add_option("--workers", sim.workers, "ranks in the job")->required();
  simulate->add_option("--layout", sim.layout, "tp=T,pp=P[,dp=D][,ep=E]")->required();
  simulate->add_option("--gpus-per-node", sim.gpus_per_node, "ranks per node (default 8)");
  simulate->add_option("--nodes-per-switch", sim.nodes_per_switch,
                       "nodes under one switch (default 4)");
  simulate->add_option(
      "--fault", sim.faults,
      "KIND@PLACE[,size=S][,every=K] (repeatable), e.g. slow-gpu@rank=5 or "
      "slow-gpu@rank=5,size=0.25,every=4 (a quarter of the default slowdown, every "
      "4th iteration)");
  simulate
      ->add_option("--noise", sim.noise,
                   "per-function, per-iteration noise as a coefficient of variation (default "
                   "0.03: a GPU job in steady state)")
      ->check(CLI::Range(0.0, 1.0));
  simulate->add_option("--iterations", sim.iterations, "iterations per rank (default 20)");
  simulate->add_option("--layers", sim.layers,
                       "transformer layers per pipeline stage (default 16: ~380 functions/rank)");
  simulate->add_flag("--traces", sim.traces, "also write Kineto JSON traces (up to 64 workers)");
  simulate->add_option("--seed", sim.seed, "random seed")->required();
  simulate->add_option("-o,--output", sim.out, "output folder")->required();
  simulate->add_option("--threads", sim.threads, "writer threads (default 2)");
  simulate->footer(
      "Example:\n  perftracker simulate --workers 1024 --layout tp=8,pp=4 "
      "--fault slow-gpu@rank=77 --seed 1 -o /tmp/sim\n"
      "  perftracker diagnose /tmp/sim/summaries");

#ifdef PT_ONLINE
  OnlineFlags online;
  CLI::App* server = app.add_subcommand("server", "the central collector of the online path");
  server->add_option("--listen", online.listen, "address:port (non-loopback needs --token-file)");
  server->add_option("--report-dir", online.report_dir, "where diagnoses and the database go")
      ->required();
  server->add_option("--token-file", online.token_file, "shared token agents must present");
  server->add_option("--metrics", online.metrics,
                     "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464)");
  AddTlsFlags(server, &online.tls, /*server=*/true);
  server->add_option("--max-seconds", online.max_seconds, "profiling time limit of a window");
  server->add_option("--grace-seconds", online.grace_seconds,
                     "how long after that missing ranks are waited for");
  server->add_option("--iterations", online.iterations, "iterations per window");
  AddDiagnoseFlags(server, &online.diagnose);
  server
      ->add_option("--baseline-window", online.baseline,
                   "on (default): profile one window once every rank is past its warm-up")
      ->check(CLI::IsMember({"on", "off"}));
  server->add_option("--profile-every", online.profile_every,
                     "also profile a window every DURATION (e.g. 15m)");
  server->footer(
      "Example:\n  perftracker server --listen 127.0.0.1:50551 --report-dir reports/\n"
      "  perftracker server --listen 0.0.0.0:50551 --token-file token --report-dir reports/");
  CLI::App* agent_cmd = app.add_subcommand("agent", "the node agent: relays and uploads windows");
  agent_cmd->add_option("--server", online.server, "server address:port")->required();
  agent_cmd->add_option("--token-file", online.token_file, "shared token file");
  agent_cmd->add_option("--job-id", online.job_id,
                        "the job these ranks belong to (the same on every node; a server "
                        "collects one job at a time)");
  AddTlsFlags(agent_cmd, &online.tls, /*server=*/false);
  agent_cmd->add_option("--socket", online.socket,
                        "serve this node's workers on this Unix socket (perftracker run "
                        "--agent-socket PATH, or PERFTRACKER_AGENT_SOCKET in their environment); "
                        "{node} is this node's name");
  agent_cmd
      ->add_option("--trace-dir", online.trace_dir,
                   "with --socket: where workers write their windows' raw traces")
      ->default_val("perftracker-traces");
  agent_cmd->add_option("--keep-traces", online.keep_traces,
                        "with --socket: windows whose raw traces stay in --trace-dir");
  agent_cmd->add_option("--watch", online.watch_dir,
                        "instead of --socket: a folder where workers' traces appear");
  agent_cmd->add_option("--ranks", online.ranks, "local ranks (when known)")->delimiter(',');
  agent_cmd->footer(
      "Example:\n  perftracker agent --server head:50551 --token-file token --socket "
      "/tmp/pt-agent.sock --ranks 0,1,2,3\n"
      "  perftracker agent --server head:50551 --token-file token --watch /tmp/traces "
      "--ranks 0,1,2,3");
  pt::cli::RunOptions run_opts;
  std::string on_hang = "keep";
  CLI::App* run = app.add_subcommand(
      "run", "run a training job with the online collector: perftracker run --nproc N -- CMD");
  run->add_option("--nproc", run_opts.nproc,
                  "ranks to start on this node (0: run CMD once; it starts the ranks, e.g. "
                  "torchrun)");
  run->add_option("--nnodes", run_opts.nnodes,
                  "nodes in the job (with --nproc; in a Slurm allocation: its node count)");
  run->add_option("--node-rank", run_opts.node_rank,
                  "this node's index (with --nproc; in a Slurm allocation: SLURM_NODEID)");
  run->add_option("--master-addr", run_opts.master_addr,
                  "MASTER_ADDR for the ranks (in a Slurm allocation: its first node)");
  run->add_option("--master-port", run_opts.master_port, "MASTER_PORT (default: a free port)");
  run->add_option("--report-dir", run_opts.report_dir,
                  "where diagnosis.json, windows/ and the traces go");
  run->add_option("--server", run_opts.server,
                  "a running perftracker server (default: one inside this launcher)");
  run->add_option("--listen", run_opts.listen, "the embedded server's address");
  run->add_option("--metrics", run_opts.metrics,
                  "serve Prometheus metrics of the embedded server at http://ADDR/metrics "
                  "(e.g. 127.0.0.1:9464)");
  run->add_option("--agent-socket", run_opts.agent_socket,
                  "this node's agent is already running (`perftracker agent --socket PATH`): the "
                  "ranks report to it and the launcher starts none");
  run->add_option("--token-file", run_opts.token_file, "shared token file");
  run->add_option("--job-id", run_opts.job_id,
                  "with --server: the job's name, the same on every node (default: "
                  "MASTER_ADDR:MASTER_PORT with --master-port, else one per run)");
  AddTlsFlags(run, &run_opts.tls, /*server=*/false);
  run->add_option("--iterations", run_opts.iterations, "iterations per profiling window");
  run->add_option("--max-seconds", run_opts.max_seconds, "a window's profiling time limit");
  run->add_option("--profile-at-iteration", run_opts.profile_at_iteration,
                  "profile a window once a rank completed iteration K");
  run->add_option("--on-hang", on_hang, "keep (default) or kill the job after a hang report")
      ->check(CLI::IsMember({"keep", "kill"}));
  std::string run_baseline = "on", run_every;
  run->add_option("--baseline-window", run_baseline,
                  "on (default): profile one window once every rank is past its warm-up, so a "
                  "problem present from the start is found")
      ->check(CLI::IsMember({"on", "off"}));
  run->add_option("--profile-every", run_every, "also profile a window every DURATION (e.g. 15m)");
  run->add_option("--keep-traces", run_opts.keep_traces,
                  "windows whose raw traces stay in REPORT_DIR/traces, newest first (default 3; "
                  "2 GiB at most); older ones are removed once summarized")
      ->check(CLI::Range(1, 1000000));
  AddDiagnoseFlags(run, &run_opts.diagnose);
  run->add_flag("-v,--verbose", run_opts.verbose,
                "print every agent and server line (always in REPORT_DIR/perftracker.log)");
  run->add_option("CMD", run_opts.command, "the training command, after --")->required();
  run->footer(
      "Examples:\n"
      "  perftracker run --nproc 4 -- python train.py --epochs 1\n"
      "  perftracker run --nproc 8 --report-dir out/ --on-hang kill -- python train.py\n"
      "  perftracker run -- torchrun --nproc-per-node 8 train.py   (the command starts the ranks)");
  CLI::App* trigger = app.add_subcommand("trigger", "profile every rank now");
  CLI::App* status = app.add_subcommand("status", "ranks, iteration times and windows");
  for (CLI::App* c : {trigger, status}) {
    c->add_option("--report-dir", online.report_dir,
                  "the report folder of a `perftracker run`: its server and token");
    c->add_option("--server", online.server, "server address:port");
    c->add_option("--token-file", online.token_file, "shared token file");
    AddTlsFlags(c, &online.tls, /*server=*/false);
  }
  trigger->footer(
      "Examples:\n  perftracker trigger --report-dir perftracker-report/   (a running "
      "`perftracker run`)\n  perftracker trigger --server head:50551 --token-file token");
  status->footer(
      "Examples:\n  perftracker status --report-dir perftracker-report/\n"
      "  perftracker status --server 127.0.0.1:50551");
  std::string report_dir_arg, report_out;
  int64_t report_window = 0;
  CLI::App* report_cmd = app.add_subcommand(
      "report", "the HTML page of a run's report folder (what its server stored)");
  report_cmd
      ->add_option("DIR", report_dir_arg,
                   "the report folder of a `perftracker run` or "
                   "`perftracker server`")
      ->required();
  report_cmd->add_option("-o,--output", report_out, "the page to write (default DIR/report.html)");
  report_cmd->add_option("--window", report_window, "a window's page (default: the latest)");
  report_cmd->footer("Example:\n  perftracker report perftracker-report/ -o report.html");
#else
  // An offline build keeps the online commands' names, so a user learns why they do nothing.
  std::vector<CLI::App*> offline_stubs;
  for (const char* name : {"run", "server", "agent", "trigger", "status", "report"}) {
    CLI::App* c = app.add_subcommand(name,
                                     "not in this build (configured with "
                                     "-DPERFTRACKER_ONLINE=OFF)");
    c->allow_extras();
    c->prefix_command();
    offline_stubs.push_back(c);
  }
#endif

  CLI11_PARSE(app, argc, argv);

#ifndef PT_ONLINE
  for (CLI::App* c : offline_stubs) {
    if (!*c) continue;
    std::fprintf(stderr,
                 "perftracker %s: this build has no online path (configured with "
                 "-DPERFTRACKER_ONLINE=OFF); run scripts/deps.sh and rebuild with the default "
                 "configuration (scripts/build.sh)\n",
                 c->get_name().c_str());
    return 2;
  }
#endif

#ifdef PT_ONLINE
  if (*report_cmd) return RunReport(report_dir_arg, report_out, report_window);
  if (*run) {
    run_opts.kill_on_hang = on_hang == "kill";
    run_opts.baseline_window = run_baseline == "on";
    if (!run_every.empty()) {
      auto every = ParseDuration("--profile-every", run_every);
      if (!every.ok()) return Fail(every.status());
      run_opts.profile_every_seconds = *every;
    }
    run_opts.argv.assign(argv, argv + argc);
    pt::cli::ApplySlurmDefaults(&run_opts, run->count("--nnodes") > 0,
                                run->count("--node-rank") > 0, run->count("--master-addr") > 0);
    return pt::cli::RunJob(run_opts);
  }
  if (*server) return RunServer(online);
  if (*agent_cmd) return RunAgent(online);
  if (*trigger) return RunClient(online, true);
  if (*status) return RunClient(online, false);
#endif

  if (*analyze) return RunAnalyze(analyze_paths, analyze_flags);
  if (*summarize) return RunSummarize(summarize_paths, summarize_out);
  if (*diagnose) return RunAnalyze(diagnose_paths, diagnose_flags);
  if (*diff) return RunDiff(diff_base, diff_test, diff_flags);
  if (*show) return RunShow(show_paths, show_top, show_json);
  if (*export_trace) return RunExportTrace(export_paths, export_out, export_diagnosis);
  if (*simulate) return RunSimulate(sim);
  return 0;
}
