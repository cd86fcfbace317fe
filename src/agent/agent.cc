#include "agent/agent.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "agent/memory_envelope.h"
#include "agent/nvml_sampler.h"
#include "agent/proc_sampler.h"
#include "agent/retry.h"
#include "base/background.h"
#include "base/log.h"
#include "base/net.h"
#include "base/start_thread.h"
#include "pattern/merge.h"
#include "pattern/summarizer.h"
#include "pattern/summary_io.h"
#include "perftracker.grpc.pb.h"

namespace perftracker::agent {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;

namespace {

// Agent::Flush looks this often whether the workers' connections have closed: a worker's socket
// is read to its end within a few ms of its process ending.
constexpr auto kFlushConnectionPoll = std::chrono::milliseconds(5);

bool IsTrace(const fs::path& p) {
  std::string name = p.filename().string();
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".json") || ends(".json.gz");
}

void AddToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("x-perftracker-token", token);
}

// A unary call's context: the token, and a deadline SECONDS from now.
void Prepare(grpc::ClientContext* ctx, const std::string& token, double seconds) {
  AddToken(ctx, token);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::duration<double>(seconds)));
}

Status FromGrpc(const grpc::Status& st, const std::string& what) {
  if (st.ok()) return Status::Ok();
  if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      st.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
    return InvalidArgument(fmt::format("{}: refused by the server: {}", what, st.error_message()));
  return Unavailable(fmt::format("{}: {}", what, st.error_message()));
}

// A channel to SERVER: TLS when TLS files are given (a server off loopback wants it). A TOKEN
// never crosses a network in clear text: without TLS it goes to a loopback server only.
StatusOr<std::unique_ptr<v1::Server::Stub>> MakeStub(const std::string& server, const TlsFiles& tls,
                                                     const std::string& token) {
  if (!token.empty() && !tls.enabled() && !IsLoopbackAddress(server))
    return InvalidArgument(fmt::format(
        "{}: not sending the token in clear text to a server off this machine: give --tls-ca "
        "(the server then needs --tls-cert and --tls-key)",
        server));
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (tls.enabled()) {
    PT_ASSIGN_OR_RETURN(TlsPem pem, ReadTls(tls, /*server=*/false));
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.ca;
    ssl.pem_private_key = pem.key;
    ssl.pem_cert_chain = pem.cert;
    creds = grpc::SslCredentials(ssl);
  }
  return v1::Server::NewStub(grpc::CreateCustomChannel(server, creds, args));
}

}  // namespace

FolderSink::FolderSink(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) seen_.insert(e.path().string());
}

Status FolderSink::StartWindow(const WindowCommand&) { return Status::Ok(); }

std::vector<WorkerTrace> FolderSink::PollFinished() {
  std::vector<WorkerTrace> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    std::string p = e.path().string();
    if (seen_.count(p) || !e.is_regular_file(ec) || !IsTrace(e.path())) continue;
    uintmax_t size = e.file_size(ec);
    if (ec) continue;
    auto it = sizes_.find(p);
    // Stable across two polls: the writer is done (writers should still rename into place).
    if (it != sizes_.end() && it->second == size && size > 0) {
      seen_.insert(p);
      sizes_.erase(it);
      WorkerTrace t;
      t.paths = {p};
      out.push_back(std::move(t));
    } else {
      sizes_[p] = size;
    }
  }
  return out;
}

struct Agent::Impl {
  AgentOptions options;
  std::unique_ptr<AgentLocalSink> sink;
  std::unique_ptr<v1::Server::Stub> stub;
  std::string agent_id;
  NvmlSampler nvml;
  ProcSampler proc;
  // Each worker's highest and lowest RSS between reports (its own thread samples it).
  MemoryEnvelope envelope;

  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  // Agent::Flush: a round asked for now, whether one is under way, rounds completed so far.
  bool flush_wanted = false;
  bool in_round = false;
  uint64_t rounds = 0;
  std::condition_variable round_cv;
  grpc::ClientContext* watch_ctx = nullptr;
  std::optional<WindowCommand> window;  // the window being profiled
  bool window_started = false;
  int64_t window_received = 0;  // the newest window command from the server
  // Registered (again): the next report says the window received and every worker, since a
  // new server knows none of it.
  bool report_all = true;
  // Run's thread only: what the server has not yet acknowledged (worker statuses by pid, the
  // window received as last reported).
  std::map<int, WorkerStatus> unsent_workers;
  int64_t window_received_sent = -1;
  // Worker statuses in one report, at most (the rest follow in the next).
  static constexpr size_t kMaxWorkersPerReport = 4096;
  // For Progress(), under mu: each local rank's latest iteration.
  std::map<int, IterationReport> latest;
  // Under mu, by worker pid: its memory cgroup and resident memory at its latest iteration
  // report, for MemoryAtEnd (the folder must be known from before: a dead process is in none).
  std::map<int, WorkerMemory> worker_memory;
  std::string last_trigger;
  int window_uploads = 0;

  // Window traces waiting for the post-processing thread (PostLoop), under mu. Summarizing and
  // uploading them is the node's work after a window: it runs on that one thread at the lowest
  // CPU priority (base/background.h), off the loop that relays iterations, triggers and
  // commands, so that neither training nor the detector's messages wait for it.
  struct Finished {
    WindowCommand window;
    WorkerTrace trace;
    std::map<std::string, double> hardware;
  };
  // A window brings one entry per worker of the node; more than this waiting means the thread
  // cannot keep up (a node of hundreds of workers, windows back to back): the excess is dropped
  // and logged, and the server reports those ranks as missing from the window.
  static constexpr size_t kMaxWaitingTraces = 1024;
  std::deque<Finished> finished;
  bool post_done = false;  // the loop has ended: PostLoop drains what is left, then returns
  std::condition_variable post_cv;
  void PostLoop();

  void WatchLoop() {
    while (true) {
      grpc::ClientContext ctx;
      AddToken(&ctx, options.token);
      {
        std::lock_guard lk(mu);
        if (stopping) return;
        watch_ctx = &ctx;
      }
      v1::WatchRequest req;
      req.set_agent_id(AgentId());
      auto reader = stub->WatchCommands(&ctx, req);
      v1::Command cmd;
      while (reader->Read(&cmd)) {
        if (cmd.has_stacks()) {
          log::Detail("agent", "hang: asking workers for their stacks");
          if (Status st = sink->RequestStacks(cmd.stacks().request_id()); !st.ok())
            log::Error("agent", "{}", st.message());
          continue;
        }
        if (!cmd.has_profile()) continue;
        WindowCommand w{cmd.profile().window_id(),
                        cmd.profile().start_iteration(),
                        cmd.profile().iterations(),
                        cmd.profile().max_seconds(),
                        cmd.profile().record_shapes(),
                        {cmd.profile().memory_ranks().begin(), cmd.profile().memory_ranks().end()}};
        log::Detail("agent", "profile window {} from iteration {}", w.window_id, w.start_iteration);
        if (Status st = sink->StartWindow(w); !st.ok()) log::Error("agent", "{}", st.message());
        std::lock_guard lk(mu);
        window = w;
        window_received = std::max(window_received, w.window_id);
        window_started = false;
        window_uploads = 0;
        cv.notify_all();
      }
      grpc::Status st = reader->Finish();
      {
        std::unique_lock lk(mu);
        watch_ctx = nullptr;
        if (stopping) return;
        // The server went away or restarted the stream: retry after a pause.
        cv.wait_for(lk, std::chrono::seconds(1), [&] { return stopping; });
        if (stopping) return;
      }
      // A restarted server does not know this agent: register again, or every later window
      // would go by without it.
      if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
        log::Event("agent", "the server does not know this agent (restarted?): registering again");
        if (Status r = Register(); !r.ok()) log::Error("agent", "{}", r.message());
      }
    }
  }

  std::string AgentId() {
    std::lock_guard lk(mu);
    return agent_id;
  }

  // Registers with the server, retrying until it answers, refuses, or the agent stops.
  Status Register() {
    v1::RegisterRequest req;
    req.set_host(options.host);
    req.set_job_id(options.job_id);
    for (int r : options.ranks) req.add_ranks(r);
    v1::RegisterReply reply;
    // Another job's agents still connected: that job may be ending (the server counts an agent
    // as connected for seconds after its last call); wait that long before giving up.
    constexpr auto kOtherJobWait = std::chrono::seconds(15);
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      grpc::ClientContext ctx;
      Prepare(&ctx, options.token, 2);
      grpc::Status st = stub->Register(&ctx, req, &reply);
      if (st.ok()) break;
      if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          st.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
           std::chrono::steady_clock::now() - start > kOtherJobWait))
        return FromGrpc(st, fmt::format("agent: {}", options.server));
      std::unique_lock lk(mu);
      if (cv.wait_for(lk, std::chrono::milliseconds(500), [&] { return stopping; }))
        return Status::Ok();
    }
    std::lock_guard lk(mu);
    agent_id = reply.agent_id();
    report_all = true;
    log::Detail("agent", "registered with {} as {}; nvml {}", options.server, agent_id,
                nvml.status());
    return Status::Ok();
  }

  void ForwardTrigger(const WorkerTrigger& t);
  void Report(const std::vector<IterationReport>& iters);
  // The sampler thread: each watched worker's RSS every MemoryEnvelope::kSampleInterval.
  void SampleMemoryLoop();
  void UploadStacks(int64_t request_id, const pattern::RankStacks& s);

  // One upload RPC under the retry policy, each attempt with its own deadline; the waits end
  // early when the agent stops.
  template <typename Req, typename Reply>
  grpc::Status Deliver(grpc::Status (v1::Server::Stub::*rpc)(grpc::ClientContext*, const Req&,
                                                             Reply*),
                       const Req& req, Reply* reply, int deadline_s, const std::string& what) {
    auto call = [&] {
      grpc::ClientContext ctx;
      Prepare(&ctx, options.token, deadline_s);
      return (stub.get()->*rpc)(&ctx, req, reply);
    };
    auto transient = [](const grpc::Status& st) {
      const auto c = st.error_code();
      return c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::DEADLINE_EXCEEDED ||
             c == grpc::StatusCode::RESOURCE_EXHAUSTED || c == grpc::StatusCode::ABORTED;
    };
    int failures = 0;
    auto attempt = [&] {
      grpc::Status st = call();
      if (!st.ok() && transient(st)) {
        log::Detail("agent", "{}: upload attempt {} failed: {}", what, ++failures,
                    st.error_message());
      }
      return st;
    };
    auto wait = [&](std::chrono::milliseconds d) {
      std::unique_lock lk(mu);
      return !cv.wait_for(lk, d, [&] { return stopping; });
    };
    return CallWithRetry(RetryPolicy{}, attempt, transient, wait);
  }

  void UploadTrace(const WindowCommand& w, const WorkerTrace& t,
                   const std::map<std::string, double>& hw) {
    if (t.paths.empty()) return;
    // The first trace that reads owns the iterations; the others are merged into it.
    std::optional<pattern::RankSummary> merged;
    for (const std::string& path : t.paths) {
      // A torch trace merged into the window's Python trace: that one's iterations are the
      // window's (pattern/merge.h).
      auto s = pattern::SummarizeTrace(path, {}, merged.has_value());
      if (!s.ok()) {
        log::Error("agent", "{}", s.status().message());
        continue;
      }
      if (!merged) {
        merged = std::move(*s);
      } else {
        pattern::MergeWindowSummary(&*merged, *s);
      }
    }
    if (!merged) return;
    pattern::RankSummary* summary = &*merged;
    int rank = t.rank >= 0 ? t.rank : summary->rank;
    if (summary->source.empty() || t.paths.size() > 1) summary->source = t.paths[0];
    if (rank < 0 && options.ranks.size() == 1) rank = options.ranks[0];
    summary->rank = rank;
    // The server needs the world size to know whom a window waits for when the agent could not
    // declare its ranks (the command launched them).
    if (summary->world_size <= 0 && t.world_size > 0) summary->world_size = t.world_size;
    // The agent's node name (never empty: NodeName()) wins over the trace's: torch 2.x Kineto
    // writes the OS host name, not the scheduler's name for the node (SLURMD_NODENAME, a pod).
    summary->host = options.host;
    summary->missing_part = t.missing_part;
    summary->missing_why = t.missing_why;
    std::string bytes = pattern::SerializeSummary(*summary);
    v1::UploadWindowRequest req;
    req.set_agent_id(AgentId());
    req.set_window_id(w.window_id);
    req.set_rank(rank);
    req.set_host(options.host);
    req.set_summary(bytes);
    req.mutable_hardware()->mutable_values()->insert(hw.begin(), hw.end());
    req.mutable_hardware()->set_nvml(nvml.status());
    v1::UploadWindowReply reply;
    grpc::Status st = Deliver(&v1::Server::Stub::UploadWindow, req, &reply, 30,
                              fmt::format("window {} rank {}", w.window_id, rank));
    log::Detail("agent", "window {} rank {}: summary {} bytes ({}), upload {}{}", w.window_id, rank,
                bytes.size(), bytes.size() <= 100 * 1024 ? "under 100 KB" : "over 100 KB",
                st.ok() && reply.accepted() ? "accepted" : "refused: ",
                st.ok() ? reply.message() : st.error_message());
  }
};

void Agent::Impl::ForwardTrigger(const WorkerTrigger& t) {
  v1::TriggerRequest req;
  req.set_kind(t.kind);
  req.set_rank(t.rank);
  req.set_iteration(t.iteration);
  req.set_mean_ms(t.mean_ms);
  req.set_best_ms(t.best_ms);
  req.set_reason(t.kind == "user" ? fmt::format("--profile-at-iteration {}", t.iteration)
                                  : fmt::format("{} on rank {}", t.kind, t.rank));
  grpc::ClientContext ctx;
  Prepare(&ctx, options.token, 5);
  v1::TriggerReply reply;
  grpc::Status st = stub->Trigger(&ctx, req, &reply);
  log::Detail("agent", "rank {} detector: {} (mean {:.1f} ms{}){}{}", t.rank, t.kind, t.mean_ms,
              t.best_ms > 0 ? fmt::format(", best {:.1f} ms", t.best_ms) : "",
              st.ok() ? "" : ": server unreachable: ", st.ok() ? "" : st.error_message());
}

void Agent::Impl::Report(const std::vector<IterationReport>& iters) {
  int64_t received = 0;
  bool all = false;
  {
    std::lock_guard lk(mu);
    for (const auto& it : iters) {
      IterationReport& l = latest[it.rank];
      // A restarted rank (a later attempt) numbers its iterations from 0 again.
      if (it.step >= l.step || it.attempt != l.attempt) l = it;
    }
    received = window_received;
    all = std::exchange(report_all, false);
  }
  if (all) window_received_sent = -1;
  for (WorkerStatus& w : all ? sink->AllWorkers() : sink->PollWorkerChanges())
    unsent_workers[w.pid] = w;
  if (iters.empty() && unsent_workers.empty() && received == window_received_sent) return;
  v1::ReportIterationsRequest ir;
  ir.set_agent_id(AgentId());
  ir.set_window_received(received);
  ir.set_relays_workers(sink->RelaysWorkers());
  std::map<std::pair<int, int>, v1::IterationBatch*> by_worker;  // (rank, pid)
  for (const auto& it : iters) {
    if (options.profile_at_iteration >= 0 && it.step >= options.profile_at_iteration) {
      options.profile_at_iteration = -1;
      ForwardTrigger({it.rank, "user", it.step, it.iteration_ms, 0});
    }
    auto& b = by_worker[{it.rank, it.pid}];
    if (!b) {
      b = ir.add_batches();
      b->set_rank(it.rank);
      b->set_pid(it.pid);
      b->set_attempt(it.attempt);
    }
    b->add_steps(it.step);
    b->add_iteration_ms(it.iteration_ms);
    if (it.cuda) {
      b->set_cuda_allocated_bytes(it.cuda->allocated);
      b->set_cuda_reserved_bytes(it.cuda->reserved);
      b->set_cuda_peak_allocated_bytes(it.cuda->peak_allocated);
    }
  }
  // Each worker's resident memory, always (one small /proc read per worker and report): a leak
  // shows over the run, not within a window (diagnose/memory_growth.h).
  if (!by_worker.empty()) {
    static const double kPage = static_cast<double>(sysconf(_SC_PAGESIZE));
    const int64_t host_oom_kills = ReadHostOomKills();
    // And the GPU memory each worker holds (NVML's per-process usage: one call per GPU).
    const std::map<int, NvmlSampler::ProcessGpuMemory> gpu_memory = nvml.ProcessMemory();
    for (auto& [key, b] : by_worker) {
      if (key.second <= 0) continue;
      if (auto g = gpu_memory.find(key.second); g != gpu_memory.end()) {
        b->set_gpu_memory_bytes(g->second.used_bytes);
        b->set_gpu_index(g->second.gpu);
        if (g->second.free_bytes >= 0) b->set_gpu_free_bytes(g->second.free_bytes);
        if (g->second.total_bytes > 0) b->set_gpu_total_bytes(g->second.total_bytes);
      }
      // A worker that died since its last iterations (a zombie has no resident memory, and is
      // in the root cgroup) keeps what was read while it lived: MemoryAtEnd compares with that.
      auto mem = ReadPidMemory(key.second);
      if (!mem.ok() || mem->rss_pages == 0) continue;
      WorkerMemory wm;
      wm.rss_bytes = static_cast<double>(mem->rss_pages) * kPage;
      b->set_rss_bytes(wm.rss_bytes);
      if (auto range = envelope.Take(key.second, MemoryEnvelope::Clock::now(), wm.rss_bytes)) {
        b->set_rss_max_bytes(range->high);
        b->set_rss_min_bytes(range->low);
      }
      wm.cgroup = ReadCgroupMemory(key.second);
      if (wm.cgroup.limit_bytes > 0) b->set_cgroup_memory_limit_bytes(wm.cgroup.limit_bytes);
      if (wm.cgroup.usage_bytes >= 0) b->set_cgroup_memory_usage_bytes(wm.cgroup.usage_bytes);
      wm.step = b->steps_size() > 0 ? b->steps(b->steps_size() - 1) : -1;
      wm.host_oom_kills = host_oom_kills;
      std::lock_guard lk(mu);
      // The counts one report earlier too: a reading taken while the killed worker was still
      // exiting already holds its own kill.
      wm.oom_kills_before = wm.cgroup.oom_kills;
      wm.host_oom_kills_before = host_oom_kills;
      if (auto prev = worker_memory.find(key.second); prev != worker_memory.end()) {
        if (prev->second.cgroup.dir == wm.cgroup.dir)
          wm.oom_kills_before = prev->second.cgroup.oom_kills;
        wm.host_oom_kills_before = prev->second.host_oom_kills;
      }
      if (worker_memory.size() < kMaxWorkersPerReport || worker_memory.count(key.second))
        worker_memory[key.second] = std::move(wm);
    }
    std::vector<int> pids;
    for (const auto& [key, b] : by_worker)
      if (key.second > 0) pids.push_back(key.second);
    envelope.Watch(pids);
    const HostMemory host = ReadHostMemory();
    if (host.available_bytes > 0) ir.set_host_mem_available_bytes(host.available_bytes);
    if (host.total_bytes > 0) ir.set_host_mem_total_bytes(host.total_bytes);
  }
  std::vector<int> sent;
  for (const auto& [pid, w] : unsent_workers) {
    if (sent.size() >= kMaxWorkersPerReport) break;
    v1::WorkerState* ws = ir.add_workers();
    ws->set_rank(w.rank);
    ws->set_pid(w.pid);
    ws->set_window_sent(w.window_sent);
    ws->set_window_acked(w.window_acked);
    ws->set_window_accepted(w.window_accepted);
    ws->set_exited(w.exited);
    ws->set_exit_message(w.exit_message);
    ws->set_process_gone(w.process_gone);
    ws->set_last_iteration(w.last_iteration);
    ws->set_attempt(w.attempt);
    ws->set_exited_unix_seconds(w.exited_unix_s);
    sent.push_back(pid);
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, options.token, 5);
  v1::ReportIterationsReply rr;
  // Iterations are best effort (the next batch follows); worker statuses and the window
  // received go again until the server has them.
  if (!stub->ReportIterations(&ctx, ir, &rr).ok()) return;
  window_received_sent = received;
  for (int pid : sent) unsent_workers.erase(pid);
}

void Agent::Impl::UploadStacks(int64_t request_id, const pattern::RankStacks& s) {
  v1::UploadStacksRequest req;
  req.set_agent_id(AgentId());
  req.set_request_id(request_id);
  req.set_rank(s.rank);
  req.set_host(s.host.empty() ? options.host : s.host);
  req.set_pid(s.pid);
  req.set_iteration(s.iteration);
  for (const auto& t : s.threads) {
    v1::ThreadStack* ts = req.add_threads();
    ts->set_tid(t.tid);
    ts->set_name(t.name);
    ts->set_main(t.main);
    for (const auto& f : t.frames) {
      v1::StackFrame* fr = ts->add_frames();
      fr->set_file(f.file);
      fr->set_line(f.line);
      fr->set_function(f.function);
    }
  }
  const pattern::LastCollective& lc = s.last_collective;
  v1::LastCollective* out = req.mutable_last_collective();
  out->set_op(lc.op);
  out->set_count(lc.count);
  out->set_file(lc.file);
  out->set_line(lc.line);
  out->set_in_progress(lc.in_progress);
  out->set_seconds(lc.seconds);
  v1::UploadStacksReply reply;
  grpc::Status st = Deliver(&v1::Server::Stub::UploadStacks, req, &reply, 10,
                            fmt::format("stacks of rank {}", s.rank));
  if (!st.ok())
    log::Error("agent", "stacks of rank {} not delivered: {}", s.rank, st.error_message());
}

Agent::Agent(AgentOptions options, std::unique_ptr<AgentLocalSink> sink)
    : impl_(std::make_unique<Impl>()) {
  if (options.host.empty()) options.host = NodeName();
  impl_->options = std::move(options);
  impl_->sink = std::move(sink);
  impl_->proc.set_loader_dir(impl_->sink->LoaderStatsDir());
}

Agent::~Agent() { Stop(); }

Status Agent::Run() {
  Impl& m = *impl_;
  PT_ASSIGN_OR_RETURN(m.stub, MakeStub(m.options.server, m.options.tls, m.options.token));
  PT_RETURN_IF_ERROR(m.Register());
  if (m.AgentId().empty()) return Status::Ok();  // stopped before the server answered
  std::thread watcher;
  PT_RETURN_IF_ERROR(StartThread(&watcher, [&m] { m.WatchLoop(); }));
  std::thread post;
  if (Status st = StartThread(&post, [&m] { m.PostLoop(); }); !st.ok()) {
    Stop();
    watcher.join();
    return st;
  }
  std::thread sampler;
  if (Status st = StartThread(&sampler, [&m] { m.SampleMemoryLoop(); }); !st.ok()) {
    Stop();
    watcher.join();
    {
      std::lock_guard lk(m.mu);
      m.post_done = true;
    }
    m.post_cv.notify_all();
    post.join();
    return st;
  }

  std::unique_lock lk(m.mu);
  while (!m.stopping) {
    m.cv.wait_for(lk, std::chrono::duration<double>(m.options.poll_seconds),
                  [&m] { return m.stopping || m.flush_wanted; });
    if (m.stopping) break;
    m.flush_wanted = false;
    m.in_round = true;
    std::optional<WindowCommand> w = m.window;
    bool begin = w && !m.window_started;
    if (begin) m.window_started = true;
    lk.unlock();
    m.Report(m.sink->PollIterations());
    for (const WorkerTrigger& t : m.sink->PollTriggers()) {
      {
        std::lock_guard plk(m.mu);
        m.last_trigger = fmt::format("{} on rank {}", t.kind, t.rank);
      }
      m.ForwardTrigger(t);
    }
    for (const auto& [id, stacks] : m.sink->PollStacks()) m.UploadStacks(id, stacks);
    if (begin) {
      m.proc.Begin(m.sink->WorkerPids());
      m.nvml.Begin();
    }
    if (w) {
      m.proc.Tick();
      for (WorkerTrace& t : m.sink->PollFinished()) {
        // The window's hardware figures end now, when the trace is in; the rest waits.
        std::map<std::string, double> hw = m.proc.End(t.pid);
        for (const auto& [k, v] : m.nvml.Sample()) hw[k] = v;
        std::lock_guard plk(m.mu);
        if (m.finished.size() >= Impl::kMaxWaitingTraces) {
          log::Error("agent", "window {}: {} traces wait to be summarized; rank {}'s dropped",
                     w->window_id, m.finished.size(), t.rank);
          continue;
        }
        m.finished.push_back({*w, std::move(t), std::move(hw)});
        m.post_cv.notify_one();
      }
    }
    lk.lock();
    m.in_round = false;
    ++m.rounds;
    m.round_cv.notify_all();
  }
  m.post_done = true;
  m.post_cv.notify_all();
  lk.unlock();
  post.join();
  sampler.join();
  watcher.join();
  return Status::Ok();
}

void Agent::Impl::SampleMemoryLoop() {
  // Named, at the normal priority: at the lowest it would miss its readings exactly while the
  // ranks take every core (its work is ~10 us a worker every 50 ms).
  pthread_setname_np(pthread_self(), "pt-agent-rss");
  static const double kPage = static_cast<double>(sysconf(_SC_PAGESIZE));
  const auto read = [](int pid) {
    auto mem = ReadPidMemory(pid);
    return mem.ok() ? static_cast<double>(mem->rss_pages) * kPage : 0.0;
  };
  std::unique_lock lk(mu);
  while (!cv.wait_for(lk, MemoryEnvelope::kSampleInterval, [&] { return stopping; })) {
    lk.unlock();
    envelope.SampleOnce(MemoryEnvelope::Clock::now(), read);
    lk.lock();
  }
}

void Agent::Impl::PostLoop() {
  if (Status st = BecomeBackgroundThread("pt-agent-post"); !st.ok())
    log::Detail("agent", "{}", st.message());
  std::unique_lock lk(mu);
  for (;;) {
    post_cv.wait(lk, [&] { return !finished.empty() || post_done; });
    if (finished.empty()) return;  // post_done, and nothing left
    Finished f = std::move(finished.front());
    finished.pop_front();
    lk.unlock();
    UploadTrace(f.window, f.trace, f.hardware);
    if (f.trace.pid > 0) sink->WindowUploaded(f.trace.pid, f.window.window_id);
    lk.lock();
    if (window && window->window_id == f.window.window_id) ++window_uploads;
    // The window that answered the trigger is in: the detector watches again.
    if (window_uploads >= static_cast<int>(latest.size())) last_trigger.clear();
  }
}

std::optional<MemoryEnd> Agent::MemoryAtEnd(int pid) const {
  WorkerMemory last;
  {
    std::lock_guard lk(impl_->mu);
    auto it = impl_->worker_memory.find(pid);
    if (it == impl_->worker_memory.end()) return std::nullopt;
    last = it->second;
  }
  MemoryEnd end;
  end.last = last;
  end.now = ReadCgroupMemoryAt(last.cgroup.dir);
  const int64_t host_now = ReadHostOomKills();
  end.oom_killed = (last.oom_kills_before >= 0 && end.now.oom_kills > last.oom_kills_before) ||
                   (last.host_oom_kills_before >= 0 && host_now > last.host_oom_kills_before);
  return end;
}

AgentProgress Agent::Progress() const {
  std::lock_guard lk(impl_->mu);
  AgentProgress p;
  std::vector<double> ms;
  for (const auto& [rank, it] : impl_->latest) {
    ++p.ranks;
    p.iteration = std::max(p.iteration, it.step);
    ms.push_back(it.iteration_ms);
  }
  if (!ms.empty()) {
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    p.iteration_ms = ms[ms.size() / 2];
  }
  p.trigger = impl_->last_trigger;
  p.window = impl_->window ? impl_->window->window_id : 0;
  p.window_uploads = impl_->window_uploads;
  return p;
}

bool Agent::Flush(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // A worker's last messages are all read once its connection has closed.
  while (!m.sink->WorkerPids().empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kFlushConnectionPoll);
  }
  std::unique_lock lk(m.mu);
  // A round under way may have polled before the last messages came: the one after it counts.
  const uint64_t target = m.rounds + (m.in_round ? 2 : 1);
  m.flush_wanted = true;
  m.cv.notify_all();
  return m.round_cv.wait_until(lk, deadline, [&] { return m.rounds >= target || m.stopping; }) &&
         m.rounds >= target;
}

void Agent::Stop() {
  std::lock_guard lk(impl_->mu);
  impl_->stopping = true;
  if (impl_->watch_ctx) impl_->watch_ctx->TryCancel();
  impl_->cv.notify_all();
}

StatusOr<std::string> TriggerNow(const std::string& server, const std::string& token,
                                 const TlsFiles& tls, const std::string& reason) {
  PT_ASSIGN_OR_RETURN(auto stub, MakeStub(server, tls, token));
  grpc::ClientContext ctx;
  Prepare(&ctx, token, 10);
  v1::TriggerRequest req;
  req.set_reason(reason);
  v1::TriggerReply reply;
  PT_RETURN_IF_ERROR(FromGrpc(stub->Trigger(&ctx, req, &reply), "trigger"));
  return fmt::format("window {} {} at iteration {}\n", reply.window_id(),
                     reply.already_open() ? "already open" : "opened", reply.start_iteration());
}

StatusOr<std::string> ServerStatus(const std::string& server, const std::string& token,
                                   const TlsFiles& tls) {
  PT_ASSIGN_OR_RETURN(auto stub, MakeStub(server, tls, token));
  std::string out;
  int offset = 0;
  // Page by page: a large job's ranks do not fit one reply.
  for (int page = 0;; ++page) {
    grpc::ClientContext ctx;
    Prepare(&ctx, token, 10);
    v1::StatusRequest req;
    req.set_rank_offset(offset);
    v1::StatusReply reply;
    PT_RETURN_IF_ERROR(FromGrpc(stub->Status(&ctx, req, &reply), "status"));
    if (page == 0) {
      out += reply.agents() == 0 && reply.job_id().empty()
                 ? std::string("job: none yet\n")
                 : fmt::format("job: {} holds this server ({} of its agents connected)\n",
                               reply.job_id().empty()
                                   ? std::string("one without a --job-id")
                                   : fmt::format("'{}'", log::Printable(reply.job_id())),
                               reply.connected_agents());
      out += fmt::format("agents: {}\n", reply.agents());
    }
    for (const auto& r : reply.ranks())
      out += fmt::format("rank {} on {}: last step {}, last {:.2f} ms, mean {:.2f} ms\n", r.rank(),
                         log::Printable(r.host()), r.last_step(), r.last_iteration_ms(),
                         r.mean_iteration_ms());
    for (const auto& w : reply.windows()) {
      std::vector<int> rep(w.reported_ranks().begin(), w.reported_ranks().end());
      std::vector<int> mis(w.missing_ranks().begin(), w.missing_ranks().end());
      auto list = [](const std::vector<int>& v, int n) {
        std::string s = fmt::format("{}", fmt::join(v, ","));
        if (n > static_cast<int>(v.size())) s += fmt::format(",... ({} in all)", n);
        return s;
      };
      out += fmt::format("window {} {}: iterations {}..+{}, reported [{}], missing [{}]\n",
                         w.window_id(), w.state(), w.start_iteration(), w.iterations(),
                         list(rep, w.reported()), list(mis, w.missing()));
    }
    if (page == 0 && reply.total_windows() > reply.windows_size())
      out += fmt::format("({} older windows: see the report folder)\n",
                         reply.total_windows() - reply.windows_size());
    if (reply.next_rank_offset() <= offset) break;
    offset = reply.next_rank_offset();
  }
  return out;
}

}  // namespace perftracker::agent
