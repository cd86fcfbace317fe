#include "cli/job_plan.h"

#include <fmt/format.h>
#include <unistd.h>

#include "base/credentials.h"
#include "base/net.h"

namespace perftracker::cli {

Status CheckRunOptions(const RunOptions& o) {
  if (o.command.empty()) return InvalidArgument("run: no command after --");
  if (o.nproc < 0 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    return InvalidArgument("run: --nproc must be >= 0 and --node-rank in [0, --nnodes)");
  return Status::Ok();
}

Status CheckServerOptions(const RunOptions& o) {
  if (!o.metrics.empty() && !o.server.empty())
    return InvalidArgument(
        "run: --metrics serves the embedded server's metrics; with --server ADDR, give "
        "`perftracker server` its --metrics");
  // The embedded server has no certificate: off loopback its token would cross the network in
  // clear text. Ranks on other hosts report to a `perftracker server` with TLS (--server).
  if (!IsLoopbackAddress(o.listen))
    return InvalidArgument(fmt::format(
        "run: --listen {}: the embedded server listens on loopback only (it has no TLS "
        "certificate); for agents on other hosts start `perftracker server --listen HOST:PORT "
        "--tls-cert C --tls-key K` and give run --server HOST:PORT --tls-ca CA --token-file F",
        o.listen));
  return Status::Ok();
}

server::ServerOptions EmbeddedServerOptions(const RunOptions& o, const std::string& report_dir,
                                            const std::string& token) {
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
  so.metrics_public = o.metrics_public;
  return so;
}

std::string JobId(const RunOptions& o) {
  if (!o.job_id.empty()) return o.job_id;
  if (o.master_port) return fmt::format("{}:{}", o.master_addr, o.master_port);
  auto id = NewToken();
  return id.ok() ? id->substr(0, 16) : fmt::format("pid-{}", getpid());
}

agent::AgentOptions LocalAgentOptions(const RunOptions& o, const std::string& server,
                                      const std::string& token, bool embedded) {
  agent::AgentOptions ao;
  ao.server = server;
  ao.token = token;
  ao.job_id = JobId(o);
  if (!embedded) ao.tls = o.tls;  // the embedded server is on loopback, without TLS
  ao.profile_at_iteration = o.profile_at_iteration;
  for (int i = 0; i < o.nproc; ++i) ao.ranks.push_back(o.node_rank * o.nproc + i);
  return ao;
}

std::string ClosingSummary(const JobOutcome& j) {
  std::string ended = fmt::format("job ended (exit {}) after {}", j.exit_code, Elapsed(j.elapsed));
  if (j.progress.iteration >= 0)
    ended += fmt::format(", {} iterations, last {:.1f} ms", j.progress.iteration + 1,
                         j.progress.iteration_ms);
  if (j.embedded) {
    const server::RunSummary& sum = *j.embedded;
    ended += fmt::format("; {} window(s) diagnosed{}", sum.windows,
                         sum.hangs ? fmt::format(", {} hang(s)", sum.hangs) : "");
    if (!sum.attempts.empty()) {
      ended += fmt::format("\n  {} attempts (the ranks were started again):", sum.attempts.size());
      for (const std::string& a : sum.attempts) ended += "\n    " + a;
    }
    if (sum.has_latest && !sum.latest.findings.empty()) {
      const diagnose::Finding& top = sum.latest.findings[0];
      ended += fmt::format("\n  latest diagnosis: {} finding(s); first: {}",
                           sum.latest.findings.size(), top.summary);
    } else {
      ended += sum.has_latest ? "\n  latest diagnosis: no findings" : "\n  no diagnosis";
    }
    ended += fmt::format("\n  report: {}/diagnosis.json   log: {}", j.report_dir, j.log_path);
  } else {
    ended += fmt::format("; the diagnosis is at the server ({})\n  log: {}", j.server, j.log_path);
  }
  return ended;
}

}  // namespace perftracker::cli
