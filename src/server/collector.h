// The central server of the online path: a gRPC Collector service that registers node agents,
// fans profile commands out to all of them (every rank profiles the same iterations), collects
// each window's per-rank summaries, diagnoses the window, stores it in SQLite and writes
// DIR/windows/<n>/diagnosis.json and DIR/diagnosis.json (the latest).
//
// Security: it listens on 127.0.0.1 unless told otherwise, and any other listen address needs a
// shared token (server/credentials.h); with a token, calls without it are refused with
// UNAUTHENTICATED. The embedded server of `perftracker run` always has one.
#ifndef PERFTRACKER_SERVER_COLLECTOR_H_
#define PERFTRACKER_SERVER_COLLECTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/credentials.h"
#include "base/status.h"
#include "diagnose/diagnose.h"
#include "diagnose/finding.h"

namespace perftracker::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // port 0: any free port (see CollectorServer::port)
  std::string report_dir;              // required
  std::string token;                   // required when listen is not 127.0.0.1 / [::1]
  TlsFiles tls;                        // required too off loopback (base/credentials.h)
  int default_iterations = 10;         // W
  double max_seconds = 20;             // a window's profiling time limit
  double upload_grace_seconds = 30;    // after max_seconds, how long to wait for uploads
  int start_lead = 5;                  // the window starts at least this many iterations ahead...
  double lead_seconds = 2.0;           // ...and at least this long ahead (commands travel)
  // After a window that a slowdown opened closes, workers' slowdown triggers are ignored this
  // long (a lasting slowdown fires on every rank, one after another); other windows (baseline,
  // periodic, user) leave triggers alone, and user triggers always open a window.
  double cooldown_seconds = 60;
  // ...unless the job got this much slower than at the trigger that opened (or joined) that
  // window: a new, bigger slowdown (a real fault after a trigger on the host's own drift) is not
  // the one that window profiled.
  double cooldown_escalation = 1.25;
  // A user's `perftracker trigger` (any caller other than a worker's detector) opens at most one
  // window per caller host this often: a script in a loop would keep every rank profiling and
  // fill the disk with traces.
  double user_trigger_cooldown_seconds = 30;
  // One window once every rank has reported this many iterations (its detector learned the
  // iteration and the warm-up is behind): the peer comparison and the expected-pattern rules
  // need no slowdown, so a problem present from the first iteration is found too.
  bool baseline_window = true;
  int baseline_after_iterations = 20;
  // A window every this many seconds (0: never), after the baseline.
  double profile_every_seconds = 0;
  // A worker's hang trigger is confirmed when no rank progressed for this long after it (an
  // epoch boundary, a checkpoint or the job's own exit are pauses, not hangs).
  double hang_confirm_seconds = 5;
  double stacks_seconds = 10;  // a hang: how long to wait for every rank's stacks
  // An agent with no open command stream and no call for this long is forgotten (its node
  // went away): windows no longer wait for its ranks. A live agent holds its stream open.
  double agent_expiry_seconds = 300;
  diagnose::DiagnoseOptions diagnose;  // the numbers users tune (--min-impact, --expected-busbw)
  bool print = true;                   // log each diagnosis as an event (the terminal, base/log.h)
  // Called (on a server thread, without locks held) after a hang was diagnosed and reported.
  std::function<void(const diagnose::Diagnosis&)> on_hang;
};

// True for 127.0.0.1:P, localhost:P and [::1]:P (a token is optional there).
bool IsLoopbackListen(const std::string& listen);
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
};

class CollectorServer {
 public:
  static StatusOr<std::unique_ptr<CollectorServer>> Start(const ServerOptions& options);
  ~CollectorServer();  // calls Shutdown

  int port() const;
  // Opens a window (or joins the one in progress) and sends it to every agent.
  TriggerResult Trigger(const std::string& reason, int iterations);
  // Blocks until Shutdown is called from another thread or a signal handler's thread.
  void Wait();
  // Stops serving; closes the window in progress with what arrived; writes DIR/diagnosis.json:
  // the latest diagnosis (or none) with the whole run's iteration statistics per rank.
  // Idempotent.
  void Shutdown();
  RunSummary Summary() const;

  struct Impl;

 private:
  explicit CollectorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_COLLECTOR_H_
