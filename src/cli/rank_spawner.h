// How `perftracker run` starts its processes (the ranks, the Slurm agents step) and waits for
// them: fork + exec into process groups of their own, the environment each rank gets, the helper
// process that stops those groups if the launcher is killed, and the supervision loop that
// reaps the ranks, forwards signals and stops the others when one fails. Owns none of the
// processes' lifetimes beyond what the caller hands it.
#ifndef PERFTRACKER_CLI_RANK_SPAWNER_H_
#define PERFTRACKER_CLI_RANK_SPAWNER_H_

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/launcher.h"

namespace perftracker::cli {

struct Child {
  pid_t pid = 0;
  int rank = -1;
  bool done = false;
  int code = 0;
  int signal = 0;  // the signal that ended it (0: it exited)
};

// This process's environment with SET's variables over it, as exec takes it ("K=V"), sorted by
// name.
std::vector<std::string> ChildEnv(const std::map<std::string, std::string>& set);

// What every process of the job gets on top of the launcher's environment: the agent's socket,
// the worker package first on PYTHONPATH, the folder for the ranks' rings of collectives
// (PERFTRACKER_COLLECTIVES_DIR; none when empty), the folder for what a rank's memory was when it
// ran out (PERFTRACKER_MEMORY_DIR: the CUDA allocator's snapshot; none when empty) and, when the
// ranks write through the relay, unbuffered Python output (Python buffers a pipe).
std::map<std::string, std::string> WorkerEnv(const std::string& agent_socket,
                                             const std::string& pydir, bool relay_output,
                                             const std::string& collectives_dir = "",
                                             const std::string& memory_dir = "");

// The environment of local rank LOCAL of this node, as torchrun sets it, over COMMON; PORT is
// the rendezvous port.
std::map<std::string, std::string> RankEnv(const std::map<std::string, std::string>& common,
                                           const RunOptions& o, int local, int port);

// fork + exec in a process group of its own, so that a stop reaches the rank's own children
// (DataLoader workers) and a terminal's Ctrl-C reaches the launcher first.
// OUT and ERR (when not -1) become the child's stdout and stderr.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const sigset_t& old_mask, std::pair<int, int> out_err = {-1, -1});

// SIG to every child's whole process group; harmless for a group that is gone.
void SignalAll(std::vector<Child>& children, int sig);

// A wait status as a shell's exit code: the code, or 128 + the signal.
int ExitCode(int status);

// A helper process that outlives the launcher to stop the ranks' process groups. The
// parent-death signal reaches only the ranks themselves; what they started (a shell's children,
// helpers) is in their process group, and only someone alive can signal a group. The launcher
// tells the helper each group it starts and each it has waited for, through a pipe; when the
// pipe closes without the launcher's "done" (it was killed), the helper sends SIGTERM to every
// group still listed, then SIGKILL after a grace period. Only async-signal-safe calls run in
// the helper, which never allocates.
class GroupReaper {
 public:
  static constexpr int kMaxGroups = 4096;
  static constexpr int kGraceSeconds = 5;

  // Forks the helper; false (and the launcher goes on without it) if that fails.
  bool Start();
  void Add(pid_t group) { Send(group); }
  void Remove(pid_t group) { Send(-group); }
  // The launcher ends normally: the helper exits without signalling anyone.
  void Done();
  pid_t pid() const { return pid_; }

 private:
  void Send(int32_t v);
  [[noreturn]] static void Serve(int fd);

  int fd_ = -1;
  pid_t pid_ = -1;
};

// How the ranks' supervision ended.
// After the first rank fails, the others are stopped this long after unless they end first: a
// backend's error (gloo's connection reset) ends them in milliseconds, through their exit hook,
// which leaves their collectives for the diagnosis (a SIGTERM kills Python without it). A rank
// that hangs instead (NCCL waits) costs the job's end these seconds.
inline constexpr double kFailureGraceSeconds = 3.0;

struct JobEnd {
  int first_failure = 0;   // the exit code of the first rank that failed (0: none)
  int first_failed = -1;   // that child's index in the children
  // Every child that failed before the others were stopped (the first, and those that ended on
  // their own within kFailureGraceSeconds), in the order they were reaped: which of them failed
  // for its own reason is for their error output to say (diagnose::FirstToBlame).
  std::vector<int> failed_unstopped = {};
  bool hang_stop = false;  // stopped for a hang report (--on-hang kill)
  int interrupted = 0;     // the signal that stopped the job (0: none)
};

// Waits for every child: SIGINT/SIGTERM/SIGHUP (from SIGNALS, blocked in the caller) stop the
// job, a second one without grace; a rank that fails or HANG_KILL stop the others; after
// STOP_GRACE_SECONDS what is left is killed. Each reaped child leaves REAPER's list.
JobEnd SuperviseRanks(std::vector<Child>& children, const sigset_t& signals, GroupReaper& reaper,
                      const std::atomic<bool>& hang_kill, double stop_grace_seconds);

// The child to name as the job's first failure: of END's children that failed before the stop,
// the first whose error output (TAIL_OF a child's index) is its own (diagnose::FirstToBlame), not
// the peer that lost its connection to it and was reaped first; END.first_failed where only one
// (or none) failed.
int BlamedChild(const JobEnd& end, const std::vector<Child>& children,
                const std::function<std::vector<std::string>(int)>& tail_of);

// The exit code the launcher leaves with: a hang stop's failure (else 1), the shell's code for
// the signal that stopped the job, the first failure, else the first non-zero child.
int JobExitCode(const JobEnd& end, const std::vector<Child>& children);

}  // namespace perftracker::cli

#endif  // PERFTRACKER_CLI_RANK_SPAWNER_H_
