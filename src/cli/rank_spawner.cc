#include "cli/rank_spawner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "base/credentials.h"
#include "base/log.h"
#include "diagnose/rank_crash.h"

extern char** environ;

namespace perftracker::cli {
namespace {

using Clock = std::chrono::steady_clock;

// How long one wait for a signal lasts before the loop looks at the children and the hang flag
// again.
constexpr long kSuperviseTickNs = 200'000'000;

}  // namespace

std::vector<std::string> ChildEnv(const std::map<std::string, std::string>& set) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : set) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::map<std::string, std::string> WorkerEnv(const std::string& agent_socket,
                                             const std::string& pydir, bool relay_output,
                                             const std::string& collectives_dir,
                                             const std::string& memory_dir) {
  std::map<std::string, std::string> common = {
      {"PERFTRACKER_AGENT_SOCKET", agent_socket},
  };
  if (!collectives_dir.empty()) {
    common["PERFTRACKER_COLLECTIVES_DIR"] = collectives_dir;
    // torch's own Flight Recorder dumps (NCCL's on a watchdog timeout) land there too, named
    // rank_<R> as torch names them, unless the job chose a place.
    if (std::getenv("TORCH_FR_DUMP_TEMP_FILE") == nullptr)
      common["TORCH_FR_DUMP_TEMP_FILE"] = collectives_dir + "/rank_";
  }
  if (!memory_dir.empty()) common["PERFTRACKER_MEMORY_DIR"] = memory_dir;
  const char* pp = std::getenv("PYTHONPATH");
  common["PYTHONPATH"] = pp && *pp ? pydir + ":" + pp : pydir;
  // (insert_or_assign: GCC 12's -Wrestrict misfires on operator= of a short literal here.)
  if (relay_output && std::getenv("PYTHONUNBUFFERED") == nullptr)
    common.insert_or_assign("PYTHONUNBUFFERED", std::string(1, '1'));
  return common;
}

std::map<std::string, std::string> RankEnv(const std::map<std::string, std::string>& common,
                                           const RunOptions& o, int local, int port) {
  auto env = common;
  int rank = o.node_rank * o.nproc + local;
  env["RANK"] = std::to_string(rank);
  env["LOCAL_RANK"] = std::to_string(local);
  env["WORLD_SIZE"] = std::to_string(o.nproc * o.nnodes);
  env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
  env["GROUP_RANK"] = std::to_string(o.node_rank);
  env["MASTER_ADDR"] = o.master_addr;
  env["MASTER_PORT"] = std::to_string(port);
  return env;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const sigset_t& old_mask, std::pair<int, int> out_err) {
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  const pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // The rank dies with the launcher, however the launcher ends (SIGKILL, OOM): on a GPU
    // cluster an orphaned rank holds its GPU for hours. If the launcher is already gone,
    // nothing would deliver the signal: exit now.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(137);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    umask(UserUmask());  // the launcher's own files are private; the job's are its own affair
    if (out_err.first >= 0) dup2(out_err.first, STDOUT_FILENO);
    if (out_err.second >= 0) dup2(out_err.second, STDERR_FILENO);
    environ = e.data();
    execvp(a[0], a.data());
    // After fork only async-signal-safe calls: the message is formatted by hand.
    const char* why = std::strerror(errno);
    const char* parts[] = {"perftracker: error: cannot run '", a[0], "': ", why, "\n"};
    for (const char* p : parts) (void)!write(STDERR_FILENO, p, std::strlen(p));
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);  // both sides: no race with the first signal
  return pid;
}

void SignalAll(std::vector<Child>& children, int sig) {
  // The whole group of each rank still running. A rank already waited for is left alone: once
  // its group is empty its number may be another process's, and its group someone else's.
  for (const Child& c : children)
    if (c.pid > 0 && !c.done) kill(-c.pid, sig);
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool GroupReaper::Start() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  if (pid == 0) {
    close(fds[1]);
    Serve(fds[0]);  // never returns
  }
  close(fds[0]);
  fd_ = fds[1];
  pid_ = pid;
  return true;
}

void GroupReaper::Done() {
  if (fd_ < 0) return;
  Send(0);
  close(fd_);
  fd_ = -1;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void GroupReaper::Send(int32_t v) {
  if (fd_ < 0) return;
  ssize_t n;
  do {
    n = write(fd_, &v, sizeof(v));
  } while (n < 0 && errno == EINTR);
}

void GroupReaper::Serve(int fd) {
  // Its own process group, deaf to the terminal's signals: a Ctrl-C to the launcher's group
  // must not take the helper with it.
  setpgid(0, 0);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  static pid_t groups[kMaxGroups];
  int n = 0;
  for (;;) {
    int32_t v = 0;
    ssize_t r = read(fd, &v, sizeof(v));
    if (r < 0 && errno == EINTR) continue;
    if (r != static_cast<ssize_t>(sizeof(v))) break;  // the launcher is gone
    if (v == 0) _exit(0);
    if (v > 0) {
      if (n < kMaxGroups) groups[n++] = v;
    } else {
      for (int i = 0; i < n; ++i)
        if (groups[i] == -v) groups[i] = groups[--n];
    }
  }
  for (int i = 0; i < n; ++i) kill(-groups[i], SIGTERM);
  for (int t = 0; t < kGraceSeconds * 10; ++t) {
    bool any = false;
    for (int i = 0; i < n; ++i) any |= kill(-groups[i], 0) == 0;
    if (!any) _exit(0);
    timespec ts{0, 100'000'000};
    nanosleep(&ts, nullptr);
  }
  for (int i = 0; i < n; ++i) kill(-groups[i], SIGKILL);
  _exit(0);
}

JobEnd SuperviseRanks(std::vector<Child>& children, const sigset_t& signals, GroupReaper& reaper,
                      const std::atomic<bool>& hang_kill, double stop_grace_seconds) {
  JobEnd end;
  bool stopping = false, killed = false;
  Clock::time_point kill_at;
  std::optional<Clock::time_point> failure_stop_at;  // a rank failed: stop the others then
  size_t alive = children.size();
  auto begin_stop = [&](int sig) {
    if (stopping) return;
    stopping = true;
    SignalAll(children, sig);
    kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(stop_grace_seconds));
  };
  while (alive > 0) {
    timespec ts{0, kSuperviseTickNs};
    int sig = sigtimedwait(&signals, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (stopping) {
        SignalAll(children, SIGKILL);  // asked twice: no more grace
        killed = true;
      } else {
        log::Event("", "{}: stopping every rank", strsignal(sig));
        end.interrupted = sig;
        begin_stop(sig == SIGINT ? SIGINT : SIGTERM);
      }
    }
    // Each rank by its own pid: waitpid(-1) also took the launcher's other children (the
    // agents' Slurm step, the group reaper), whose end their owners then never saw.
    for (size_t i = 0; i < children.size(); ++i) {
      Child& c = children[i];
      int status = 0;
      if (c.pid <= 0 || c.done || waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      {
        c.done = true;
        c.code = ExitCode(status);
        c.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        --alive;
        reaper.Remove(c.pid);
        if (c.code == 0 || stopping) continue;
        end.failed_unstopped.push_back(static_cast<int>(i));
        if (end.first_failure == 0) {
          end.first_failure = c.code;
          end.first_failed = static_cast<int>(i);
          log::Error("", "{} exited with code {}; stopping the others",
                     c.rank >= 0 ? fmt::format("rank {}", c.rank) : "the job", c.code);
          // The others first get a moment to end on their own: a backend's error reaches them
          // within milliseconds, and a rank that exits leaves its collectives for the diagnosis.
          failure_stop_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(kFailureGraceSeconds));
        }
      }
    }
    if (failure_stop_at && !stopping && Clock::now() >= *failure_stop_at) begin_stop(SIGTERM);
    if (hang_kill && !stopping) {
      log::Event("", "the job hangs (see the report); --on-hang kill: stopping every rank");
      end.hang_stop = true;
      begin_stop(SIGTERM);
    }
    if (stopping && !killed && Clock::now() >= kill_at) {
      SignalAll(children, SIGKILL);
      killed = true;
    }
  }
  return end;
}

int BlamedChild(const JobEnd& end, const std::vector<Child>& children,
                const std::function<std::vector<std::string>(int)>& tail_of) {
  if (end.failed_unstopped.size() < 2) return end.first_failed;
  std::vector<diagnose::RankExit> failed;
  for (int i : end.failed_unstopped) {
    const Child& c = children[static_cast<size_t>(i)];
    failed.push_back({c.rank, c.code, c.signal, tail_of(i)});
  }
  return end.failed_unstopped[diagnose::FirstToBlame(failed)];
}

int JobExitCode(const JobEnd& end, const std::vector<Child>& children) {
  int rc = 0;
  if (end.hang_stop) {
    rc = end.first_failure != 0 ? end.first_failure : 1;
  } else if (end.interrupted) {
    rc = 128 + end.interrupted;  // the shell's convention: 130 for Ctrl-C, 143 SIGTERM, 129 SIGHUP
  } else if (end.first_failure != 0) {
    rc = end.first_failure;
  } else {
    for (const Child& c : children)
      if (c.code != 0 && rc == 0) rc = c.code;
  }
  return rc;
}

}  // namespace perftracker::cli
