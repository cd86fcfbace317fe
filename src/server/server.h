// The central server of the online path: a gRPC service (perftracker.v1.Server) that registers node
// agents, fans profile commands out to all of them (every rank profiles the same iterations),
// collects each window's per-rank summaries, diagnoses the window, stores it in SQLite and writes
// DIR/windows/<n>/diagnosis.json and DIR/diagnosis.json (the latest).
//
// Security: it listens on 127.0.0.1 unless told otherwise, and any other listen address needs a
// shared token (server/credentials.h); with a token, calls without it are refused with
// UNAUTHENTICATED. The embedded server of `perftracker run` always has one.
#ifndef PERFTRACKER_SERVER_SERVER_H_
#define PERFTRACKER_SERVER_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/credentials.h"
#include "base/status.h"
#include "base/window_defaults.h"
#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "diagnose/rank_crash.h"
#include "server/scheduler.h"

namespace perftracker::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // port 0: any free port (see Server::port)
  std::string report_dir;              // required
  std::string token;                   // required when listen is not 127.0.0.1 / [::1]
  TlsFiles tls;                        // required too off loopback (base/credentials.h)
  // Serve Prometheus metrics at http://ADDR/metrics ("" none; server/metrics_http.h); off
  // loopback only with METRICS_PUBLIC, to scrapers that send TOKEN.
  std::string metrics_listen;
  bool metrics_public = false;
  double max_seconds = window_defaults::kMaxSeconds;  // a window's profiling time limit
  double upload_grace_seconds = 30;  // after max_seconds, how long to wait for uploads
  // When windows open, cooldowns, hang confirmation (server/scheduler.h).
  ScheduleOptions schedule;
  double stacks_seconds = 10;  // a hang: how long to wait for every rank's stacks
  // An agent with no open command stream and no call for this long is forgotten (its node
  // went away): windows no longer wait for its ranks. A live agent holds its stream open.
  double agent_expiry_seconds = 300;
  diagnose::DiagnoseOptions diagnose;  // the numbers users tune (--min-impact, --expected-busbw)
  bool print = true;                   // log each diagnosis as an event (the terminal, base/log.h)
  // Called (on a server thread, without locks held) after a hang was diagnosed and reported.
  std::function<void(const diagnose::Diagnosis&)> on_hang;
  // Called on the server's timer thread, without locks held, right before it reads the ranks'
  // collective dumps for a hang (tests call the server from it).
  std::function<void()> before_reading_dumps;
};

// Equal-length-independent comparison whose time does not depend on where inputs differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

struct TriggerResult {
  int64_t window_id = 0;
  int64_t start_iteration = 0;
  bool already_open = false;
};

// What a run came to, for the launcher's closing line.
struct RunSummary {
  int windows = 0;  // profiling windows diagnosed
  int hangs = 0;    // hangs diagnosed
  bool has_latest = false;
  diagnose::Diagnosis latest;  // the latest diagnosis
  // One line per attempt of the job (server/attempts.h), when its ranks were started again.
  std::vector<std::string> attempts;
};

class Server {
 public:
  static StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server();  // calls Shutdown

  int port() const;
  int metrics_port() const;  // 0: no metrics endpoint
  // Opens a window (or joins the one in progress) and sends it to every agent.
  TriggerResult Trigger(const std::string& reason, int iterations);
  // Blocks until Shutdown is called from another thread or a signal handler's thread.
  void Wait();
  // The launcher's word on how the job ended: the first rank that failed, how, and its last
  // error output. Shutdown makes it a rank_crash finding (diagnose/rank_crash.h).
  void SetFirstFailure(const diagnose::RankExit& first);
  // Stops serving; closes the window in progress with what arrived; writes DIR/diagnosis.json:
  // the latest diagnosis (or none) with the whole run's iteration statistics per rank, and what
  // the ranks' collectives (DIR/collectives: their rings and Flight Recorder dumps) and the
  // first failure say about how the job ended. Idempotent.
  void Shutdown();
  RunSummary Summary() const;
  // The text /metrics serves, rendered now (under the server's lock, as the endpoint's render
  // thread does): for tests and benchmarks without an HTTP client.
  std::string MetricsText() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_SERVER_H_
