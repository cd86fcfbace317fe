#include "cli/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "agent/agent.h"
#include "agent/socket_sink.h"
#include "base/net.h"
#include "server/collector.h"

extern char** environ;

namespace perftracker::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int Error(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "perftracker: error: %s\n", msg.c_str());
  return code;
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
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const sigset_t& old_mask) {
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    environ = e.data();
    execvp(a[0], a.data());
    std::fprintf(stderr, "perftracker: error: cannot run '%s': %s\n", a[0], std::strerror(errno));
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

int RunJob(const RunOptions& o) {
  if (o.command.empty()) return Error("run: no command after --", 2);
  if (o.nproc < 0 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    return Error("run: --nproc must be >= 0 and --node-rank in [0, --nnodes)", 2);
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
  std::string trace_dir = (fs::path(report_dir) / "traces").string();
  fs::create_directories(trace_dir, ec);
  // Unix socket paths are short (108 bytes): a private folder under /tmp, not the report dir.
  char tmpl[] = "/tmp/perftracker-XXXXXX";
  if (mkdtemp(tmpl) == nullptr)
    return Error(
        fmt::format("/tmp: cannot create a folder for the agent socket: {}", std::strerror(errno)));
  std::string sock_dir = tmpl;
  std::string sock_path = sock_dir + "/agent.sock";

  std::string token;
  if (!o.token_file.empty()) {
    auto t = server::ReadTokenFile(o.token_file);
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

  std::atomic<bool> hang_kill{false};
  std::unique_ptr<server::CollectorServer> embedded;
  std::string server_addr = o.server;
  if (server_addr.empty()) {
    server::ServerOptions so;
    so.listen = o.listen;
    so.report_dir = report_dir;
    so.token = token;
    so.default_iterations = o.iterations;
    so.max_seconds = o.max_seconds;
    so.on_hang = [&hang_kill, kill = o.kill_on_hang](const diagnose::Diagnosis&) {
      if (kill) hang_kill = true;
    };
    auto s = server::CollectorServer::Start(so);
    if (!s.ok()) return Error(s.status().message());
    embedded = std::move(*s);
    size_t colon = o.listen.rfind(':');
    server_addr = fmt::format("{}:{}", o.listen.substr(0, colon), embedded->port());
  } else if (o.kill_on_hang) {
    std::fprintf(stderr,
                 "perftracker: --on-hang kill acts where the server runs; with --server it is "
                 "that server's setting\n");
  }

  auto sink = std::make_unique<agent::SocketSink>(sock_path, trace_dir);
  if (Status st = sink->Start(); !st.ok()) return Error(st.message());
  agent::AgentOptions ao;
  ao.server = server_addr;
  ao.token = token;
  ao.profile_at_iteration = o.profile_at_iteration;
  for (int i = 0; i < o.nproc; ++i) ao.ranks.push_back(o.node_rank * o.nproc + i);
  agent::Agent agent(ao, std::move(sink));
  Status agent_status;
  std::thread agent_thread([&] { agent_status = agent.Run(); });

  std::map<std::string, std::string> common = {
      {"PERFTRACKER_AGENT_SOCKET", sock_path},
  };
  const char* pp = std::getenv("PYTHONPATH");
  common["PYTHONPATH"] = pp && *pp ? pydir + ":" + pp : pydir;
  std::vector<Child> children;
  if (o.nproc == 0) {
    Child c;
    c.pid = Spawn(o.command, ChildEnv(common), old_mask);
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
      c.pid = Spawn(o.command, ChildEnv(env), old_mask);
      children.push_back(c);
    }
  }
  for (const Child& c : children)
    if (c.pid < 0) {
      SignalAll(children, SIGKILL);
      return Error(fmt::format("run: fork failed: {}", std::strerror(errno)));
    }
  std::fprintf(stderr, "perftracker: %zu process(es) started; server %s%s; report in %s\n",
               children.size(), server_addr.c_str(), embedded ? " (embedded)" : "",
               report_dir.c_str());

  int first_failure = 0;
  bool stopping = false, killed = false, interrupted = false, hang_stop = false;
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
        std::fprintf(stderr, "perftracker: %s: stopping every rank\n", strsignal(sig));
        interrupted = true;
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
        if (c.code != 0 && first_failure == 0 && !stopping) {
          first_failure = c.code;
          std::fprintf(stderr, "perftracker: %s exited with code %d; stopping the others\n",
                       c.rank >= 0 ? fmt::format("rank {}", c.rank).c_str() : "the job", c.code);
          begin_stop(SIGTERM);
        }
      }
    }
    if (hang_kill && !stopping) {
      std::fprintf(stderr,
                   "perftracker: the job hangs (see the report); --on-hang kill: "
                   "stopping every rank\n");
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

  // The workers' last iteration batches travel worker -> agent -> server; give them a moment.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  agent.Stop();
  agent_thread.join();
  if (!agent_status.ok()) std::fprintf(stderr, "perftracker: %s\n", agent_status.message().c_str());
  if (embedded) {
    embedded->Shutdown();
    std::fprintf(stderr, "perftracker: report: %s/diagnosis.json\n", report_dir.c_str());
  }
  fs::remove_all(sock_dir, ec);

  if (hang_stop) return first_failure != 0 ? first_failure : 1;
  if (interrupted) return 130;
  if (first_failure != 0) return first_failure;
  for (const Child& c : children)
    if (c.code != 0) return c.code;
  return 0;
}

}  // namespace perftracker::cli
