#include "cli/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "agent/agent.h"
#include "agent/socket_sink.h"
#include "base/credentials.h"
#include "base/log.h"
#include "base/net.h"
#include "base/private_dir.h"
#include "base/start_thread.h"
#include "cli/job_output.h"
#include "cli/job_plan.h"
#include "cli/rank_spawner.h"
#include "cli/slurm.h"
#include "report/diagnosis_reader.h"
#include "report/trace_export.h"
#include "server/server.h"
#include "trace/reader.h"

namespace perftracker::cli {
namespace {

namespace fs = std::filesystem;

// Exit code of a usage error (options that contradict each other, a command that cannot start).
constexpr int kUsageError = 2;
// The workers' last iteration batches travel worker -> agent -> server after the ranks ended:
// the most they are given before the agent stops.
constexpr auto kLastBatchesWait = std::chrono::milliseconds(800);
// The Slurm agents step gets this long (polls x interval) to stop after SIGTERM, before SIGKILL.
constexpr int kAgentsStepStopPolls = 100;
constexpr auto kAgentsStepStopPoll = std::chrono::milliseconds(100);

int Error(const std::string& msg, int code = 1) {
  log::Write(log::Level::kError, "", msg);
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

// A folder removed with everything in it when this goes (empty path: none).
struct RemovedOnExit {
  std::string path;
  ~RemovedOnExit() {
    if (path.empty()) return;
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// One `perftracker run` from its report folder to its exit code, in steps. The members are
// declared in the order the steps create them, so that they go in reverse: the ranks and the
// agent before the embedded server, the agent's socket folder last.
class JobLauncher {
 public:
  JobLauncher(const RunOptions& o, std::string pydir) : o_(o), pydir_(std::move(pydir)) {}

  // Every step in order; a failed one ends the launcher with its message and exit code 1.
  int Run() {
    if (Status st = PrepareFolders(); !st.ok()) return Error(st.message());
    if (Status st = ReadToken(); !st.ok()) return Error(st.message());
    BlockSignals();
    if (Status st = StartServer(); !st.ok()) return Error(st.message());
    ao_ = LocalAgentOptions(o_, server_addr_, token_, embedded_ != nullptr);
    if (Status st = StartAgent(); !st.ok()) return Error(st.message());
    if (Status st = SpawnRanks(); !st.ok()) return Error(st.message());
    if (Status st = relay_.Start(); !st.ok()) {
      AbortStart();
      return Error("run: " + st.message());
    }
    AnnounceStart();
    StartStatusLine();
    const JobEnd end =
        SuperviseRanks(children_, signals_, reaper_, hang_kill_, o_.stop_grace_seconds);
    return Finish(end);
  }

 private:
  // REPORT_DIR/NAME made afresh, the user's alone, into *PATH; WHAT names it in the error.
  Status FreshRunFolder(const char* name, const char* what, std::string* path) {
    std::error_code ec;
    *path = (fs::path(report_dir_) / name).string();
    fs::remove_all(*path, ec);
    if (!fs::create_directory(*path, ec) || ec)
      return Internal(
          fmt::format("{}: cannot create the folder for {}: {}", *path, what, ec.message()));
    fs::permissions(*path, fs::perms::owner_all, ec);
    return Status::Ok();
  }

  // The report folder (absolute), the log in it, the traces folder and the agent socket's
  // private folder under /tmp.
  Status PrepareFolders() {
    // Before any rank starts: a folder another user owns or may write in is refused, and what
    // this run writes is the user's alone (the ranks get the user's umask back).
    UsePrivateUmask();
    if (Status st = MakeOwnFolder(o_.report_dir, "report folder"); !st.ok()) return st;
    std::error_code ec;
    report_dir_ = fs::absolute(o_.report_dir, ec).string();
    // An earlier run's outputs (an older perftracker's, 0644) become private as well.
    for (const char* name :
         {"perftracker.log", "perftracker.db", "diagnosis.json", "report.html", "agents.log"}) {
      const fs::path p = fs::path(report_dir_) / name;
      if (fs::is_regular_file(fs::symlink_status(p, ec)))
        fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write, ec);
    }
    log_path_ = (fs::path(report_dir_) / "perftracker.log").string();
    if (Status st = log::Configure({.file = log_path_, .verbose = o_.verbose}); !st.ok()) return st;
    started_ = Clock::now();
    trace_dir_ = (fs::path(report_dir_) / "traces").string();
    // The agent takes only a private trace folder (agent/socket_sink.h): an earlier run's, made
    // before that rule (0755, this user's, no link), becomes one; anyone else's is refused there.
    if (struct stat st{};
        lstat(trace_dir_.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
      fs::permissions(trace_dir_, fs::perms::owner_all, ec);
    // The ranks' rings of collectives and Flight Recorder dumps, and what a rank's memory was
    // when it ran out (the CUDA allocator's snapshot): this run's only (an earlier run's would
    // be read as this one's ranks').
    if (Status st = FreshRunFolder("collectives", "the ranks' collectives", &collectives_dir_);
        !st.ok())
      return st;
    if (Status st = FreshRunFolder("memory", "the ranks' memory", &memory_dir_); !st.ok())
      return st;
    // Unix socket paths are short (108 bytes): a private folder under /tmp, not the report dir.
    char tmpl[] = "/tmp/perftracker-XXXXXX";
    if (mkdtemp(tmpl) == nullptr)
      return Internal(fmt::format("/tmp: cannot create a folder for the agent socket: {}",
                                  std::strerror(errno)));
    sock_dir_.path = tmpl;
    sock_path_ = sock_dir_.path + "/agent.sock";
    return Status::Ok();
  }

  Status ReadToken() {
    if (o_.token_file.empty()) return Status::Ok();
    auto t = ReadTokenFile(o_.token_file);
    if (!t.ok()) return t.status();
    token_ = *t;
    return Status::Ok();
  }

  // Signals go to this thread's sigtimedwait only; gRPC's threads inherit the mask. Then the
  // helper that stops the ranks if the launcher is killed, forked before any thread starts.
  void BlockSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    sigaddset(&signals_, SIGCHLD);
    sigaddset(&signals_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals_, &old_mask_);
    if (!reaper_.Start())
      log::Error("", "cannot start the helper that stops the ranks if this launcher is killed: {}",
                 std::strerror(errno));
  }

  // The embedded server, unless --server names one; its address and token go to the report
  // folder for `perftracker status` and `trigger`.
  Status StartServer() {
    server_addr_ = o_.server;
    if (!server_addr_.empty()) {
      if (o_.kill_on_hang)
        log::Event("",
                   "--on-hang kill acts where the server runs; with --server it is that server's "
                   "setting");
      return Status::Ok();
    }
    server::ServerOptions so = EmbeddedServerOptions(o_, report_dir_, token_);
    so.on_hang = [&hang_kill = hang_kill_, kill = o_.kill_on_hang](const diagnose::Diagnosis&) {
      if (kill) hang_kill = true;
    };
    // Nobody else on this machine steers the job: the embedded server always wants a token,
    // a random one per run unless the user gave theirs.
    if (so.token.empty()) {
      auto fresh = NewToken();
      if (!fresh.ok()) return fresh.status();
      so.token = token_ = *fresh;
    }
    auto s = server::Server::Start(so);
    if (!s.ok()) return s.status();
    embedded_ = std::move(*s);
    size_t colon = o_.listen.rfind(':');
    server_addr_ = fmt::format("{}:{}", o_.listen.substr(0, colon), embedded_->port());
    return WriteRunCredentials(report_dir_, {server_addr_, token_});
  }

  // This node's agent: inside the launcher, one already running (--agent-socket), or, for srun
  // inside a Slurm allocation, one per node of the allocation as a step of its own.
  Status StartAgent() {
    slurm_agents_ = WantsAgentsStep(o_);
    if (slurm_agents_) return StartAgentsStep();
    if (o_.agent_socket.empty()) return StartLocalAgent();
    sock_path_ = o_.agent_socket;
    std::error_code ec;
    if (!fs::exists(sock_path_, ec))
      log::Event("", "no agent at {} yet: the ranks connect once it runs", sock_path_);
    return Status::Ok();
  }

  Status StartAgentsStep() {
    const std::string slurm_job = std::getenv("SLURM_JOB_ID");
    sock_path_ = AgentsStepSocket(slurm_job, getpid());
    AgentsStep step;
    step.nodes = SlurmNodeCount();
    step.self = SelfExe();
    step.server = server_addr_;
    step.socket = sock_path_;
    step.trace_dir = trace_dir_;
    step.job_id = ao_.job_id;
    step.keep_traces = o_.keep_traces;
    if (!token_.empty())
      step.token_file = (fs::path(report_dir_) / ".perftracker" / "token").string();
    if (!embedded_) step.tls_ca = o_.tls.ca;
    if (IsLoopbackAddress(server_addr_))
      log::Detail("",
                  "agents reach the server at {}: nodes on other hosts need a `perftracker "
                  "server` with TLS (run --server)",
                  server_addr_);
    // Their lines (and srun's) go to REPORT_DIR/agents.log, not the user's terminal.
    const std::string agents_log = (fs::path(report_dir_) / "agents.log").string();
    const int log_fd = open(agents_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    std::map<std::string, std::string> agent_env;
    agents_step_ = Spawn(AgentsStepCommand(step), ChildEnv(agent_env), old_mask_, {log_fd, log_fd});
    if (log_fd >= 0) close(log_fd);
    if (agents_step_ < 0)
      return Internal(fmt::format("run: cannot start the node agents: {}", std::strerror(errno)));
    reaper_.Add(agents_step_);
    log::Event("", "Slurm job {}: one agent per node ({} node(s)) as a step of its own", slurm_job,
               step.nodes);
    return Status::Ok();
  }

  Status StartLocalAgent() {
    agent::SocketSink::Options sink_options;
    sink_options.retention.keep_windows = o_.keep_traces;
    auto sink = std::make_unique<agent::SocketSink>(sock_path_, trace_dir_, sink_options);
    if (Status st = sink->Start(); !st.ok()) return st;
    agent_ = std::make_unique<agent::Agent>(ao_, std::move(sink));
    return StartThread(&agent_thread_, [this] { agent_status_ = agent_->Run(); });
  }

  void StopAgent() {
    if (agents_step_ > 0) {
      // srun forwards SIGTERM to the agents, which stop; then the step ends.
      kill(-agents_step_, SIGTERM);
      for (int i = 0; i < kAgentsStepStopPolls; ++i) {
        const pid_t r = waitpid(agents_step_, nullptr, WNOHANG);
        if (r == agents_step_ || (r < 0 && errno == ECHILD)) break;
        std::this_thread::sleep_for(kAgentsStepStopPoll);
      }
      kill(-agents_step_, SIGKILL);
      waitpid(agents_step_, nullptr, WNOHANG);
      reaper_.Remove(agents_step_);
      agents_step_ = -1;
    }
    if (!agent_) return;
    agent_->Stop();
    if (agent_thread_.joinable()) agent_thread_.join();
  }

  // COMMAND once (--nproc 0: it starts the ranks) or --nproc ranks with torchrun's variables;
  // on a terminal their output goes through the relay.
  Status SpawnRanks() {
    relay_output_ = log::StatusShown();
    const std::map<std::string, std::string> common =
        WorkerEnv(sock_path_, pydir_, relay_output_, collectives_dir_, memory_dir_);
    // stderr always comes through the relay (its last lines name how a rank died); stdout only
    // where the status line shares the terminal.
    auto child_out = [&]() -> std::pair<int, int> { return relay_.AddChild(relay_output_); };
    if (o_.nproc == 0) {
      Child c;
      c.pid = Spawn(o_.command, ChildEnv(common), old_mask_, child_out());
      children_.push_back(c);
    } else {
      int port = o_.master_port ? o_.master_port : FreeLoopbackPort();
      for (int i = 0; i < o_.nproc; ++i) {
        Child c;
        c.rank = o_.node_rank * o_.nproc + i;
        c.pid = Spawn(o_.command, ChildEnv(RankEnv(common, o_, i, port)), old_mask_, child_out());
        if (c.pid < 0) break;
        children_.push_back(c);
      }
    }
    for (const Child& c : children_)
      if (c.pid > 0) reaper_.Add(c.pid);
    if (children_.empty() || children_.back().pid < 0 ||
        (o_.nproc > 0 && static_cast<int>(children_.size()) < o_.nproc)) {
      const std::string why = std::strerror(errno);
      const std::string message =
          fmt::format("run: cannot start rank {}: fork failed: {}", children_.size(), why);
      AbortStart();
      return Internal(message);
    }
    return Status::Ok();
  }

  // A rank could not start: whatever did start goes, with the agent and the server.
  void AbortStart() {
    SignalAll(children_, SIGKILL);
    for (const Child& c : children_)
      if (c.pid > 0) waitpid(c.pid, nullptr, 0);
    reaper_.Done();
    StopAgent();
    if (embedded_) embedded_->Shutdown();
    // Its reports are written; the process ends with the error right after. gRPC's last
    // shutdown (the grpc::Server's destructor) waits for the timer threads it counts, and one it
    // tried to start while the fork storm held this user's process limit never ran: it waited
    // forever (seen in test_hardening's failed fork, 1 run in 3 under load). The server is left
    // to the process's exit.
    (void)embedded_.release();
  }

  void AnnounceStart() {
    if (o_.nproc > 0) {
      log::Event("", "{} rank(s) started ({} of world size {}); report folder {}", o_.nproc,
                 o_.nnodes > 1 ? fmt::format("ranks {}-{}", o_.node_rank * o_.nproc,
                                             (o_.node_rank + 1) * o_.nproc - 1)
                               : "all",
                 o_.nproc * o_.nnodes, report_dir_);
    } else {
      log::Event("", "'{}' started, its ranks report to this launcher; report folder {}",
                 o_.command[0], report_dir_);
    }
    log::Detail("", "server {}{}; agent socket {}; log {}", server_addr_,
                embedded_ ? " (embedded)" : "", sock_path_, log_path_);
  }

  void StartStatusLine() {
    if (!log::StatusShown()) return;
    const Status st = StartThread(&status_thread_, [this] {
      while (!job_done_) {
        log::SetStatus(StatusLine(agent_ ? agent_->Progress() : agent::AgentProgress{},
                                  Clock::now() - started_, o_.nproc));
        std::this_thread::sleep_for(kStatusInterval);
      }
      log::SetStatus("");
    });
    if (!st.ok()) log::Detail("", "no status line: {}", st.message());
  }

  // After the last rank: what is left of the job goes, the agent stops, the timeline is
  // exported and the closing summary printed.
  int Finish(JobEnd end) {
    // Leftovers in the ranks' groups (a rank's own helper processes) go with the job.
    SignalAll(children_, SIGKILL);
    reaper_.Done();
    // The in-process agent says when they are at the server (measured: ~5 ms after the last
    // rank's end); the Slurm agents' step is only given the time.
    if (agent_)
      agent_->Flush(kLastBatchesWait);
    else
      std::this_thread::sleep_for(kLastBatchesWait);
    relay_.Join();
    // Which rank failed for its own reason is the ranks' error output's to say: a peer blocked in
    // a collective with the rank that raised can end (and be reaped) first.
    if (const int blamed =
            BlamedChild(end, children_, [this](int i) { return relay_.ErrorTail(i); });
        blamed != end.first_failed) {
      const Child& c = children_[static_cast<size_t>(blamed)];
      log::Detail("", "rank {} failed on its own; the rank that ended before it lost its peer",
                  c.rank);
      end.first_failed = blamed;
      end.first_failure = c.code;
    }
    job_done_ = true;
    if (status_thread_.joinable()) status_thread_.join();
    JobOutcome outcome;
    outcome.progress = agent_ ? agent_->Progress() : agent::AgentProgress{};
    std::optional<agent::MemoryEnd> first_memory;  // read while the agent knows the ranks' cgroups
    if (agent_ && end.first_failed >= 0)
      first_memory = agent_->MemoryAtEnd(children_[static_cast<size_t>(end.first_failed)].pid);
    StopAgent();
    if (embedded_ && (agent_ || slurm_agents_)) ExportLatestTimeline(report_dir_, trace_dir_);
    if (!agent_status_.ok()) log::Error("", "{}", agent_status_.message());
    outcome.exit_code = JobExitCode(end, children_);
    outcome.elapsed = Clock::now() - started_;
    outcome.report_dir = report_dir_;
    outcome.log_path = log_path_;
    outcome.server = server_addr_;
    server::RunSummary summary;
    if (embedded_) {
      if (end.first_failed >= 0) {
        const Child& c = children_[static_cast<size_t>(end.first_failed)];
        diagnose::RankExit first{c.rank, c.code, c.signal, relay_.ErrorTail(end.first_failed)};
        // The CUDA allocator's state when the rank ran out of GPU memory, where its collector
        // saved it (python/perftracker/oom.py).
        const fs::path snapshot =
            fs::path(memory_dir_) / fmt::format("rank_{}.cuda_oom.pickle", c.rank);
        if (std::error_code sec; fs::is_regular_file(snapshot, sec))
          first.memory_snapshot = snapshot.string();
        if (first_memory) {
          first.oom_killed = first_memory->oom_killed && c.signal == SIGKILL;
          first.memory_limit_bytes = first_memory->now.limit_bytes > 0
                                         ? first_memory->now.limit_bytes
                                         : first_memory->last.cgroup.limit_bytes;
          first.rss_bytes = first_memory->last.rss_bytes;
          first.cgroup_usage_bytes = first_memory->last.cgroup.usage_bytes;
          first.last_iteration = first_memory->last.step;
        }
        embedded_->SetFirstFailure(first);
      }
      embedded_->Shutdown();
      summary = embedded_->Summary();
      outcome.embedded = &summary;
    }
    log::Event("", "{}", ClosingSummary(outcome));
    return outcome.exit_code;
  }

  const RunOptions& o_;
  const std::string pydir_;
  std::string report_dir_;
  std::string log_path_;
  Clock::time_point started_;
  std::string trace_dir_;
  std::string collectives_dir_;
  std::string memory_dir_;
  RemovedOnExit sock_dir_;  // the socket folder goes on every way out
  std::string sock_path_;
  std::string token_;
  sigset_t signals_{};
  sigset_t old_mask_{};
  GroupReaper reaper_;
  std::atomic<bool> hang_kill_{false};
  std::unique_ptr<server::Server> embedded_;
  std::string server_addr_;
  agent::AgentOptions ao_;
  std::unique_ptr<agent::Agent> agent_;
  Status agent_status_;
  std::thread agent_thread_;
  bool slurm_agents_ = false;
  pid_t agents_step_ = -1;
  OutputRelay relay_;
  bool relay_output_ = false;
  std::vector<Child> children_;
  std::atomic<bool> job_done_{false};
  std::thread status_thread_;
};

}  // namespace

int RunJob(const RunOptions& o) {
  if (Status st = CheckRunOptions(o); !st.ok()) return Error(st.message(), kUsageError);
  // Slurm: srun from outside an allocation gets one first (RunInAllocation).
  if (NeedsAllocation(o)) return Error(RunInAllocation(o).message(), kUsageError);
  if (Status st = CheckServerOptions(o); !st.ok()) return Error(st.message(), kUsageError);
  std::string pydir = WorkerPythonDir();
  if (pydir.empty())
    return Error(
        "run: cannot find the worker package (python/ beside the perftracker binary); set "
        "PERFTRACKER_PYTHONPATH");
  JobLauncher job(o, std::move(pydir));
  return job.Run();
}

}  // namespace perftracker::cli
