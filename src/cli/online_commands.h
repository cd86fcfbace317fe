// The online subcommands' work once their flags are parsed (main.cc defines the flags):
// `perftracker server`, `agent`, `report`, `trigger` and `status`. Each returns the error to
// print as one line (exit code 1); the servers and agents they start stop on SIGINT/SIGTERM.
#ifndef PERFTRACKER_CLI_ONLINE_COMMANDS_H_
#define PERFTRACKER_CLI_ONLINE_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/credentials.h"
#include "base/status.h"
#include "base/window_defaults.h"
#include "diagnose/diagnose.h"

namespace perftracker::cli {

// The online path: one server, one agent per node; both stop on SIGINT/SIGTERM (a signal
// thread, so shutdown work does not run inside a signal handler).
struct OnlineFlags {
  diagnose::DiagnoseOptions diagnose;
  std::string baseline = "on";
  std::string profile_every;
  std::string listen = "127.0.0.1:50551";
  std::string server;  // status, trigger: else from --report-dir
  std::string report_dir;
  std::string token_file;
  bool no_token = false;  // server: --insecure-no-token (no token made: anyone may call it)
  std::string job_id;
  TlsFiles tls;
  std::string watch_dir;
  std::string metrics;    // server: Prometheus endpoint
  bool metrics_public = false;  // server: that endpoint may be off loopback (token required)
  std::string socket;     // agent: serve workers on this Unix socket
  std::string trace_dir;  // agent --socket: where the workers write their traces
  int keep_traces = 3;
  std::vector<int> ranks;
  double max_seconds = window_defaults::kMaxSeconds;
  double grace_seconds = 30;
  int iterations = window_defaults::kIterations;
};

// "90", "90s", "15m", "2h", "1.5h" as seconds; FLAG names the option in the error.
StatusOr<double> ParseDuration(const std::string& flag, const std::string& text);

// {node} in a path: this node's name (Slurm's, else the host's): `perftracker run` inside an
// allocation starts one agent per node with one command line.
std::string ForNode(std::string path);

// `perftracker server`: serves until SIGINT/SIGTERM.
Status RunServer(const OnlineFlags& f);

// `perftracker agent`: relays this node's workers (--socket or --watch) until SIGINT/SIGTERM.
Status RunAgent(OnlineFlags f);

// `perftracker report DIR`: the HTML page of a run from what its server stored: the diagnosis
// (DIR/diagnosis.json, or window N's), that window's summaries (the per-rank views), the
// windows and the run's iteration times (DIR/perftracker.db). Prints the page's path.
Status RunReport(const std::string& dir, std::string out, int64_t window);

// `perftracker trigger` (TRIGGER) or `perftracker status`: asks the server and prints its answer.
Status RunClient(const OnlineFlags& f, bool trigger);

}  // namespace perftracker::cli

#endif  // PERFTRACKER_CLI_ONLINE_COMMANDS_H_
