// `perftracker run` under Slurm (issue 16): recognising `run -- srun ...`, asking for an
// allocation with srun's own sizing options when there is none (salloc runs the launcher again
// inside it), and the job step that starts one node agent per node of the allocation.
// ApplySlurmDefaults (launcher.h) is defined here too. Owns no state: the caller spawns.
#ifndef PERFTRACKER_CLI_SLURM_H_
#define PERFTRACKER_CLI_SLURM_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "cli/launcher.h"

namespace perftracker::cli {

// COMMAND runs srun (by any path).
bool IsSrun(const std::vector<std::string>& command);

// This binary's path, to run it again (salloc, the agents step); "perftracker" if unknown.
std::string SelfExe();

// srun's options that size an allocation, as salloc takes them: "-N 2", "--ntasks=4", "-p pt".
std::vector<std::string> AllocationOptions(const std::vector<std::string>& srun);

// `run -- srun ...` outside an allocation, unless PERFTRACKER_NO_SALLOC is set: the launcher must
// first get one (RunInAllocation).
bool NeedsAllocation(const RunOptions& o);

// salloc's command line that runs perftracker (SELF) again, with the same arguments, inside an
// allocation sized by the srun command's options.
std::vector<std::string> SallocArgv(const RunOptions& o, const std::string& self);

// `run -- srun ...` outside an allocation: the agents must run on the job's nodes, which only an
// allocation names. The launcher asks for one with srun's own sizing options and runs itself
// inside it (salloc's exit code is the launcher's, so the job's). Returns only when salloc
// cannot run.
Status RunInAllocation(const RunOptions& o);

// Inside an allocation, `run -- srun ...` without --agent-socket: one agent per node as a job
// step of its own.
bool WantsAgentsStep(const RunOptions& o);

// The allocation's node count (SLURM_JOB_NUM_NODES, else SLURM_NNODES, else "1").
std::string SlurmNodeCount();

// The agents' socket: a folder per node under /tmp, {node} being each node's name, unique to the
// Slurm job and this launcher, with 64 random bits in its name: another user of a node cannot
// guess it and make the folder first (the agent makes it 0700 and refuses one that is not its
// user's own and private, base/private_dir.h).
std::string AgentsStepSocket(const std::string& slurm_job, pid_t launcher);

// 16 hex digits from the kernel's random source (getrandom, else /dev/urandom).
std::string RandomSuffix();

// What the agents step needs to know.
struct AgentsStep {
  std::string nodes;      // SlurmNodeCount()
  std::string self;       // SelfExe()
  std::string server;     // the server's address
  std::string socket;     // AgentsStepSocket()
  std::string trace_dir;  // REPORT_DIR/traces; each node writes to {node} under it
  std::string job_id;
  int keep_traces = 0;
  std::string token_file;  // empty: no token
  std::string tls_ca;      // empty: no TLS
};

// srun's command line for the agents step: one task per node, overlapping the job's own step,
// whose failure does not end the others.
std::vector<std::string> AgentsStepCommand(const AgentsStep& step);

}  // namespace perftracker::cli

#endif  // PERFTRACKER_CLI_SLURM_H_
