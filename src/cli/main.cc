// The `perftracker` command. Offline (cli/offline_commands.h): analyze (traces -> diagnosis),
// summarize (one trace -> a compact summary, the per-rank map step), diagnose (summaries ->
// diagnosis, the reduce step), diff (two runs), show, export-trace, export-fr, simulate,
// whatif. Online (cli/online_commands.h, cli/launcher.h): server, agent, run, trigger, status,
// report, whose flags this file defines. Every user error is one line naming the file and what
// is wrong, and a non-zero exit. main adds both and dispatches to the runner the command line
// chose.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/offline_commands.h"
#ifdef PT_ONLINE
#include "base/credentials.h"
#include "cli/launcher.h"
#include "cli/online_commands.h"
#endif

namespace pt = perftracker;

namespace {

using pt::cli::AddDiagnoseFlags;
using pt::cli::Fail;

#ifdef PT_ONLINE
constexpr bool kOnline = true;
#else
constexpr bool kOnline = false;
#endif


#ifdef PT_ONLINE

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

// Every online subcommand with the variables its flags are parsed into (see OfflineCommands).
struct OnlineCommands {
  pt::cli::OnlineFlags online;
  CLI::App* server = nullptr;
  CLI::App* agent = nullptr;
  pt::cli::RunOptions run_opts;
  std::string on_hang = "keep";
  std::string run_baseline = "on", run_every;
  CLI::App* run = nullptr;
  CLI::App* trigger = nullptr;
  CLI::App* status = nullptr;
  std::string report_dir_arg, report_out;
  int64_t report_window = 0;
  CLI::App* report = nullptr;
};

// server, agent: the online path's long-running parts.
void AddServerCommands(CLI::App& app, OnlineCommands* c) {
  pt::cli::OnlineFlags& online = c->online;
  CLI::App* server = c->server =
      app.add_subcommand("server", "the central collector of the online path");
  server->add_option("--listen", online.listen, "address:port (non-loopback needs --token-file)");
  server->add_option("--report-dir", online.report_dir, "where diagnoses and the database go")
      ->required();
  server->add_option("--token-file", online.token_file,
                     "shared token agents must present (default: one the server makes, in "
                     "REPORT_DIR/.perftracker/token)");
  server->add_flag("--insecure-no-token", online.no_token,
                   "no token at all (loopback only): any local process may register, trigger and "
                   "read status");
  server->add_option("--metrics", online.metrics,
                     "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464)");
  server->add_flag("--metrics-public", online.metrics_public,
                   "--metrics may listen off loopback; scrapers then send the server's token "
                   "(Authorization: Bearer, the --token-file's)");
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
      "Examples (its token: reports/.perftracker/token):\n"
      "  perftracker server --listen 127.0.0.1:50551 --report-dir reports/\n"
      "  perftracker server --listen 0.0.0.0:50551 --tls-cert server.crt --tls-key server.key "
      "--report-dir reports/");
  CLI::App* agent_cmd = c->agent =
      app.add_subcommand("agent", "the node agent: relays and uploads windows");
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
  agent_cmd->add_option("--trace-dir", online.trace_dir,
                        "with --socket: where workers write their windows' raw traces, a folder "
                        "nobody else may enter (default: traces beside the socket)");
  agent_cmd->add_option("--keep-traces", online.keep_traces,
                        "with --socket: windows whose raw traces stay in --trace-dir");
  agent_cmd->add_option("--watch", online.watch_dir,
                        "instead of --socket: a folder where workers' traces appear");
  agent_cmd->add_option("--ranks", online.ranks, "local ranks (when known)")->delimiter(',');
  agent_cmd->footer(
      "Examples (token: a copy of the server's; off loopback with TLS):\n"
      "  perftracker agent --server head:50551 --tls-ca ca.crt --token-file token --socket "
      "agent/agent.sock --ranks 0,1,2,3\n"
      "  perftracker agent --server head:50551 --tls-ca ca.crt --token-file token --watch traces/ "
      "--ranks 0,1,2,3");
}

// run: a training job with the online collector (cli/launcher.h).
void AddRunCommand(CLI::App& app, OnlineCommands* c) {
  pt::cli::RunOptions& run_opts = c->run_opts;
  CLI::App* run = c->run = app.add_subcommand(
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
  run->add_option("--listen", run_opts.listen,
                  "the embedded server's address, on loopback (default 127.0.0.1:0; ranks on other "
                  "hosts: --server)");
  run->add_option("--metrics", run_opts.metrics,
                  "serve Prometheus metrics of the embedded server at http://ADDR/metrics "
                  "(e.g. 127.0.0.1:9464)");
  run->add_flag("--metrics-public", run_opts.metrics_public,
                "--metrics may listen off loopback; scrapers then send the run's token "
                "(Authorization: Bearer, REPORT_DIR/.perftracker/token)");
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
  run->add_option("--on-hang", c->on_hang, "keep (default) or kill the job after a hang report")
      ->check(CLI::IsMember({"keep", "kill"}));
  run->add_option("--baseline-window", c->run_baseline,
                  "on (default): profile one window once every rank is past its warm-up, so a "
                  "problem present from the start is found")
      ->check(CLI::IsMember({"on", "off"}));
  run->add_option("--profile-every", c->run_every,
                  "also profile a window every DURATION (e.g. 15m)");
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
}

// trigger, status, report: asking a running server, and a run's report folder as a page.
void AddClientCommands(CLI::App& app, OnlineCommands* c) {
  pt::cli::OnlineFlags& online = c->online;
  CLI::App* trigger = c->trigger = app.add_subcommand("trigger", "profile every rank now");
  CLI::App* status = c->status = app.add_subcommand("status", "ranks, iteration times and windows");
  for (CLI::App* cmd : {trigger, status}) {
    cmd->add_option("--report-dir", online.report_dir,
                    "the report folder of a `perftracker run`: its server and token");
    cmd->add_option("--server", online.server, "server address:port");
    cmd->add_option("--token-file", online.token_file, "shared token file");
    AddTlsFlags(cmd, &online.tls, /*server=*/false);
  }
  trigger->footer(
      "Examples:\n  perftracker trigger --report-dir perftracker-report/   (a running "
      "`perftracker run`)\n  perftracker trigger --server head:50551 --tls-ca ca.crt --token-file "
      "token");
  status->footer(
      "Examples:\n  perftracker status --report-dir perftracker-report/\n"
      "  perftracker status --server 127.0.0.1:50551 --token-file reports/.perftracker/token");
  CLI::App* report_cmd = c->report = app.add_subcommand(
      "report", "the HTML page of a run's report folder (what its server stored)");
  report_cmd
      ->add_option("DIR", c->report_dir_arg,
                   "the report folder of a `perftracker run` or "
                   "`perftracker server`")
      ->required();
  report_cmd->add_option("-o,--output", c->report_out,
                         "the page to write (default DIR/report.html)");
  report_cmd->add_option("--window", c->report_window, "a window's page (default: the latest)");
  report_cmd->footer("Example:\n  perftracker report perftracker-report/ -o report.html");
}

int Exit(const pt::Status& status) { return status.ok() ? 0 : Fail(status); }

// `perftracker run`: the flags that need more than a copy, perftracker's own command line (for
// salloc) and Slurm's defaults, then the job.
int RunJob(OnlineCommands& c, int argc, char** argv) {
  pt::cli::RunOptions& run_opts = c.run_opts;
  run_opts.kill_on_hang = c.on_hang == "kill";
  run_opts.baseline_window = c.run_baseline == "on";
  if (!c.run_every.empty()) {
    auto every = pt::cli::ParseDuration("--profile-every", c.run_every);
    if (!every.ok()) return Fail(every.status());
    run_opts.profile_every_seconds = *every;
  }
  run_opts.argv.assign(argv, argv + argc);
  pt::cli::ApplySlurmDefaults(&run_opts, c.run->count("--nnodes") > 0,
                              c.run->count("--node-rank") > 0, c.run->count("--master-addr") > 0);
  return pt::cli::RunJob(run_opts);
}

// The exit code of the online subcommand that was given, or none.
std::optional<int> DispatchOnline(OnlineCommands& c, int argc, char** argv) {
  if (*c.report) return Exit(pt::cli::RunReport(c.report_dir_arg, c.report_out, c.report_window));
  if (*c.run) return RunJob(c, argc, argv);
  if (*c.server) return Exit(pt::cli::RunServer(c.online));
  if (*c.agent) return Exit(pt::cli::RunAgent(c.online));
  if (*c.trigger) return Exit(pt::cli::RunClient(c.online, true));
  if (*c.status) return Exit(pt::cli::RunClient(c.online, false));
  return std::nullopt;
}
#else
// An offline build keeps the online commands' names, so a user learns why they do nothing.
std::vector<CLI::App*> AddOfflineStubs(CLI::App& app) {
  std::vector<CLI::App*> offline_stubs;
  for (const char* name : {"run", "server", "agent", "trigger", "status", "report"}) {
    CLI::App* c = app.add_subcommand(name,
                                     "not in this build (configured with "
                                     "-DPERFTRACKER_ONLINE=OFF)");
    c->allow_extras();
    c->prefix_command();
    offline_stubs.push_back(c);
  }
  return offline_stubs;
}

// Exit code 2 for an online command of the offline build, or none.
std::optional<int> RefuseOfflineStubs(const std::vector<CLI::App*>& offline_stubs) {
  for (CLI::App* c : offline_stubs) {
    if (!*c) continue;
    std::fprintf(stderr,
                 "perftracker %s: this build has no online path (configured with "
                 "-DPERFTRACKER_ONLINE=OFF); run scripts/deps.sh and rebuild with the default "
                 "configuration (scripts/build.sh)\n",
                 c->get_name().c_str());
    return 2;
  }
  return std::nullopt;
}
#endif

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

  pt::cli::OfflineCommands offline;
  pt::cli::AddOfflineCommands(app, &offline);
#ifdef PT_ONLINE
  OnlineCommands online;
  AddServerCommands(app, &online);
  AddRunCommand(app, &online);
  AddClientCommands(app, &online);
#else
  std::vector<CLI::App*> offline_stubs = AddOfflineStubs(app);
#endif

  CLI11_PARSE(app, argc, argv);

#ifdef PT_ONLINE
  if (std::optional<int> rc = DispatchOnline(online, argc, argv)) return *rc;
#else
  if (std::optional<int> rc = RefuseOfflineStubs(offline_stubs)) return *rc;
#endif
  return pt::cli::DispatchOffline(offline);
}
