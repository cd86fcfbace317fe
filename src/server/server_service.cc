#include "server/server_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "base/credentials.h"
#include "base/json_writer.h"
#include "base/limits.h"
#include "server/server_impl.h"

namespace perftracker::server {

namespace {

std::string HardwareJson(const std::map<std::string, double>& values, const std::string& nvml) {
  JsonWriter w;
  w.BeginObject().Key("nvml").String(nvml).Key("values").BeginObject();
  for (const auto& [k, v] : values) w.Key(k).Number(v);
  w.EndObject().EndObject();
  return w.Take();
}

// gRPC does not catch exceptions: one escaping a handler or the timer would end the whole
// launcher with the job. An internal failure (memory, a bug) fails that one call instead,
// logged; the server goes on.
template <typename F>
grpc::Status Guarded(const char* rpc, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    log::Error("server", "{}: internal error, call refused: {}", rpc, e.what());
  } catch (...) {
    log::Error("server", "{}: internal error, call refused", rpc);
  }
  return {grpc::StatusCode::INTERNAL, std::string(rpc) + ": internal error in the server"};
}

}  // namespace

grpc::Status ServerService::Authorize(grpc::ServerContextBase* ctx) {
  if (s_.options.token.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("x-perftracker-token");
  if (it == md.end() ||
      !ConstantTimeEquals(std::string(it->second.data(), it->second.size()), s_.options.token))
    return {grpc::StatusCode::UNAUTHENTICATED, "missing or wrong perftracker token"};
  return grpc::Status::OK;
}

grpc::Status ServerService::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                     v1::RegisterReply* reply) {
  return Guarded("Register", [&] { return DoRegister(ctx, req, reply); });
}

grpc::Status ServerService::ReportIterations(grpc::ServerContext* ctx,
                                             const v1::ReportIterationsRequest* req,
                                             v1::ReportIterationsReply* reply) {
  return Guarded("ReportIterations", [&] { return DoReportIterations(ctx, req, reply); });
}

grpc::Status ServerService::UploadWindow(grpc::ServerContext* ctx,
                                         const v1::UploadWindowRequest* req,
                                         v1::UploadWindowReply* reply) {
  grpc::Status st = Guarded("UploadWindow", [&] { return DoUploadWindow(ctx, req, reply); });
  if (st.ok()) {
    std::lock_guard lk(s_.mu);
    s_.counters.CountUpload(reply->accepted(), req->summary().size());
  }
  return st;
}

grpc::Status ServerService::UploadStacks(grpc::ServerContext* ctx,
                                         const v1::UploadStacksRequest* req,
                                         v1::UploadStacksReply* reply) {
  return Guarded("UploadStacks", [&] { return DoUploadStacks(ctx, req, reply); });
}

grpc::Status ServerService::Trigger(grpc::ServerContext* ctx, const v1::TriggerRequest* req,
                                    v1::TriggerReply* reply) {
  return Guarded("Trigger", [&] { return DoTrigger(ctx, req, reply); });
}

grpc::Status ServerService::Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                                   v1::StatusReply* reply) {
  return Guarded("Status", [&] { return DoStatus(ctx, req, reply); });
}

grpc::Status ServerService::DoRegister(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                       v1::RegisterReply* reply) {
  if (auto st = Authorize(ctx); !st.ok()) return st;
  if (req->ranks_size() > limits::kMaxWorldSize)
    return {grpc::StatusCode::INVALID_ARGUMENT, "more ranks than a job can have"};
  if (req->job_id().size() > 256)
    return {grpc::StatusCode::INVALID_ARGUMENT, "job id longer than 256 bytes"};
  for (int r : req->ranks())
    if (!limits::ValidRank(r))
      return {grpc::StatusCode::INVALID_ARGUMENT, fmt::format("rank {} is out of range", r)};
  std::lock_guard lk(s_.mu);
  // One job at a time: two jobs' ranks in one diagnosis would compare rank 0 of one job with
  // rank 0 of the other. Once the first job's agents are gone (expired), a new job starts.
  if (!s_.job_key || *s_.job_key != req->job_id()) {
    if (s_.job_key && s_.agents.CountConnected(std::chrono::steady_clock::now()) > 0) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              fmt::format("this server collects job '{}' (its agents are connected); job '{}' "
                          "needs a server of its own",
                          log::Printable(*s_.job_key), log::Printable(req->job_id()))};
    }
    if (s_.job_key) {
      log::Event("server", "job '{}' replaces job '{}', whose agents are gone",
                 log::Printable(req->job_id()), log::Printable(*s_.job_key));
      s_.ranks.clear();
      s_.agents.Clear();  // the previous job's, all without a stream
      s_.sched->NewJob();
      s_.healthy.NewAttempt();
    }
    s_.job_key = req->job_id();
  }
  // Unguessable: an id is what lets a caller upload for its ranks and read their commands.
  auto secret = NewToken();
  if (!secret.ok()) return {grpc::StatusCode::INTERNAL, secret.status().message()};
  std::string id = s_.agents.NextId(*secret);
  AgentState& a = s_.agents.Add(id, req->host(), {req->ranks().begin(), req->ranks().end()},
                                std::chrono::steady_clock::now());
  for (int r : a.ranks) s_.ranks[r].host = a.host;
  reply->set_agent_id(id);
  log::Detail("server", "{} registered from {} (ranks {})", id, a.host,
              diagnose::RankList(a.ranks));
  return grpc::Status::OK;
}

grpc::Status ServerService::DoReportIterations(grpc::ServerContext* ctx,
                                               const v1::ReportIterationsRequest* req,
                                               v1::ReportIterationsReply*) {
  if (auto st = Authorize(ctx); !st.ok()) return st;
  std::lock_guard lk(s_.mu);
  AgentState* agent = s_.agents.Find(req->agent_id());
  if (agent == nullptr) return {grpc::StatusCode::NOT_FOUND, "unknown agent; register first"};
  agent->last_seen = std::chrono::steady_clock::now();
  if (req->has_window_received()) agent->window_received = req->window_received();
  agent->relays_workers |= req->relays_workers();
  if (std::isfinite(req->host_mem_available_bytes()) && req->host_mem_available_bytes() > 0)
    agent->memory.available_bytes = req->host_mem_available_bytes();
  if (std::isfinite(req->host_mem_total_bytes()) && req->host_mem_total_bytes() > 0)
    agent->memory.total_bytes = req->host_mem_total_bytes();
  s_.ReportIterationsLocked(req->agent_id(), agent->host, *req);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::Command>* ServerService::WatchCommands(
    grpc::CallbackServerContext* ctx, const v1::WatchRequest* req) {
  auto* stream = new CommandStream();
  if (auto st = Authorize(ctx); !st.ok()) {
    stream->Close(st);
    return stream;
  }
  std::lock_guard lk(s_.mu);
  if (s_.agents.Find(req->agent_id()) == nullptr || s_.shutting_down) {
    stream->Close(s_.shutting_down
                      ? grpc::Status::OK
                      : grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown agent; register first"));
    return stream;
  }
  // By id, not by reference: a silent agent may have expired when the stream ends.
  stream->on_done = [this, id = req->agent_id()](CommandStream* done,
                                                 std::deque<v1::Command> left) {
    std::lock_guard lk(s_.mu);
    s_.agents.StreamEnded(id, done, std::move(left), std::chrono::steady_clock::now());
  };
  s_.agents.StreamOpened(req->agent_id(), stream, std::chrono::steady_clock::now());
  return stream;
}

grpc::Status ServerService::DoUploadWindow(grpc::ServerContext* ctx,
                                           const v1::UploadWindowRequest* req,
                                           v1::UploadWindowReply* reply) {
  if (auto st = Authorize(ctx); !st.ok()) return st;
  if (!limits::ValidRank(req->rank())) {
    reply->set_accepted(false);
    reply->set_message(fmt::format("rank {} is out of range", req->rank()));
    return grpc::Status::OK;
  }
  RankUpload up;
  up.rank = req->rank();
  up.host = req->host();
  up.summary_bytes = req->summary();
  up.hardware.insert(req->hardware().values().begin(), req->hardware().values().end());
  up.nvml = req->hardware().nvml();
  std::string hw = HardwareJson(up.hardware, up.nvml);
  // Who may upload for the rank, and to which window: checked before the summary is inflated
  // (an upload of an agent that does not own the rank, or for no open window, costs no
  // decoding), and again after, since the window may close while the summary is parsed.
  std::unique_lock lk(s_.mu);
  auto admit = [&]() -> std::optional<grpc::Status> {
    if (grpc::Status own = s_.OwnsLocked(req->agent_id(), req->rank()); !own.ok()) {
      if (own.error_code() == grpc::StatusCode::NOT_FOUND) return own;
      reply->set_accepted(false);
      reply->set_message(own.error_message());
      return grpc::Status::OK;
    }
    const Window* open = s_.windows.Find(req->window_id());
    if (open == nullptr || open->closed()) {
      reply->set_accepted(false);
      reply->set_message(fmt::format("window {} is not open", req->window_id()));
      return grpc::Status::OK;
    }
    return std::nullopt;
  };
  if (auto refused = admit()) return *refused;
  // Parsing (inflate + decode) is most of an upload's cost and needs no shared state: done
  // without the lock, thousands of concurrent uploads parse in parallel.
  lk.unlock();
  auto parsed = Window::Parse(up, req->window_id());
  lk.lock();
  ++s_.counters.summaries_decoded;
  if (auto refused = admit()) return *refused;
  Window* window = s_.windows.Find(req->window_id());
  if (!parsed.ok()) {
    reply->set_accepted(false);
    reply->set_message(parsed.status().message());
    return grpc::Status::OK;
  }
  auto kept = window->AddParsed(std::move(up), *std::move(parsed));
  if (!kept.ok()) {
    reply->set_accepted(false);
    reply->set_message(kept.status().message());
    return grpc::Status::OK;
  }
  const Window::Kept& s = *kept;
  RankSummaryRow row;
  row.window_id = req->window_id();
  row.rank = s.rank;
  row.host = s.host;
  row.summary_bytes = static_cast<int64_t>(req->summary().size());
  row.iterations = static_cast<int>(s.iteration_ms.size());
  row.mean_iteration_ms = s.mean_iteration_ms;
  row.hardware_json = hw;
  row.summary = req->summary();
  // The window has the summary (it is in the diagnosis) even when the store failed: accepted,
  // with a message that says it was not stored.
  if (::perftracker::Status st = s_.store->AddRankSummary(row); !st.ok()) {
    log::Error("server", "{}", st.message());
    reply->set_message(fmt::format("accepted but not stored: {}", st.message()));
  }
  RankState& rs = s_.ranks[s.rank];
  if (rs.host.empty()) rs.host = s.host;
  // Without iteration reports (a folder-watching agent), the window's iterations are all the
  // server knows of the rank's pace.
  if (rs.count == 0) {
    for (double ms : s.iteration_ms) rs.Add(ms);
    rs.attempt_iterations += static_cast<int64_t>(s.iteration_ms.size());
  }
  log::Detail("server", "window {}: rank {} from {}, summary {} bytes", req->window_id(), s.rank,
              row.host, req->summary().size());
  reply->set_accepted(true);
  // The last expected upload closes the window; its reply waits for the diagnosis (a caller
  // that uploaded everything finds DIR/windows/<n>/diagnosis.json written), other calls don't.
  // The publisher thread makes it; this one only waits (it holds no CPU meanwhile).
  if (window->Complete()) {
    const int64_t id = req->window_id();
    s_.publishing.CloseLater(id);
    s_.publishing.WaitPublished(lk, id);
  }
  return grpc::Status::OK;
}

grpc::Status ServerService::DoUploadStacks(grpc::ServerContext* ctx,
                                           const v1::UploadStacksRequest* req,
                                           v1::UploadStacksReply* reply) {
  if (auto st = Authorize(ctx); !st.ok()) return st;
  std::lock_guard lk(s_.mu);
  HangCollection* hang = s_.hangs.collecting();
  if (!hang || hang->id != req->request_id() || req->rank() < 0 ||
      !s_.OwnsLocked(req->agent_id(), req->rank()).ok()) {
    reply->set_accepted(false);
    return grpc::Status::OK;
  }
  diagnose::RankStacks s;
  s.rank = req->rank();
  s.pid = req->pid();
  s.host = req->host();
  s.iteration = req->iteration();
  for (const auto& t : req->threads()) {
    diagnose::ThreadStack ts;
    ts.tid = t.tid();
    ts.name = t.name();
    ts.main = t.main();
    for (const auto& f : t.frames()) ts.frames.push_back({f.file(), f.line(), f.function()});
    s.threads.push_back(std::move(ts));
  }
  const auto& lc = req->last_collective();
  s.last_collective = {lc.op(), lc.count(), lc.file(), lc.line(), lc.in_progress(), lc.seconds()};
  const bool all_replied = hang->AddReply(std::move(s));
  reply->set_accepted(true);
  if (all_replied) hang->deadline = HangCollection::Clock::now();  // the timer finishes it
  s_.cv.notify_all();
  return grpc::Status::OK;
}

grpc::Status ServerService::DoTrigger(grpc::ServerContext* ctx, const v1::TriggerRequest* req,
                                      v1::TriggerReply* reply) {
  if (auto st = Authorize(ctx); !st.ok()) return st;
  std::lock_guard lk(s_.mu);
  const std::string& kind = req->kind();
  const auto now = std::chrono::steady_clock::now();
  s_.counters.CountTrigger(kind);
  if (kind == "hang") {
    s_.sched->OnHangTrigger(req->rank(), req->mean_ms(), FurthestStep(s_.ranks), now);
    if (auto p = s_.sched->TakeConfirmedHang(now))  // hang_confirm_seconds <= 0: at once
      s_.hangs.Start(p->rank, p->mean_ms, p->since);
    const HangCollection* hang = s_.hangs.collecting();
    reply->set_window_id(hang ? hang->id : 0);
    reply->set_already_open(true);
    return grpc::Status::OK;
  }
  std::string reason = req->reason().empty() ? "trigger" : req->reason();
  const bool slowdown = kind == "slowdown";
  if (slowdown) {
    reason = fmt::format(
        "slowdown on rank {}: median of its recent iterations {:.1f} ms vs {:.1f} ms after "
        "warm-up",
        req->rank(), req->mean_ms(), req->best_ms());
    switch (s_.sched->OnSlowdown(req->iteration(), req->mean_ms(), reason, now)) {
      case WindowScheduler::SlowdownAction::kIgnore:
        // Why no window opened is the first question when one was expected.
        log::Detail("server", "slowdown trigger of rank {} at iteration {} ({:.1f} ms) ignored: {}",
                    req->rank(), req->iteration(), req->mean_ms(), s_.sched->IgnoredBecause());
        reply->set_already_open(true);
        return grpc::Status::OK;
      case WindowScheduler::SlowdownAction::kFollowUp:
        reply->set_window_id(s_.sched->open_window());
        reply->set_already_open(true);
        return grpc::Status::OK;
      case WindowScheduler::SlowdownAction::kOpen:
        break;
    }
  } else {
    // The caller's host (gRPC's peer is "ipv4:1.2.3.4:PORT"; the port changes per call).
    std::string peer = ctx->peer();
    peer = peer.substr(0, peer.rfind(':'));
    if (::perftracker::Status st = s_.sched->OnUserTrigger(peer, now); !st.ok())
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, st.message()};
  }
  // A worker's trigger names the step its rank reached; a user's (perftracker trigger) none.
  TriggerResult r = s_.OpenWindowLocked(reason, req->iterations(), slowdown, req->mean_ms(),
                                        req->iteration() > 0 ? req->iteration() : -1);
  reply->set_window_id(r.window_id);
  reply->set_start_iteration(r.start_iteration);
  reply->set_already_open(r.already_open);
  return grpc::Status::OK;
}

grpc::Status ServerService::DoStatus(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                                     v1::StatusReply* reply) {
  if (auto st = Authorize(ctx); !st.ok()) return st;
  // A page: about 60 bytes a rank, well under gRPC's 4 MB.
  constexpr int kPageRanks = 10000, kDefaultWindows = 20, kMaxListedRanks = 1000;
  const int limit = req->max_ranks() > 0 ? std::min(req->max_ranks(), kPageRanks) : kPageRanks;
  std::lock_guard lk(s_.mu);
  reply->set_agents(static_cast<int>(s_.agents.size()));
  if (s_.job_key) reply->set_job_id(*s_.job_key);
  reply->set_connected_agents(
      static_cast<int>(s_.agents.CountConnected(std::chrono::steady_clock::now())));
  reply->set_total_ranks(static_cast<int>(s_.ranks.size()));
  reply->set_total_windows(static_cast<int>(s_.windows.windows().size()));
  const int offset = std::max(req->rank_offset(), 0);
  int index = 0;
  for (const auto& [r, st] : s_.ranks) {
    if (index++ < offset) continue;
    if (reply->ranks_size() >= limit) {
      reply->set_next_rank_offset(index - 1);
      break;
    }
    v1::RankStatus* rs = reply->add_ranks();
    rs->set_rank(r);
    rs->set_host(st.host);
    rs->set_last_step(st.last_step);
    rs->set_last_iteration_ms(st.last_ms);
    rs->set_mean_iteration_ms(st.count ? st.sum_ms / st.count : 0);
  }
  if (offset > 0) return grpc::Status::OK;
  const int max_windows = req->max_windows() > 0 ? req->max_windows() : kDefaultWindows;
  const WindowBook::Map& book = s_.windows.windows();
  auto first = book.begin();
  if (book.size() > static_cast<size_t>(max_windows)) first = std::prev(book.end(), max_windows);
  for (auto it = first; it != book.end(); ++it) {
    const Window& w = *it->second;
    v1::WindowStatus* ws = reply->add_windows();
    ws->set_window_id(it->first);
    ws->set_state(w.closed() ? "done" : "open");
    ws->set_start_iteration(w.spec().start_iteration);
    ws->set_iterations(w.spec().iterations);
    const std::vector<int> reported = w.Reported(), missing = w.Missing();
    ws->set_reported(static_cast<int>(reported.size()));
    ws->set_missing(static_cast<int>(missing.size()));
    for (size_t k = 0; k < reported.size() && k < kMaxListedRanks; ++k)
      ws->add_reported_ranks(reported[k]);
    for (size_t k = 0; k < missing.size() && k < kMaxListedRanks; ++k)
      ws->add_missing_ranks(missing[k]);
  }
  return grpc::Status::OK;
}

}  // namespace perftracker::server
