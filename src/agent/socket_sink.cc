#include "agent/socket_sink.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>

#include "agent/trace_pairing.h"
#include "agent/worker_guard.h"
#include "agent/worker_message.h"
#include "agent/worker_registry.h"
#include "base/json_writer.h"
#include "base/log.h"
#include "base/net.h"
#include "base/private_dir.h"
#include "base/units.h"
#include "base/window_defaults.h"

namespace perftracker::agent {

namespace fs = std::filesystem;
namespace dom = simdjson::dom;

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxConnections = 1024;
constexpr size_t kMaxQueuedIterations = 200000;  // the agent polls every 0.2 s; this is minutes
constexpr size_t kMaxQueued = 10000;             // triggers, stack replies, finished traces
constexpr size_t kMaxKnownWorkers = 4 * kMaxConnections;  // live and exited, for the server
constexpr size_t kReadChunk = 64 << 10;
constexpr int kReadRoundsPerWakeup = 16;  // then let the other connections have a turn

void Log(const std::string& line) { log::Write(log::Level::kDetail, "agent", line); }

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string RankName(int rank) { return rank >= 0 ? std::to_string(rank) : "?"; }

// The log line of worker PID's trigger T.
std::string TriggerText(const WorkerTrigger& t, int pid) {
  return fmt::format("rank {} (pid {}): {} at iteration {} (mean {:.2f} ms{})", RankName(t.rank),
                     pid, t.kind, t.iteration, t.mean_ms,
                     t.kind == "slowdown" ? fmt::format(", best {:.2f} ms", t.best_ms) : "");
}

}  // namespace

// One worker's connection: its buffers and who it says it is.
struct WorkerConnection {
  int fd = -1;
  bool refused = false;     // it claimed a rank another live worker holds: closed
  std::string in;           // the current line, up to kMaxLineBytes
  bool discarding = false;  // inside an oversized line: skip to its newline
  std::string out;
  size_t out_off = 0;
  // Identity, from the worker's messages (every message carries it). The first pid and rank
  // a connection names are its own for good: a message naming others is dropped.
  int pid = 0;
  int rank = -1;
  int local_rank = -1;
  int world_size = -1;
  int attempt = -1;  // the launcher's restart count (-1: not said)
  std::string host;
  int64_t clock_offset_ns = 0;
  std::optional<int64_t> window_sent;  // the last window whose profile command it got
  int64_t window_acked = 0;            // the last window it answered (profile_ack)
  bool window_accepted = false;
  int64_t last_iteration = -1;
  bool exit_message = false;  // its stats message: it is exiting normally
  std::deque<IterationReport> unranked;
};

namespace {

using Conn = WorkerConnection;

WorkerStatus StatusOf(const Conn& c) {
  WorkerStatus w;
  w.rank = c.rank;
  w.pid = c.pid;
  w.window_sent = c.window_sent.value_or(0);
  w.window_acked = c.window_acked;
  w.window_accepted = c.window_accepted;
  w.exit_message = c.exit_message;
  w.last_iteration = c.last_iteration;
  w.attempt = std::max(c.attempt, 0);
  return w;
}

// The rank and the world size the live connection of process PID said (-1: none did).
int RankOfPid(const std::map<int, Conn>& conns, int pid) {
  for (const auto& [fd, c] : conns) {
    if (c.pid == pid && c.rank >= 0) return c.rank;
  }
  return -1;
}

int WorldSizeOfPid(const std::map<int, Conn>& conns, int pid) {
  for (const auto& [fd, c] : conns) {
    if (c.pid == pid && c.world_size > 0) return c.world_size;
  }
  return -1;
}

// The pid of another live connection, of another process than PID, that holds RANK and is not
// an earlier attempt of the job than ATTEMPT (an elastic restart's new ranks connect while the
// old ones may still be closing); 0: none.
int RankHolder(const std::map<int, Conn>& conns, const Conn& c, int rank, int pid = 0,
               int attempt = -1) {
  for (const auto& [fd, other] : conns) {
    if (&other == &c || other.refused || other.rank != rank || other.pid == pid) continue;
    if (attempt > std::max(other.attempt, 0)) continue;
    return other.pid;
  }
  return 0;
}

}  // namespace

struct SocketSink::Impl {
  std::string socket_path;
  std::string trace_dir;
  std::string trace_root;  // trace_dir's real path: the only place traces are read from
  Options options;

  mutable std::mutex mu;
  bool running = false;
  bool stopping = false;
  bool bound = false;  // the socket file is ours to remove
  int listen_fd = -1;
  int wake_read = -1, wake_write = -1;
  std::thread thread;
  std::map<int, Conn> conns;  // by fd
  Counters counters;
  std::deque<IterationReport> iterations;
  std::vector<WorkerTrigger> triggers;
  std::vector<std::pair<int64_t, pattern::RankStacks>> stacks;
  std::vector<WorkerTrace> finished;
  // Each worker's Python and torch traces of a window, put together.
  TracePairing pairing{{}};  // its options set with `options`, in the constructor
  std::optional<WindowCommand> window;
  std::string window_line;  // the profile command, as sent
  Clock::time_point window_since;
  std::set<int> window_done_pids;  // workers whose trace for the window arrived
  std::set<int> window_pids;       // workers that got the command when it came
  int window_attempt = -1;         // their highest restart count (-1: none had said who it is)
  // Each worker's newest status by pid (live and exited, at most kMaxKnownWorkers), for the
  // server; the exit recheck set with `options`, in the constructor.
  WorkerRegistry workers{kMaxKnownWorkers, 0, ProcessGone};

  dom::parser parser;  // I/O thread only
  WorkerMessage msg;   // the line being handled (I/O thread only)

  void Wake() {
    if (wake_write < 0) return;
    const char b = 1;
    // A full pipe already means "wake up".
    [[maybe_unused]] ssize_t r = write(wake_write, &b, 1);
  }


  // The worker's status changed: the server hears of it at the agent's next report.
  void Note(const Conn& c) { workers.Note(StatusOf(c)); }

  void CloseAll() {
    for (auto& [fd, c] : conns) {
      counters.dropped_iterations += c.unranked.size();
      close(fd);
    }
    conns.clear();
    for (int* fd : {&listen_fd, &wake_read, &wake_write}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
    if (bound) {
      unlink(socket_path.c_str());
      unlink(SocketSink::TraceDirLink(socket_path).c_str());
    }
    bound = false;
  }

  // ---- output ----

  void Send(Conn& c, const std::string& line) {
    if (c.out.size() - c.out_off + line.size() + 1 > kMaxOutputBytes) {
      ++counters.dropped_commands;  // the worker is not reading; it reconnects in time
      return;
    }
    if (c.out_off > 0 && c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
    }
    c.out += line;
    c.out.push_back('\n');
  }

  // False: the connection is dead.
  bool Flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      ssize_t n = send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
    } else if (c.out_off > (kMaxOutputBytes / 2)) {
      c.out.erase(0, c.out_off);
      c.out_off = 0;
    }
    return true;
  }

  // A worker that appears while a window is open and has not delivered its trace for it (a late
  // rank, or one whose connection dropped the command) gets the command too.
  void MaybeSendWindow(Conn& c) {
    if (!window || c.pid <= 0 || c.window_sent == window->window_id) return;
    if (window_done_pids.count(c.pid)) return;
    if (!WindowIsFor(c)) return;
    const double open_s =
        std::max(window->max_seconds, window_defaults::kMaxSeconds) + options.late_join_seconds;
    if (Seconds(Clock::now() - window_since) > open_s) return;
    Send(c, window_line);
    c.window_sent = window->window_id;
    Note(c);
  }

  // Whether the open window's command is for worker C: not when C is a later attempt of the job
  // (a higher restart count than the workers the command went to, or those workers are all
  // gone: torchrun restarted the ranks, whose iterations start at 0 again).
  bool WindowIsFor(const Conn& c) const {
    if (window_attempt >= 0 && c.attempt > window_attempt) return false;
    if (window_pids.empty() || window_pids.count(c.pid)) return true;
    for (const auto& [fd, other] : conns)
      if (other.pid > 0 && window_pids.count(other.pid)) return true;
    return false;
  }

  // ---- input ----

  // False: the connection is closed or broken.
  bool ReadFrom(Conn& c) {
    char buf[kReadChunk];
    for (int round = 0; round < kReadRoundsPerWakeup; ++round) {
      ssize_t n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        Consume(c, buf, static_cast<size_t>(n));
        if (c.refused) return false;
        continue;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    return true;
  }

  void Consume(Conn& c, const char* data, size_t n) {
    size_t pos = 0;
    while (pos < n && !c.refused) {
      const char* nl = static_cast<const char*>(std::memchr(data + pos, '\n', n - pos));
      const size_t end = nl ? static_cast<size_t>(nl - data) : n;
      if (c.discarding) {
        if (nl) c.discarding = false;
      } else if (c.in.size() + (end - pos) > kMaxLineBytes) {
        // A runaway line: forget it rather than grow, and skip the rest of it.
        ++counters.oversized_lines;
        std::string().swap(c.in);
        c.discarding = nl == nullptr;
      } else {
        c.in.append(data + pos, end - pos);
        if (nl) {
          HandleLine(c, c.in);
          c.in.clear();
          if (c.in.capacity() > (64 << 10)) std::string().swap(c.in);
        }
      }
      pos = end + 1;
    }
  }

  void HandleLine(Conn& c, std::string_view line) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) return;
    ++counters.lines;
    ParseWorkerMessage(line, parser, &msg);
    using T = WorkerMessageType;
    if (msg.type == T::kMalformed) {
      ++counters.malformed;
      return;
    }
    if (!UpdateIdentity(c, msg)) return;
    switch (msg.type) {
      case T::kHello:
        c.clock_offset_ns = msg.clock_offset_ns;
        Log(fmt::format("worker pid {} rank {} (local {}, world {}) on {} connected, protocol v{}",
                        c.pid, RankName(c.rank), c.local_rank, c.world_size, log::Printable(c.host),
                        msg.version));
        break;
      case T::kIterations:
        OnIterations(c, msg);
        break;
      case T::kTrigger:
        OnTrigger(c, msg);
        break;
      case T::kPythonTrace:
        OnPythonTrace(c, msg);
        break;
      case T::kTorchTrace:
        OnTorchTrace(c, msg);
        break;
      case T::kStacks:
        OnStacks(c, msg);
        break;
      case T::kLearned:
        Log(fmt::format("rank {} (pid {}) learned iteration pattern {}", RankName(c.rank), c.pid,
                        log::Printable(msg.pattern)));
        break;
      case T::kRelearn:
        Log(fmt::format("rank {} (pid {}) relearning its iteration pattern", RankName(c.rank),
                        c.pid));
        break;
      case T::kStats: {
        c.exit_message = true;
        // The worker's detector at exit: why a slowdown did or did not fire.
        const double ref = NsToMs(msg.reference_ns), thr = NsToMs(msg.threshold_ns);
        Log(fmt::format(
            "rank {} (pid {}) detector at exit: {} iterations, reference {:.2f} ms, fires above "
            "{:.2f} ms (+{:.1f}%), recent median {:.2f} ms, {} slowdown(s), {} hang(s)",
            RankName(c.rank), c.pid, msg.iterations, ref, thr,
            ref > 0 ? 100 * (thr / ref - 1) : 0.0, NsToMs(msg.recent_ns), msg.slowdowns,
            msg.hangs));
        break;
      }
      case T::kProfileAck:
        c.window_acked = msg.window.value_or(c.window_sent.value_or(0));
        c.window_accepted = msg.accepted;
        Note(c);
        Log(fmt::format("rank {} (pid {}) {} the window, writing {}", RankName(c.rank), c.pid,
                        msg.accepted ? "accepted" : "refused", log::Printable(msg.path)));
        break;
      case T::kUnknown:
      case T::kMalformed:
        ++counters.unknown_type;
        break;
    }
    MaybeSendWindow(c);
  }

  // False: the message is not believed (it names another worker than its connection's, or
  // claims a rank a live worker of the same attempt holds: then the connection is refused).
  bool UpdateIdentity(Conn& c, const WorkerMessage& m) {
    if ((m.pid && c.pid > 0 && *m.pid != c.pid) || (m.rank && c.rank >= 0 && *m.rank != c.rank)) {
      ++counters.forged_messages;
      return false;
    }
    if (m.rank && c.rank < 0 &&
        RankHolder(conns, c, *m.rank, m.pid.value_or(c.pid), m.attempt.value_or(c.attempt)) > 0) {
      ++counters.rank_conflicts;
      c.refused = true;
      log::Error("agent", "refused a worker (pid {}) claiming rank {}, which pid {} holds",
                 m.pid.value_or(c.pid), *m.rank, RankHolder(conns, c, *m.rank));
      return false;
    }
    const int pid = c.pid, rank = c.rank;
    if (m.pid) c.pid = *m.pid;
    if (m.local_rank) c.local_rank = *m.local_rank;
    if (m.world_size) c.world_size = *m.world_size;
    if (m.host) c.host = *m.host;
    if (m.attempt) c.attempt = *m.attempt;
    if (m.rank) c.rank = *m.rank;
    if (c.pid != pid || c.rank != rank) Note(c);  // a new worker, or its rank now known
    if (!m.rank) return true;
    // The iterations that came before torch.distributed knew the rank.
    for (IterationReport& r : c.unranked) {
      r.rank = c.rank;
      PushIteration(r);
    }
    c.unranked.clear();
    return true;
  }

  // PATH, a trace a worker named, as the real path of a regular file inside the trace folder;
  // nullopt (counted, logged) for anything else.
  std::optional<std::string> TraceFile(const Conn& c, const std::string& path) {
    auto real = CheckTraceFile(trace_root, path);
    if (real.ok()) return *real;
    ++counters.refused_traces;
    log::Error("agent", "rank {} (pid {}): trace not read: {}", RankName(c.rank), c.pid,
               real.status().message());
    return std::nullopt;
  }

  void PushIteration(const IterationReport& r) {
    if (iterations.size() >= kMaxQueuedIterations) {
      iterations.pop_front();
      ++counters.dropped_iterations;
    }
    iterations.push_back(r);
  }

  void OnIterations(Conn& c, const WorkerMessage& m) {
    for (const IterationItem& item : m.items) {
      c.last_iteration = std::max(c.last_iteration, item.index);
      IterationReport r{c.rank, item.index, NsToMs(item.end_ns - item.start_ns), c.pid,
                        std::max(c.attempt, 0)};
      if (&item == &m.items.back()) r.cuda = m.cuda;
      if (c.rank >= 0) {
        PushIteration(r);
        continue;
      }
      if (c.unranked.size() >= kMaxUnrankedIterations) {
        c.unranked.pop_front();
        ++counters.dropped_iterations;
      }
      c.unranked.push_back(r);
    }
  }

  void OnTrigger(Conn& c, const WorkerMessage& m) {
    WorkerTrigger t;
    t.rank = c.rank;
    t.kind = m.kind;
    t.iteration = m.iteration;
    t.mean_ms = NsToMs(m.mean_ns);
    t.best_ms = NsToMs(m.best_ns);
    Log(TriggerText(t, c.pid));
    if (triggers.size() < kMaxQueued) triggers.push_back(std::move(t));
  }

  // The window a trace belongs to: its own "window" field, else the last command this
  // connection got.
  std::optional<int64_t> TraceWindow(const Conn& c, const WorkerMessage& m) const {
    if (m.window) return m.window;
    return c.window_sent;
  }

  void OnPythonTrace(Conn& c, const WorkerMessage& m) {
    const std::optional<int64_t> w = TraceWindow(c, m);
    const std::optional<std::string> path = TraceFile(c, m.path);
    if (!path) return;
    // An older worker does not say: expect a torch trace, and wait for it at most a while.
    pairing.PythonTrace(c.pid, c.rank, w, *path, m.torch.value_or(true), Clock::now());
    if (window && (!w || *w == window->window_id)) window_done_pids.insert(c.pid);
    Reap(Clock::now());
  }

  void OnTorchTrace(Conn& c, const WorkerMessage& m) {
    std::string path;
    std::optional<std::string> error = m.error;
    if (!m.path.empty()) {
      // A refused file is a torch trace that failed: its Python trace is not kept waiting.
      std::optional<std::string> real = TraceFile(c, m.path);
      if (real) {
        path = std::move(*real);
      } else if (!error) {
        error = "its file is not a regular file inside the agent's trace folder";
      }
    }
    if (error) {
      Log(fmt::format("rank {} (pid {}): no torch trace: {}", RankName(c.rank), c.pid,
                      log::Printable(*error)));
    }
    if (!pairing.TorchTrace(c.pid, c.rank, TraceWindow(c, m), path, error, Clock::now())) {
      Log(fmt::format("rank {} (pid {}): torch trace {} came after its window was uploaded",
                      RankName(c.rank), c.pid, log::Printable(m.path)));
      return;
    }
    Reap(Clock::now());
  }

  // Moves the windows whose traces are paired, or waited for long enough, to `finished`.
  void Reap(Clock::time_point now) {
    std::vector<TracePairing::Paired> ready;
    pairing.Reap(now, &ready);
    for (TracePairing::Paired& p : ready) {
      if (finished.size() >= kMaxQueued) break;
      WorkerTrace t;
      t.paths = std::move(p.paths);
      t.missing_part = std::move(p.missing_part);
      t.missing_why = std::move(p.missing_why);
      t.pid = p.pid;
      t.rank = p.rank >= 0 ? p.rank : RankOfPid(conns, p.pid);
      t.world_size = WorldSizeOfPid(conns, p.pid);
      finished.push_back(std::move(t));
    }
  }

  void OnStacks(Conn& c, WorkerMessage& m) {
    pattern::RankStacks s = std::move(m.stacks);
    s.rank = c.rank;
    s.pid = c.pid;
    s.host = c.host;
    if (stacks.size() < kMaxQueued) stacks.emplace_back(m.request_id, std::move(s));
  }

  // ---- the I/O thread ----

  void AcceptAll() {
    while (true) {
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or out of descriptors: the next wakeup tries again
      }
      if (conns.size() >= kMaxConnections) {
        close(fd);
        continue;
      }
      // Only the job's user's own processes: another user's could forge ranks and triggers,
      // or name files for the agent to read.
      auto peer = PeerOf(fd);
      if (!peer.ok() || !PeerAllowed(peer->uid, geteuid())) {
        // Logged once: a stranger's loop of connections must not fill the log.
        if (++counters.refused_peers == 1)
          log::Error("agent", "{}: refused a connection from {} (this agent serves uid {} only)",
                     socket_path,
                     peer.ok() ? fmt::format("uid {} (pid {})", peer->uid, peer->pid)
                               : peer.status().message(),
                     geteuid());
        close(fd);
        continue;
      }
      ++counters.connections;
      conns[fd].fd = fd;
    }
  }

  void Loop() {
    std::vector<pollfd> fds;
    std::unique_lock lk(mu);
    while (!stopping) {
      fds.clear();
      fds.push_back({wake_read, POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      for (const auto& [fd, c] : conns) {
        const short want = c.out_off < c.out.size() ? (POLLIN | POLLOUT) : POLLIN;
        fds.push_back({fd, want, 0});
      }
      lk.unlock();
      int n = poll(fds.data(), fds.size(), 1000);
      const int poll_errno = errno;
      lk.lock();
      if (stopping) break;
      if (n < 0) {
        if (poll_errno != EINTR) {
          log::Error("agent", "poll on {}: {}", socket_path, std::strerror(poll_errno));
          lk.unlock();
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          lk.lock();
        }
        continue;
      }
      if (fds[0].revents) {
        char buf[256];
        while (read(wake_read, buf, sizeof(buf)) > 0) {
        }
      }
      if (fds[1].revents & POLLIN) AcceptAll();
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        auto it = conns.find(fds[i].fd);
        if (it == conns.end()) continue;
        Conn& c = it->second;
        bool alive = true;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) alive = ReadFrom(c);
        if (alive && (fds[i].revents & POLLOUT)) alive = Flush(c);
        if (!alive) Drop(it);
      }
      // Commands queued by StartWindow / RequestStacks, or answers to what was just read.
      for (auto it = conns.begin(); it != conns.end();) {
        auto next = std::next(it);
        if (it->second.out_off < it->second.out.size() && !Flush(it->second)) Drop(it);
        it = next;
      }
    }
  }

  void Drop(std::map<int, Conn>::iterator it) {
    Conn& c = it->second;
    if (c.pid > 0) {
      const WorkerStatus w = workers.NoteExit(
          StatusOf(c),
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count(),
          Clock::now());
      Log(fmt::format("worker pid {} rank {} disconnected{}", c.pid, RankName(c.rank),
                      w.process_gone   ? ": its process ended"
                      : c.exit_message ? " (exiting)"
                                       : ""));
    }
    counters.dropped_iterations += c.unranked.size();
    close(it->first);
    conns.erase(it);
  }
};

std::string SocketSink::LoaderStatsDir() const {
  return std::filesystem::path(impl_->socket_path).parent_path().string();
}

SocketSink::SocketSink(std::string socket_path, std::string trace_dir, Options options)
    : impl_(std::make_unique<Impl>()) {
  impl_->socket_path = std::move(socket_path);
  impl_->trace_dir = std::move(trace_dir);
  impl_->options = options;
  impl_->pairing = TracePairing({options.torch_wait_seconds, options.orphan_torch_seconds});
  impl_->workers = WorkerRegistry(kMaxKnownWorkers, options.exit_recheck_seconds, ProcessGone);
}

SocketSink::~SocketSink() { Stop(); }

Status SocketSink::Start() {
  Impl& m = *impl_;
  std::lock_guard lk(m.mu);
  if (m.running) return InvalidArgument(fmt::format("agent: {}: already listening", m.socket_path));
  // Whoever may write into the socket's folder could move the socket aside and bind their own:
  // the folder is this user's alone, made so or refused (never chmod-ed).
  const fs::path parent = fs::path(m.socket_path).parent_path();
  if (Status st = MakePrivateDir(parent.empty() ? "." : parent.string()); !st.ok())
    return InvalidArgument(fmt::format("agent: socket {}: {}", m.socket_path, st.message()));
  // The workers write their traces there and the agent reads, summarizes and prunes what it
  // finds: whoever else may write in it could plant a link for torch's export to follow, or a
  // trace of their own. Private as the socket's folder is.
  Status trace_st = MakePrivateDir(m.trace_dir);
  auto root = trace_st.ok() ? RealPath(m.trace_dir) : StatusOr<std::string>(trace_st);
  if (!root.ok()) {
    return InvalidArgument(fmt::format("agent: cannot use the trace folder {}: {}", m.trace_dir,
                                       root.status().message()));
  }
  m.trace_root = *root;

  StatusOr<int> fd = ListenUnixSocket(m.socket_path, "agent");
  if (!fd.ok()) return fd.status();
  m.listen_fd = *fd;
  m.bound = true;
  // The workers find the trace folder they may write to through this link, which only this
  // user can have made in the private folder (python/perftracker/client.py checks it).
  const std::string link = TraceDirLink(m.socket_path);
  if (struct stat lst{}; lstat(link.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
    unlink(link.c_str());  // a crashed agent's
  if (chmod(m.socket_path.c_str(), 0600) != 0 || symlink(m.trace_root.c_str(), link.c_str()) != 0) {
    Status err = Internal(fmt::format("agent: cannot set up {} (mode 0600, trace folder link): {}",
                                      m.socket_path, std::strerror(errno)));
    m.CloseAll();
    return err;
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    Status err =
        Internal(fmt::format("agent: wake pipe for {}: {}", m.socket_path, std::strerror(errno)));
    m.CloseAll();
    return err;
  }
  m.wake_read = pipe_fds[0];
  m.wake_write = pipe_fds[1];
  m.stopping = false;
  m.running = true;
  m.thread = std::thread([&m] { m.Loop(); });
  return Status::Ok();
}

void SocketSink::Stop() {
  Impl& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    if (!m.running) return;
    m.stopping = true;
    m.Wake();
  }
  m.thread.join();
  std::lock_guard lk(m.mu);
  m.CloseAll();
  m.running = false;
}

std::string SocketSink::WindowDir(int64_t window_id) const {
  return (fs::path(impl_->trace_dir) / fmt::format("window-{}", window_id)).string();
}

Status SocketSink::StartWindow(const WindowCommand& command) {
  Impl& m = *impl_;
  const std::string dir = WindowDir(command.window_id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal(fmt::format("agent: cannot create {}: {}", dir, ec.message()));
  // The earlier windows are summarized and uploaded by now: their raw traces go beyond the
  // newest few (the disk of a long job with periodic windows).
  for (const PrunedWindow& p : PruneTraces(m.trace_dir, m.options.retention, command.window_id))
    Log(
        fmt::format("removed the raw traces of window {} ({:.1f} MB; summarized and uploaded; "
                    "the newest {} windows' are kept, {:.0f} MB at most)",
                    p.window_id, BytesToMB(p.bytes), m.options.retention.keep_windows,
                    BytesToMB(m.options.retention.max_bytes)));
  JsonWriter w;
  w.BeginObject();
  w.Key("type").String("profile");
  w.Key("window").Int(command.window_id);
  // Zero means "not set" in the server's command: the protocol's defaults, not an empty window.
  // Beyond the bounds a worker refuses the command: they are asked for the most it takes.
  w.Key("iters").Int(command.iterations > 0
                         ? std::min<int64_t>(command.iterations, window_defaults::kMostIterations)
                         : window_defaults::kIterations);
  w.Key("max_s").Number(command.max_seconds > 0
                            ? std::min(command.max_seconds, window_defaults::kMostSeconds)
                            : window_defaults::kMaxSeconds);
  w.Key("start_iter").Int(command.start_iteration);
  w.Key("shapes").Bool(command.record_shapes);
  if (!command.memory_ranks.empty()) {
    w.Key("memory_ranks").BeginArray();
    for (int r : command.memory_ranks) w.Int(r);
    w.EndArray();
  }
  w.Key("dir").String(dir);
  w.EndObject();
  std::lock_guard lk(m.mu);
  m.window = command;
  m.window_line = w.Take();
  m.window_since = Clock::now();
  m.window_done_pids.clear();
  m.window_pids.clear();
  m.window_attempt = -1;
  for (auto& [fd, c] : m.conns) {
    m.Send(c, m.window_line);
    c.window_sent = command.window_id;
    m.Note(c);
    if (c.pid <= 0) continue;
    m.window_pids.insert(c.pid);
    m.window_attempt = std::max(m.window_attempt, std::max(c.attempt, 0));
  }
  m.Wake();
  return Status::Ok();
}

Status SocketSink::RequestStacks(int64_t request_id) {
  Impl& m = *impl_;
  const std::string line = fmt::format(R"({{"type":"stacks","request_id":{}}})", request_id);
  std::lock_guard lk(m.mu);
  for (auto& [fd, c] : m.conns) m.Send(c, line);
  m.Wake();
  return Status::Ok();
}

void SocketSink::WindowUploaded(int pid, int64_t window_id) {
  Impl& m = *impl_;
  const std::string line = fmt::format(R"({{"type":"uploaded","window":{}}})", window_id);
  std::lock_guard lk(m.mu);
  for (auto& [fd, c] : m.conns)
    if (c.pid == pid) m.Send(c, line);
  m.Wake();
}

std::vector<WorkerTrace> SocketSink::PollFinished() {
  Impl& m = *impl_;
  std::lock_guard lk(m.mu);
  m.Reap(Clock::now());
  return std::exchange(m.finished, {});
}

std::vector<IterationReport> SocketSink::PollIterations() {
  Impl& m = *impl_;
  std::lock_guard lk(m.mu);
  std::vector<IterationReport> out(m.iterations.begin(), m.iterations.end());
  m.iterations.clear();
  return out;
}

std::vector<int> SocketSink::WorkerPids() {
  Impl& m = *impl_;
  std::lock_guard lk(m.mu);
  std::set<int> pids;
  for (const auto& [fd, c] : m.conns) {
    if (c.pid > 0) pids.insert(c.pid);
  }
  return {pids.begin(), pids.end()};
}

std::vector<WorkerTrigger> SocketSink::PollTriggers() {
  Impl& m = *impl_;
  std::lock_guard lk(m.mu);
  return std::exchange(m.triggers, {});
}

std::vector<std::pair<int64_t, pattern::RankStacks>> SocketSink::PollStacks() {
  Impl& m = *impl_;
  std::lock_guard lk(m.mu);
  return std::exchange(m.stacks, {});
}

std::vector<WorkerStatus> SocketSink::PollWorkerChanges() {
  Impl& m = *impl_;
  std::lock_guard lk(m.mu);
  m.workers.RecheckExits(Clock::now());
  return m.workers.TakeChanged();
}

std::vector<WorkerStatus> SocketSink::AllWorkers() {
  Impl& m = *impl_;
  std::lock_guard lk(m.mu);
  return m.workers.All();
}

SocketSink::Counters SocketSink::counters() const {
  std::lock_guard lk(impl_->mu);
  return impl_->counters;
}

}  // namespace perftracker::agent
