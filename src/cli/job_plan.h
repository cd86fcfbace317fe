// The decisions `perftracker run` makes before and after a job that need no process, socket or
// thread: the options' checks, the embedded server's and the local agent's options, the job's
// id, and the closing summary line. Owns nothing; each step is a function of its inputs (the
// job id falls back to a random one).
#ifndef PERFTRACKER_CLI_JOB_PLAN_H_
#define PERFTRACKER_CLI_JOB_PLAN_H_

#include <string>

#include "agent/agent.h"
#include "base/status.h"
#include "cli/job_output.h"
#include "cli/launcher.h"
#include "server/server.h"

namespace perftracker::cli {

// A command to run and a consistent node layout (--nproc >= 0, --node-rank in [0, --nnodes)).
// An error is a usage error: exit code 2.
Status CheckRunOptions(const RunOptions& o);

// --metrics belongs to the embedded server only; an error is a usage error: exit code 2.
Status CheckServerOptions(const RunOptions& o);

// The embedded server's options: REPORT_DIR (absolute) and TOKEN; on_hang is the caller's.
server::ServerOptions EmbeddedServerOptions(const RunOptions& o, const std::string& report_dir,
                                            const std::string& token);

// The job's name at the server: --job-id, else MASTER_ADDR:MASTER_PORT with --master-port
// (every node of a job must name it alike: the rendezvous address is what they share), else a
// random one per run.
std::string JobId(const RunOptions& o);

// This node's agent, reporting to SERVER with TOKEN; EMBEDDED: the server is the launcher's own,
// on loopback without TLS.
agent::AgentOptions LocalAgentOptions(const RunOptions& o, const std::string& server,
                                      const std::string& token, bool embedded);

// What the closing line says.
struct JobOutcome {
  int exit_code = 0;
  Clock::duration elapsed{};
  agent::AgentProgress progress;                 // this node's agent's last view (if any)
  const server::RunSummary* embedded = nullptr;  // the embedded server's; null: an outside one
  std::string report_dir;
  std::string log_path;
  std::string server;  // the server's address
};

// "job ended (exit 0) after 0:42, 120 iterations, last 84.3 ms; 2 window(s) diagnosed" and the
// latest diagnosis, the report and the log.
std::string ClosingSummary(const JobOutcome& outcome);

}  // namespace perftracker::cli

#endif  // PERFTRACKER_CLI_JOB_PLAN_H_
