#include "cli/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "agent/agent.h"
#include "agent/socket_sink.h"
#include "base/log.h"
#include "base/net.h"
#include "report/diagnosis_reader.h"
#include "report/trace_export.h"
#include "server/collector.h"
#include "trace/reader.h"

extern char** environ;

namespace perftracker::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int Error(const std::string& msg, int code = 1) {
  log::Write(log::Level::kError, "", msg);
  return code;
}

// How often the live status line is refreshed: often enough to feel live, rarely enough to cost
// nothing.
constexpr auto kStatusInterval = std::chrono::milliseconds(250);
// A rank's output line longer than this is passed on in pieces (a progress bar without newlines).
constexpr size_t kMaxPassthroughLine = 64 << 10;

// On a terminal the ranks' stdout and stderr come through pipes, so that their lines and the
// status line never share a terminal line. One thread reads every pipe and writes whole lines.
class OutputRelay {
 public:
  // Two pipes for a child: returns {child's stdout, child's stderr} write ends, or {-1, -1}.
  std::pair<int, int> AddChild() {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return {-1, -1};
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(out[0]);
      close(out[1]);
      return {-1, -1};
    }
    ends_.push_back({out[0], STDOUT_FILENO, {}});
    ends_.push_back({err[0], STDERR_FILENO, {}});
    write_ends_.push_back(out[1]);
    write_ends_.push_back(err[1]);
    return {out[1], err[1]};
  }
  // After the children were spawned: the parent's write ends close, the reader starts.
  void Start() {
    for (int fd : write_ends_) close(fd);
    write_ends_.clear();
    if (!ends_.empty()) thread_ = std::thread([this] { Loop(); });
  }
  // Returns once every child's pipes reached end of file (all writers, the ranks' own children
  // included, are gone), or after a bound: a daemon a rank left behind may hold a pipe forever.
  void Join() {
    if (!thread_.joinable()) return;
    auto until = Clock::now() + std::chrono::seconds(2);
    while (!done_ && Clock::now() < until) std::this_thread::sleep_for(kStatusInterval / 5);
    stop_ = true;
    thread_.join();
  }

 private:
  struct End {
    int fd;
    int target;
    std::string partial;
  };

  void Loop() {
    std::vector<char> buf(64 << 10);
    std::vector<pollfd> fds;
    std::vector<End*> polled;
    while (!stop_) {
      fds.clear();
      polled.clear();
      for (End& e : ends_) {
        if (e.fd < 0) continue;
        fds.push_back({e.fd, POLLIN, 0});
        polled.push_back(&e);
      }
      if (fds.empty()) break;
      if (poll(fds.data(), fds.size(), 100) <= 0) continue;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        End& e = *polled[i];
        ssize_t n = read(e.fd, buf.data(), buf.size());
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) {
          if (!e.partial.empty()) log::Passthrough(e.target, e.partial + "\n");
          close(e.fd);
          e.fd = -1;
          continue;
        }
        e.partial.append(buf.data(), static_cast<size_t>(n));
        size_t nl = e.partial.rfind('\n');
        if (nl != std::string::npos) {
          log::Passthrough(e.target, std::string_view(e.partial).substr(0, nl + 1));
          e.partial.erase(0, nl + 1);
        }
        if (e.partial.size() > kMaxPassthroughLine) {
          log::Passthrough(e.target, e.partial);
          e.partial.clear();
        }
      }
    }
    for (End& e : ends_)
      if (e.fd >= 0) close(e.fd);
    done_ = true;
  }

  std::vector<End> ends_;
  std::vector<int> write_ends_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
};

std::string Elapsed(Clock::duration d) {
  long s = static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(d).count());
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

// "perftracker 0:24 | iteration 137, 84.3 ms | detector: watching | window 1: profiling (2/4)"
std::string StatusLine(const agent::AgentProgress& p, Clock::duration elapsed, int ranks) {
  std::string line = fmt::format("perftracker {} | ", Elapsed(elapsed));
  if (p.iteration < 0) {
    line += "starting: the detector learns the iteration";
  } else {
    line += fmt::format("iteration {}, {:.1f} ms | detector: {}", p.iteration, p.iteration_ms,
                        p.trigger.empty() ? "watching" : p.trigger);
  }
  if (p.window > 0) {
    int of = std::max(ranks, p.ranks);
    line += p.window_uploads < of ? fmt::format(" | window {}: profiling ({}/{} uploaded)",
                                                p.window, p.window_uploads, of)
                                  : fmt::format(" | window {}: uploaded", p.window);
  }
  return line;
}

// The worker package (sitecustomize.py + perftracker/) sits beside the binary in the build
// tree; PERFTRACKER_PYTHONPATH overrides it for other layouts.
std::string WorkerPythonDir() {
  if (const char* p = std::getenv("PERFTRACKER_PYTHONPATH"); p && *p) return p;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (fs::path dir :
       {exe.parent_path() / "python", exe.parent_path() / ".." / "lib" / "perftracker"}) {
    if (fs::exists(dir / "sitecustomize.py", ec) && fs::exists(dir / "perftracker", ec))
      return fs::weakly_canonical(dir, ec).string();
  }
  return "";
}

struct Child {
  pid_t pid = 0;
  int rank = -1;
  bool done = false;
  int code = 0;
};

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

// fork + exec in a process group of its own, so that a stop reaches the rank's own children
// (DataLoader workers) and a terminal's Ctrl-C reaches the launcher first.
// OUT and ERR (when not -1) become the child's stdout and stderr.
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
  bool Start() {
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
  void Add(pid_t group) { Send(group); }
  void Remove(pid_t group) { Send(-group); }
  // The launcher ends normally: the helper exits without signalling anyone.
  void Done() {
    if (fd_ < 0) return;
    Send(0);
    close(fd_);
    fd_ = -1;
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_t pid() const { return pid_; }

 private:
  void Send(int32_t v) {
    if (fd_ < 0) return;
    ssize_t n;
    do {
      n = write(fd_, &v, sizeof(v));
    } while (n < 0 && errno == EINTR);
  }

  [[noreturn]] static void Serve(int fd) {
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

  int fd_ = -1;
  pid_t pid_ = -1;
};

pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const sigset_t& old_mask, std::pair<int, int> out_err = {-1, -1}) {
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
  for (const Child& c : children)
    if (c.pid > 0) kill(-c.pid, sig);  // the whole group; harmless when it is gone
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

// --- Slurm (issue 16) ---

bool IsSrun(const std::vector<std::string>& command) {
  return !command.empty() && fs::path(command[0]).filename() == "srun";
}

std::string SelfExe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("perftracker") : p.string();
}

// srun's options that size an allocation, as salloc takes them: "-N 2", "--ntasks=4", "-p pt".
std::vector<std::string> AllocationOptions(const std::vector<std::string>& srun) {
  static const std::set<std::string> kWithValue = {"-N",
                                                   "--nodes",
                                                   "-n",
                                                   "--ntasks",
                                                   "-p",
                                                   "--partition",
                                                   "-t",
                                                   "--time",
                                                   "-c",
                                                   "--cpus-per-task",
                                                   "--ntasks-per-node",
                                                   "-w",
                                                   "--nodelist",
                                                   "-x",
                                                   "--exclude",
                                                   "-A",
                                                   "--account",
                                                   "-q",
                                                   "--qos",
                                                   "-C",
                                                   "--constraint",
                                                   "--gres",
                                                   "--mem",
                                                   "--gpus",
                                                   "--gpus-per-node"};
  static const std::set<std::string> kFlags = {"--exclusive"};
  std::vector<std::string> out;
  for (size_t i = 1; i < srun.size(); ++i) {
    const std::string& a = srun[i];
    if (a.empty() || a[0] != '-') break;  // the program srun runs
    const std::string name = a.substr(0, a.find('='));
    if (kFlags.count(a)) {
      out.push_back(a);
    } else if (kWithValue.count(name) && name != a) {
      out.push_back(a);  // --ntasks=4
    } else if (kWithValue.count(a) && i + 1 < srun.size()) {
      out.push_back(a);
      out.push_back(srun[++i]);
    } else if (a.size() > 2 && a[1] != '-' && kWithValue.count(a.substr(0, 2))) {
      out.push_back(a);  // -N2
    } else if (name == a && i + 1 < srun.size() && srun[i + 1].size() > 0 &&
               srun[i + 1][0] != '-' && a.rfind("--", 0) != 0 && a.size() == 2) {
      ++i;  // another short option with its value: srun's own
    }
  }
  return out;
}

void ApplySlurmDefaults(RunOptions* o, bool nnodes_given, bool node_rank_given,
                        bool master_addr_given) {
  if (o->nproc <= 0 || std::getenv("SLURM_JOB_ID") == nullptr) return;
  auto number = [](const char* name, int* out) {
    const char* v = std::getenv(name);
    if (v == nullptr) return false;
    int n = 0;
    auto [end, err] = std::from_chars(v, v + std::strlen(v), n);
    if (err != std::errc() || *end != '\0') return false;
    *out = n;
    return true;
  };
  if (!nnodes_given && !number("SLURM_JOB_NUM_NODES", &o->nnodes))
    number("SLURM_NNODES", &o->nnodes);
  if (!node_rank_given) number("SLURM_NODEID", &o->node_rank);
  if (!master_addr_given) {
    // The allocation's first node, as `scontrol show hostnames` expands the node list.
    const char* list = std::getenv("SLURM_JOB_NODELIST");
    if (list == nullptr) list = std::getenv("SLURM_NODELIST");
    if (list == nullptr) return;
    const std::string cmd = fmt::format("scontrol show hostnames '{}' 2>/dev/null", list);
    if (std::FILE* p = popen(cmd.c_str(), "r")) {
      char line[256] = {};
      if (std::fgets(line, sizeof(line), p) != nullptr) {
        std::string first = line;
        while (!first.empty() && (first.back() == '\n' || first.back() == ' ')) first.pop_back();
        if (!first.empty()) o->master_addr = first;
      }
      pclose(p);
    }
  }
}

// `run -- srun ...` outside an allocation: the agents must run on the job's nodes, which only an
// allocation names. The launcher asks for one with srun's own sizing options and runs itself
// inside it (salloc's exit code is the launcher's, so the job's).
int RunInAllocation(const RunOptions& o) {
  std::vector<std::string> argv = {"salloc", "--quiet"};
  for (std::string& a : AllocationOptions(o.command)) argv.push_back(std::move(a));
  argv.push_back(SelfExe());
  argv.insert(argv.end(), o.argv.begin() + 1, o.argv.end());
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  execvp(a[0], a.data());
  return Error(
      fmt::format("run: cannot run salloc for `{}`: {}", o.command[0], std::strerror(errno)), 2);
}

// The latest diagnosed window whose raw traces this machine kept, as one Perfetto trace beside
// its diagnosis (REPORT_DIR/windows/<n>/trace.json.gz); the reports link to it. The traces are
// in TRACE_DIR/window-<n>, or TRACE_DIR/<node>/window-<n> for the node agents of a Slurm job
// (their nodes' files, where they share this machine's folder).
void ExportLatestTimeline(const std::string& report_dir, const std::string& trace_dir) {
  std::map<int64_t, std::vector<std::string>> folders;  // window -> its trace folders
  std::error_code ec;
  auto scan = [&](const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("window-", 0) != 0) continue;
      int64_t n = 0;
      auto [end, err] = std::from_chars(name.data() + 7, name.data() + name.size(), n);
      if (err == std::errc() && end == name.data() + name.size())
        folders[n].push_back(e.path().string());
    }
  };
  scan(trace_dir);
  for (const auto& e : fs::directory_iterator(trace_dir, ec))
    if (e.is_directory(ec) && e.path().filename().string().rfind("window-", 0) != 0) scan(e.path());
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    const fs::path win = fs::path(report_dir) / "windows" / std::to_string(it->first);
    if (!fs::exists(win / "diagnosis.json", ec)) continue;
    auto files = trace::ExpandTracePaths(it->second);
    if (!files.ok() || files->empty()) return;
    auto d = report::ReadDiagnosisFile((win / "diagnosis.json").string());
    const std::string out = (win / "trace.json.gz").string();
    auto st = report::ExportTrace(*files, out, {.diagnosis = d.ok() ? &*d : nullptr});
    if (!st.ok()) {
      log::Error("", "timeline of window {}: {}", it->first, st.status().message());
      return;
    }
    log::Detail("", "timeline of window {}: {} ({} ranks, {} events; open it in ui.perfetto.dev)",
                it->first, out, st->ranks, st->events);
    return;
  }
}

int RunJob(const RunOptions& o) {
  if (o.command.empty()) return Error("run: no command after --", 2);
  if (o.nproc < 0 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    return Error("run: --nproc must be >= 0 and --node-rank in [0, --nnodes)", 2);
  // Slurm: srun from outside an allocation gets one first (RunInAllocation).
  if (o.nproc == 0 && IsSrun(o.command) && std::getenv("SLURM_JOB_ID") == nullptr &&
      o.argv.size() > 1 && std::getenv("PERFTRACKER_NO_SALLOC") == nullptr)
    return RunInAllocation(o);
  if (!o.metrics.empty() && !o.server.empty())
    return Error(
        "run: --metrics serves the embedded server's metrics; with --server ADDR, give "
        "`perftracker server` its --metrics",
        2);
  std::string pydir = WorkerPythonDir();
  if (pydir.empty())
    return Error(
        "run: cannot find the worker package (python/ beside the perftracker binary); set "
        "PERFTRACKER_PYTHONPATH");
  std::error_code ec;
  fs::create_directories(o.report_dir, ec);
  if (ec)
    return Error(fmt::format("{}: cannot create report folder: {}", o.report_dir, ec.message()));
  std::string report_dir = fs::absolute(o.report_dir, ec).string();
  std::string log_path = (fs::path(report_dir) / "perftracker.log").string();
  if (Status st = log::Configure({.file = log_path, .verbose = o.verbose}); !st.ok())
    return Error(st.message());
  auto started = Clock::now();
  std::string trace_dir = (fs::path(report_dir) / "traces").string();
  fs::create_directories(trace_dir, ec);
  // Unix socket paths are short (108 bytes): a private folder under /tmp, not the report dir.
  char tmpl[] = "/tmp/perftracker-XXXXXX";
  if (mkdtemp(tmpl) == nullptr)
    return Error(
        fmt::format("/tmp: cannot create a folder for the agent socket: {}", std::strerror(errno)));
  std::string sock_dir = tmpl;
  std::string sock_path = sock_dir + "/agent.sock";
  // The socket folder goes on every way out of this function.
  std::unique_ptr<void, std::function<void(void*)>> sock_dir_guard(
      reinterpret_cast<void*>(1), [&sock_dir](void*) {
        std::error_code ignored;
        fs::remove_all(sock_dir, ignored);
      });

  std::string token;
  if (!o.token_file.empty()) {
    auto t = ReadTokenFile(o.token_file);
    if (!t.ok()) return Error(t.status().message());
    token = *t;
  }

  // Signals go to this thread's sigtimedwait only; gRPC's threads inherit the mask.
  sigset_t set, old_mask;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &old_mask);
  // Before any thread starts: the helper is forked from a process with one thread.
  GroupReaper reaper;
  if (!reaper.Start())
    log::Error("", "cannot start the helper that stops the ranks if this launcher is killed: {}",
               std::strerror(errno));

  std::atomic<bool> hang_kill{false};
  std::unique_ptr<server::CollectorServer> embedded;
  std::string server_addr = o.server;
  if (server_addr.empty()) {
    server::ServerOptions so;
    so.listen = o.listen;
    so.report_dir = report_dir;
    so.token = token;
    so.schedule.default_iterations = o.iterations;
    so.max_seconds = o.max_seconds;
    so.schedule.baseline_window = o.baseline_window;
    so.diagnose = o.diagnose;
    so.schedule.profile_every_seconds = o.profile_every_seconds;
    so.metrics_listen = o.metrics;
    so.on_hang = [&hang_kill, kill = o.kill_on_hang](const diagnose::Diagnosis&) {
      if (kill) hang_kill = true;
    };
    // Nobody else on this machine steers the job: the embedded server always wants a token,
    // a random one per run unless the user gave theirs.
    if (so.token.empty()) {
      auto fresh = NewToken();
      if (!fresh.ok()) return Error(fresh.status().message());
      so.token = token = *fresh;
    }
    auto s = server::CollectorServer::Start(so);
    if (!s.ok()) return Error(s.status().message());
    embedded = std::move(*s);
    size_t colon = o.listen.rfind(':');
    server_addr = fmt::format("{}:{}", o.listen.substr(0, colon), embedded->port());
    if (Status st = WriteRunCredentials(report_dir, {server_addr, token}); !st.ok())
      return Error(st.message());
  } else if (o.kill_on_hang) {
    log::Event("",
               "--on-hang kill acts where the server runs; with --server it is that server's "
               "setting");
  }

  agent::AgentOptions ao;
  ao.server = server_addr;
  ao.token = token;
  // Every node of a job must name it alike: the rendezvous address is what they share.
  ao.job_id = o.job_id;
  if (ao.job_id.empty() && o.master_port)
    ao.job_id = fmt::format("{}:{}", o.master_addr, o.master_port);
  if (ao.job_id.empty()) {
    auto id = NewToken();
    ao.job_id = id.ok() ? id->substr(0, 16) : fmt::format("pid-{}", getpid());
  }
  if (!embedded) ao.tls = o.tls;  // the embedded server is on loopback, without TLS
  ao.profile_at_iteration = o.profile_at_iteration;
  for (int i = 0; i < o.nproc; ++i) ao.ranks.push_back(o.node_rank * o.nproc + i);
  // This node's agent: inside the launcher, one already running (--agent-socket), or, for srun
  // inside a Slurm allocation, one per node of the allocation as a step of its own.
  std::unique_ptr<agent::Agent> agent;
  Status agent_status;
  std::thread agent_thread;
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  const bool slurm_agents =
      o.nproc == 0 && o.agent_socket.empty() && IsSrun(o.command) && slurm_job != nullptr;
  pid_t agents_step = -1;
  if (slurm_agents) {
    // A folder per node under /tmp (the agent makes it 0700); {node} is each node's name.
    sock_path = fmt::format("/tmp/perftracker-{}-{}-{{node}}/agent.sock", slurm_job, getpid());
    const char* nodes_env = std::getenv("SLURM_JOB_NUM_NODES");
    if (nodes_env == nullptr) nodes_env = std::getenv("SLURM_NNODES");
    const std::string nodes = nodes_env != nullptr ? nodes_env : "1";
    std::vector<std::string> step = {"srun",
                                     "--overlap",
                                     "--quiet",
                                     "--kill-on-bad-exit=0",
                                     "--nodes=" + nodes,
                                     "--ntasks=" + nodes,
                                     "--ntasks-per-node=1",
                                     SelfExe(),
                                     "agent",
                                     "--server",
                                     server_addr,
                                     "--socket",
                                     sock_path,
                                     "--trace-dir",
                                     (fs::path(trace_dir) / "{node}").string(),
                                     "--job-id",
                                     ao.job_id,
                                     "--keep-traces",
                                     std::to_string(o.keep_traces)};
    if (!token.empty()) {
      step.push_back("--token-file");
      step.push_back((fs::path(report_dir) / ".perftracker" / "token").string());
    }
    if (!embedded && !o.tls.ca.empty()) {
      step.push_back("--tls-ca");
      step.push_back(o.tls.ca);
    }
    if (server::IsLoopbackListen(server_addr))
      log::Detail("",
                  "agents reach the server at {}: nodes on other hosts need --listen HOST:PORT "
                  "(with TLS) or --server",
                  server_addr);
    // Their lines (and srun's) go to REPORT_DIR/agents.log, not the user's terminal.
    const std::string agents_log = (fs::path(report_dir) / "agents.log").string();
    const int log_fd = open(agents_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    std::map<std::string, std::string> agent_env;
    agents_step = Spawn(step, ChildEnv(agent_env), old_mask, {log_fd, log_fd});
    if (log_fd >= 0) close(log_fd);
    if (agents_step < 0)
      return Error(fmt::format("run: cannot start the node agents: {}", std::strerror(errno)));
    reaper.Add(agents_step);
    log::Event("", "Slurm job {}: one agent per node ({} node(s)) as a step of its own", slurm_job,
               nodes);
  } else if (o.agent_socket.empty()) {
    agent::SocketSink::Options sink_options;
    sink_options.retention.keep_windows = o.keep_traces;
    auto sink = std::make_unique<agent::SocketSink>(sock_path, trace_dir, sink_options);
    if (Status st = sink->Start(); !st.ok()) return Error(st.message());
    agent = std::make_unique<agent::Agent>(ao, std::move(sink));
    agent_thread = std::thread([&] { agent_status = agent->Run(); });
  } else {
    sock_path = o.agent_socket;
    std::error_code ec2;
    if (!fs::exists(sock_path, ec2))
      log::Event("", "no agent at {} yet: the ranks connect once it runs", sock_path);
  }
  auto stop_agent = [&] {
    if (agents_step > 0) {
      // srun forwards SIGTERM to the agents, which stop; then the step ends.
      kill(-agents_step, SIGTERM);
      for (int i = 0; i < 100; ++i) {
        const pid_t r = waitpid(agents_step, nullptr, WNOHANG);
        if (r == agents_step || (r < 0 && errno == ECHILD)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      kill(-agents_step, SIGKILL);
      waitpid(agents_step, nullptr, WNOHANG);
      reaper.Remove(agents_step);
      agents_step = -1;
    }
    if (!agent) return;
    agent->Stop();
    agent_thread.join();
  };

  std::map<std::string, std::string> common = {
      {"PERFTRACKER_AGENT_SOCKET", sock_path},
  };
  const char* pp = std::getenv("PYTHONPATH");
  common["PYTHONPATH"] = pp && *pp ? pydir + ":" + pp : pydir;
  // On a terminal the ranks write through the relay, unbuffered (Python buffers a pipe).
  OutputRelay relay;
  const bool relay_output = log::StatusShown();
  // (insert_or_assign: GCC 12's -Wrestrict misfires on operator= of a short literal here.)
  if (relay_output && std::getenv("PYTHONUNBUFFERED") == nullptr)
    common.insert_or_assign("PYTHONUNBUFFERED", std::string(1, '1'));
  auto child_out = [&]() -> std::pair<int, int> {
    return relay_output ? relay.AddChild() : std::pair<int, int>{-1, -1};
  };
  std::vector<Child> children;
  if (o.nproc == 0) {
    Child c;
    c.pid = Spawn(o.command, ChildEnv(common), old_mask, child_out());
    children.push_back(c);
  } else {
    int port = o.master_port ? o.master_port : FreeLoopbackPort();
    int world = o.nproc * o.nnodes;
    for (int i = 0; i < o.nproc; ++i) {
      auto env = common;
      int rank = o.node_rank * o.nproc + i;
      env["RANK"] = std::to_string(rank);
      env["LOCAL_RANK"] = std::to_string(i);
      env["WORLD_SIZE"] = std::to_string(world);
      env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
      env["GROUP_RANK"] = std::to_string(o.node_rank);
      env["MASTER_ADDR"] = o.master_addr;
      env["MASTER_PORT"] = std::to_string(port);
      Child c;
      c.rank = rank;
      c.pid = Spawn(o.command, ChildEnv(env), old_mask, child_out());
      if (c.pid < 0) break;
      children.push_back(c);
    }
  }
  for (const Child& c : children)
    if (c.pid > 0) reaper.Add(c.pid);
  if (children.empty() || children.back().pid < 0 ||
      (o.nproc > 0 && static_cast<int>(children.size()) < o.nproc)) {
    const std::string why = std::strerror(errno);
    SignalAll(children, SIGKILL);
    for (const Child& c : children)
      if (c.pid > 0) waitpid(c.pid, nullptr, 0);
    reaper.Done();
    stop_agent();
    if (embedded) embedded->Shutdown();
    return Error(fmt::format("run: cannot start rank {}: fork failed: {}", children.size(), why));
  }
  relay.Start();
  if (o.nproc > 0) {
    log::Event("", "{} rank(s) started ({} of world size {}); report folder {}", o.nproc,
               o.nnodes > 1 ? fmt::format("ranks {}-{}", o.node_rank * o.nproc,
                                          (o.node_rank + 1) * o.nproc - 1)
                            : "all",
               o.nproc * o.nnodes, report_dir);
  } else {
    log::Event("", "'{}' started, its ranks report to this launcher; report folder {}",
               o.command[0], report_dir);
  }
  log::Detail("", "server {}{}; agent socket {}; log {}", server_addr,
              embedded ? " (embedded)" : "", sock_path, log_path);
  std::atomic<bool> job_done{false};
  std::thread status_thread;
  if (log::StatusShown()) {
    status_thread = std::thread([&] {
      while (!job_done) {
        log::SetStatus(StatusLine(agent ? agent->Progress() : agent::AgentProgress{},
                                  Clock::now() - started, o.nproc));
        std::this_thread::sleep_for(kStatusInterval);
      }
      log::SetStatus("");
    });
  }

  int first_failure = 0;
  bool stopping = false, killed = false, hang_stop = false;
  int interrupted = 0;  // the signal that stopped the job
  Clock::time_point kill_at;
  size_t alive = children.size();
  auto begin_stop = [&](int sig) {
    if (stopping) return;
    stopping = true;
    SignalAll(children, sig);
    kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(o.stop_grace_seconds));
  };
  while (alive > 0) {
    timespec ts{0, 200'000'000};
    int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (stopping) {
        SignalAll(children, SIGKILL);  // asked twice: no more grace
        killed = true;
      } else {
        log::Event("", "{}: stopping every rank", strsignal(sig));
        interrupted = sig;
        begin_stop(sig == SIGINT ? SIGINT : SIGTERM);
      }
    }
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (Child& c : children) {
        if (c.pid != pid || c.done) continue;
        c.done = true;
        c.code = ExitCode(status);
        --alive;
        reaper.Remove(c.pid);
        if (c.code != 0 && first_failure == 0 && !stopping) {
          first_failure = c.code;
          log::Error("", "{} exited with code {}; stopping the others",
                     c.rank >= 0 ? fmt::format("rank {}", c.rank) : "the job", c.code);
          begin_stop(SIGTERM);
        }
      }
    }
    if (hang_kill && !stopping) {
      log::Event("", "the job hangs (see the report); --on-hang kill: stopping every rank");
      hang_stop = true;
      begin_stop(SIGTERM);
    }
    if (stopping && !killed && Clock::now() >= kill_at) {
      SignalAll(children, SIGKILL);
      killed = true;
    }
  }
  // Leftovers in the ranks' groups (a rank's own helper processes) go with the job.
  SignalAll(children, SIGKILL);
  reaper.Done();

  // The workers' last iteration batches travel worker -> agent -> server; give them a moment.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  relay.Join();
  job_done = true;
  if (status_thread.joinable()) status_thread.join();
  agent::AgentProgress progress = agent ? agent->Progress() : agent::AgentProgress{};
  stop_agent();
  if (embedded && (agent || slurm_agents)) ExportLatestTimeline(report_dir, trace_dir);
  if (!agent_status.ok()) log::Error("", "{}", agent_status.message());
  int rc = 0;
  if (hang_stop) {
    rc = first_failure != 0 ? first_failure : 1;
  } else if (interrupted) {
    rc = 128 + interrupted;  // the shell's convention: 130 for Ctrl-C, 143 SIGTERM, 129 SIGHUP
  } else if (first_failure != 0) {
    rc = first_failure;
  } else {
    for (const Child& c : children)
      if (c.code != 0 && rc == 0) rc = c.code;
  }
  std::string ended =
      fmt::format("job ended (exit {}) after {}", rc, Elapsed(Clock::now() - started));
  if (progress.iteration >= 0)
    ended += fmt::format(", {} iterations, last {:.1f} ms", progress.iteration + 1,
                         progress.iteration_ms);
  if (embedded) {
    embedded->Shutdown();
    server::RunSummary sum = embedded->Summary();
    ended += fmt::format("; {} window(s) diagnosed{}", sum.windows,
                         sum.hangs ? fmt::format(", {} hang(s)", sum.hangs) : "");
    if (sum.has_latest && !sum.latest.findings.empty()) {
      const diagnose::Finding& top = sum.latest.findings[0];
      ended += fmt::format("\n  latest diagnosis: {} finding(s); first: {}",
                           sum.latest.findings.size(), top.summary);
    } else {
      ended += sum.has_latest ? "\n  latest diagnosis: no findings" : "\n  no diagnosis";
    }
    ended += fmt::format("\n  report: {}/diagnosis.json   log: {}", report_dir, log_path);
  } else {
    ended += fmt::format("; the diagnosis is at the server ({})\n  log: {}", server_addr, log_path);
  }
  log::Event("", "{}", ended);
  return rc;
}

}  // namespace perftracker::cli
