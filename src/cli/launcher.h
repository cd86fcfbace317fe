// `perftracker run`: launches an unmodified training job with the online collector. It starts
// the central server (unless --server names one) and this node's agent inside the launcher,
// spawns the ranks like torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) or runs the given launcher once (torchrun, srun), and puts the worker package on
// PYTHONPATH so sitecustomize turns the in-worker collector on in every Python process. The job's
// exit code is the launcher's; Ctrl-C stops every rank.
//
// The terminal is the user's: one line when the job starts, a live status line on a TTY, one line
// per window opened and its diagnosis, the closing summary, and errors. Everything else goes to
// DIR/perftracker.log (base/log.h), and to the terminal too with --verbose.
#ifndef PERFTRACKER_CLI_LAUNCHER_H_
#define PERFTRACKER_CLI_LAUNCHER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/credentials.h"
#include "base/window_defaults.h"
#include "diagnose/diagnose.h"

namespace perftracker::cli {

struct RunOptions {
  int nproc = 0;  // ranks to spawn on this node; 0: run COMMAND once, it launches the ranks
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port (single node)
  std::string report_dir = "perftracker-report";
  std::string server;                  // external server; empty: embedded
  std::string listen = "127.0.0.1:0";  // the embedded server's address
  // A node agent already running (`perftracker agent --socket PATH`): the ranks report to it,
  // the launcher runs none (empty: an agent inside the launcher). It outlives an agent restart:
  // workers reconnect.
  std::string agent_socket;
  std::string metrics;  // the embedded server's Prometheus endpoint (ServerOptions::metrics_listen)
  bool metrics_public = false;  // ServerOptions::metrics_public
  std::string token_file;
  int iterations = window_defaults::kIterations;      // per window
  double max_seconds = window_defaults::kMaxSeconds;  // per window
  int64_t profile_at_iteration = -1;
  TlsFiles tls;         // with --server off loopback: the CA to check it (and this node's cert/key)
  int keep_traces = 3;  // windows whose raw traces stay in REPORT_DIR/traces (newest first)
  std::string job_id;   // RegisterRequest.job_id; empty: see RunJob
  diagnose::DiagnoseOptions diagnose;  // for the embedded server's diagnoses
  bool baseline_window = true;         // server::ServerOptions::baseline_window
  double profile_every_seconds = 0;    // server::ServerOptions::profile_every_seconds
  bool kill_on_hang = false;
  double stop_grace_seconds = 10;  // after SIGINT / a failed rank, before SIGKILL
  // Every agent and server line on the terminal too (they always go to DIR/perftracker.log).
  bool verbose = false;
  std::vector<std::string> command;
  // perftracker's own command line (argv[0] first), to run it again inside a Slurm allocation.
  std::vector<std::string> argv;
};

// Inside a Slurm allocation with --nproc: --nnodes, --node-rank and --master-addr not given take
// Slurm's values (SLURM_JOB_NUM_NODES, SLURM_NODEID, the first node of SLURM_JOB_NODELIST), so
// `srun --ntasks-per-node=1 perftracker run --nproc 8 --server ADDR -- python train.py` places
// each node's ranks.
void ApplySlurmDefaults(RunOptions* options, bool nnodes_given, bool node_rank_given,
                        bool master_addr_given);

// Runs the job to its end and returns the exit code to leave with; launcher errors are printed
// as one line and give 1 (or 2 for a command that cannot start).
int RunJob(const RunOptions& options);

}  // namespace perftracker::cli

#endif  // PERFTRACKER_CLI_LAUNCHER_H_
