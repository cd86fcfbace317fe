#include "server/collector.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "base/json_writer.h"
#include "base/limits.h"
#include "base/log.h"
#include "diagnose/hang.h"
#include "perftracker.grpc.pb.h"
#include "report/html.h"
#include "report/report.h"
#include "server/metrics_http.h"
#include "server/scheduler.h"
#include "server/store.h"
#include "server/window.h"

namespace perftracker::server {

namespace fs = std::filesystem;
namespace v1 = ::perftracker::v1;

bool IsLoopbackListen(const std::string& listen) {
  size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  return host == "127.0.0.1" || host == "localhost" || host == "[::1]";
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  // Touch every byte of the longer input so timing reveals neither the length of a common
  // prefix nor (beyond the max) the token's length.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

namespace {

std::string HardwareJson(const std::map<std::string, double>& values, const std::string& nvml) {
  JsonWriter w;
  w.BeginObject().Key("nvml").String(nvml).Key("values").BeginObject();
  for (const auto& [k, v] : values) w.Key(k).Number(v);
  w.EndObject().EndObject();
  return w.Take();
}

// Writes through a temporary file and a rename, so readers never see half a report.
Status WriteAtomically(const std::string& path, std::string_view text) {
  std::string tmp = path + ".tmp";
  PT_RETURN_IF_ERROR(report::WriteTextFile(tmp, text));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Internal(fmt::format("{}: cannot rename: {}", path, ec.message()));
  return Status::Ok();
}

Status WriteReport(const diagnose::Diagnosis& diagnosis, const std::string& path) {
  return WriteAtomically(path, report::RenderJson(diagnosis));
}

}  // namespace

class CommandStream;

struct AgentState {
  std::string host;
  std::vector<int> ranks;
  std::chrono::steady_clock::time_point last_seen;  // its last call or open command stream
  std::deque<v1::Command> queue;                    // commands while no stream is open
  CommandStream* stream = nullptr;                  // the agent's open WatchCommands stream
};

// One agent's WatchCommands stream on gRPC's callback API: it holds no thread while it waits,
// and a command is written the moment it is queued (the sync API needed a thread per agent,
// each polling for commands and cancellation). Its own mutex guards its queue and write state;
// the service's mutex is taken first wherever both are held.
class CommandStream final : public grpc::ServerWriteReactor<v1::Command> {
 public:
  // Takes `cmds` for the client, written in order as earlier writes complete. False (cmds left
  // as they are) once the stream is finishing: the caller keeps them for the next stream.
  bool Push(std::deque<v1::Command>* cmds) {
    {
      std::lock_guard lk(mu_);
      if (finished_) return false;
      for (auto& c : *cmds) queue_.push_back(std::move(c));
    }
    cmds->clear();
    Pump();
    return true;
  }

  // Ends the stream: a refusal, a newer stream of the same agent, server shutdown.
  void Close(const grpc::Status& st = grpc::Status::OK) { FinishOnce(st); }

  // Set by the service: hands back what was not sent and forgets the stream, under its mutex.
  std::function<void(CommandStream*, std::deque<v1::Command>)> on_done;

 private:
  void Pump() {
    {
      std::lock_guard lk(mu_);
      if (writing_ || finished_ || queue_.empty()) return;
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    StartWrite(&current_);
  }

  void FinishOnce(const grpc::Status& st) {
    {
      std::lock_guard lk(mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(st);
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard lk(mu_);
      writing_ = false;
      if (!ok) queue_.push_front(std::move(current_));  // not delivered: for the next stream
    }
    if (ok) {
      Pump();
    } else {
      FinishOnce(grpc::Status::OK);
    }
  }

  void OnCancel() override { FinishOnce(grpc::Status::CANCELLED); }

  void OnDone() override {
    std::deque<v1::Command> left;
    {
      std::lock_guard lk(mu_);
      left.swap(queue_);
    }
    if (on_done) on_done(this, std::move(left));
    delete this;
  }

  std::mutex mu_;
  std::deque<v1::Command> queue_;
  v1::Command current_;
  bool writing_ = false;
  bool finished_ = false;
};

struct RankState {
  std::string host;
  int64_t last_step = -1;
  double last_ms = 0;
  double sum_ms = 0;
  int64_t count = 0;
  double min_ms = 0, max_ms = 0;
  // Every iteration time up to a bound (percentiles at job end); beyond it a reservoir sample
  // keeps memory flat on long runs.
  std::vector<float> samples;
  uint64_t rng = 0x9e3779b97f4a7c15ull;

  static constexpr size_t kMaxSamples = 1 << 18;
  // The run's iteration times for the report's chart: bucket means of `stride` steps, at most
  // kMaxSeriesPoints (when full, neighbouring buckets merge and the stride doubles), so a long
  // run of 10,000 ranks stays near 60 MB.
  static constexpr size_t kMaxSeriesPoints = 512;
  std::vector<int64_t> series_steps;
  std::vector<float> series_ms;
  int64_t stride = 1;
  int64_t bucket_first = -1;  // the open bucket's first step
  double bucket_sum = 0;
  int bucket_n = 0;

  void AddStep(int64_t step, double ms) {
    Add(ms);
    if (bucket_first >= 0 && step / stride != bucket_first / stride) CloseBucket();
    if (bucket_n == 0) bucket_first = step;
    bucket_sum += ms;
    ++bucket_n;
  }
  void CloseBucket() {
    if (bucket_n == 0) return;
    series_steps.push_back(bucket_first);
    series_ms.push_back(static_cast<float>(bucket_sum / bucket_n));
    bucket_sum = 0;
    bucket_n = 0;
    bucket_first = -1;
    if (series_steps.size() < kMaxSeriesPoints) return;
    // Full: merge neighbours and double the stride.
    size_t j = 0;
    for (size_t i = 0; i < series_steps.size(); i += 2, ++j) {
      series_steps[j] = series_steps[i];
      series_ms[j] =
          i + 1 < series_ms.size() ? (series_ms[i] + series_ms[i + 1]) / 2 : series_ms[i];
    }
    series_steps.resize(j);
    series_ms.resize(j);
    stride *= 2;
  }
  // The series so far, with the open bucket.
  report::RunSeries Series(int rank) const {
    report::RunSeries s;
    s.rank = rank;
    s.steps = series_steps;
    s.ms = series_ms;
    if (bucket_n > 0) {
      s.steps.push_back(bucket_first);
      s.ms.push_back(static_cast<float>(bucket_sum / bucket_n));
    }
    return s;
  }

  void Add(double ms) {
    if (count == 0 || ms < min_ms) min_ms = ms;
    if (count == 0 || ms > max_ms) max_ms = ms;
    last_ms = ms;
    sum_ms += ms;
    ++count;
    if (samples.size() < kMaxSamples) {
      samples.push_back(static_cast<float>(ms));
    } else {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      uint64_t j = rng % static_cast<uint64_t>(count);
      if (j < kMaxSamples) samples[j] = static_cast<float>(ms);
    }
  }
  diagnose::IterationStats Stats() const {
    diagnose::IterationStats s;
    s.count = count;
    if (count == 0) return s;
    s.mean_ms = sum_ms / count;
    s.min_ms = min_ms;
    s.max_ms = max_ms;
    std::vector<float> v = samples;
    std::sort(v.begin(), v.end());
    auto at = [&](double q) {
      return v.empty() ? 0.0
                       : static_cast<double>(
                             v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]);
    };
    s.p50_ms = at(0.5);
    s.p99_ms = at(0.99);
    return s;
  }
};

// A hang: every rank's stacks, collected until all expected ranks replied or a deadline.
struct HangCollection {
  int64_t id = 0;  // shares the window numbering (DIR/windows/<id>/)
  std::chrono::steady_clock::time_point deadline;
  std::chrono::steady_clock::time_point since;  // when the first hang trigger arrived
  double stalled_seconds = 0;
  std::set<int> expected;
  std::map<int, diagnose::RankStacks> replies;
};

struct CollectorServer::Impl final
    : public v1::Collector::WithCallbackMethod_WatchCommands<v1::Collector::Service> {
  ServerOptions options;
  std::unique_ptr<Store> store;
  int64_t job_id = 0;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool shutting_down = false;
  bool shut_down = false;
  int64_t next_agent = 1;
  std::map<std::string, AgentState> agents;
  std::map<int, std::string> declared_by;  // rank -> the agent that registered it
  std::optional<std::string> job_key;      // the job being collected (RegisterRequest.job_id)
  std::map<int, RankState> ranks;
  std::map<int64_t, std::unique_ptr<Window>> windows;
  // The online policy: when windows open, cooldowns, hang confirmation (server/scheduler.h).
  // Guarded by mu like the rest; the single source of which window is open.
  std::optional<WindowScheduler> sched;
  int64_t last_window = 0;
  bool wrote_latest = false;
  std::optional<diagnose::Diagnosis> latest;  // the last window's (or hang's) diagnosis
  // The last diagnosed window's patterns, for the run's final report (one job's worth).
  std::shared_ptr<const pattern::CompactJob> latest_job;
  int64_t latest_window_id = 0;
  std::vector<report::WaitGroup> latest_waits;  // when the latest diagnosis is a hang's
  // Every window and hang of the run, for the report's chart (bounded: the newest).
  std::vector<report::WindowMark> marks;
  static constexpr size_t kMaxMarks = 4096;
  // Above this many series rows, the series is stored at the end of the run only.
  static constexpr size_t kSeriesRowsPerWindow = 200000;
  // What /metrics counts (server/metrics_http.h), since the server started.
  std::map<std::string, uint64_t> windows_opened;                          // by kind of reason
  std::map<std::pair<std::string, std::string>, uint64_t> findings_total;  // category, cause
  std::map<std::string, uint64_t> triggers_total;                          // slowdown, hang, user
  uint64_t upload_bytes_total = 0;
  uint64_t uploads_accepted = 0, uploads_refused = 0;
  std::unique_ptr<MetricsHttp> metrics;
  int windows_diagnosed = 0;
  int hangs_diagnosed = 0;
  std::optional<HangCollection> hang;                // collecting stacks
  std::optional<diagnose::Diagnosis> hang_callback;  // to hand to on_hang outside the lock
  std::thread timer;
  // Commands kept for an agent without an open stream (the newest; a window needs one).
  static constexpr size_t kMaxQueuedCommands = 16;
  // An agent that called this recently counts as connected while it reconnects its stream.
  static constexpr int kAgentConnectedSeconds = 10;
  // Closed windows kept in memory (their summaries), newest first; older ones are in SQLite
  // and in REPORT_DIR/windows/<id>/.
  static constexpr size_t kKeptClosedWindows = 16;

  grpc::Status Authorize(grpc::ServerContextBase* ctx) {
    if (options.token.empty()) return grpc::Status::OK;
    const auto& md = ctx->client_metadata();
    auto it = md.find("x-perftracker-token");
    if (it == md.end() ||
        !ConstantTimeEquals(std::string(it->second.data(), it->second.size()), options.token))
      return {grpc::StatusCode::UNAUTHENTICATED, "missing or wrong perftracker token"};
    return grpc::Status::OK;
  }

  // Where the job is, for the scheduler (with mu held). The ranks it waits for: those agents
  // declared, else those that reported.
  JobProgress ProgressLocked() const {
    JobProgress p;
    double sum = 0;
    int64_t n = 0;
    for (const auto& [r, st] : ranks) {
      p.furthest_step = std::max(p.furthest_step, st.last_step);
      sum += st.sum_ms;
      n += st.count;
    }
    if (n > 0 && sum > 0) p.mean_iteration_ms = sum / n;
    std::set<int> expected;
    for (const auto& [id, a] : agents) expected.insert(a.ranks.begin(), a.ranks.end());
    if (expected.empty())
      for (const auto& [r, st] : ranks) expected.insert(r);
    for (int r : expected) {
      auto it = ranks.find(r);
      const int64_t count = it == ranks.end() ? 0 : it->second.count;
      p.fewest_iterations = p.fewest_iterations < 0 ? count : std::min(p.fewest_iterations, count);
    }
    return p;
  }

  // Opens a window, or returns the open one (already_open). SLOWDOWN and MEAN_MS: a slowdown
  // trigger opened it. Called with mu held.
  TriggerResult OpenWindowLocked(const std::string& reason, int iterations, bool slowdown = false,
                                 double mean_ms = 0) {
    if (const int64_t open = sched->open_window()) {
      const WindowSpec& s = windows[open]->spec();
      return {s.id, s.start_iteration, true};
    }
    WindowSpec spec;
    spec.id = ++last_window;
    spec.iterations = sched->Iterations(iterations);
    spec.max_seconds = options.max_seconds;
    spec.start_iteration = sched->StartIteration(ProgressLocked());
    std::set<int> expected;
    for (const auto& [id, a] : agents) expected.insert(a.ranks.begin(), a.ranks.end());
    auto deadline =
        Window::Clock::now() +
        std::chrono::duration_cast<Window::Clock::duration>(
            std::chrono::duration<double>(options.max_seconds + options.upload_grace_seconds));
    windows[spec.id] = std::make_unique<Window>(spec, expected, deadline);
    AddMarkLocked({spec.id, spec.start_iteration, spec.iterations, reason});
    ++windows_opened[ReasonKind(reason)];
    sched->Opened(spec.id, spec.start_iteration, std::chrono::steady_clock::now(), slowdown,
                  mean_ms);
    if (::perftracker::Status st =
            store->AddWindow(job_id, spec.id, spec.start_iteration, spec.iterations, reason);
        !st.ok())
      log::Error("server", "{}", st.message());
    v1::Command cmd;
    v1::ProfileWindow* p = cmd.mutable_profile();
    p->set_window_id(spec.id);
    p->set_start_iteration(spec.start_iteration);
    p->set_iterations(spec.iterations);
    p->set_max_seconds(spec.max_seconds);
    SendLocked(cmd);
    cv.notify_all();
    log::Event("", "window {} opened ({}): profiling iterations {}..{} on every rank", spec.id,
               reason, spec.start_iteration, spec.start_iteration + spec.iterations - 1);
    log::Detail("server", "window {} opened ({}): iterations {}..+{}, {} agents", spec.id, reason,
                spec.start_iteration, spec.iterations, agents.size());
    return {spec.id, spec.start_iteration, false};
  }

  // Called with mu held.
  void CloseWindowLocked(int64_t id) {
    Window& w = *windows[id];
    if (w.closed()) return;
    Window::Sealed sealed = w.Seal();
    sched->Closed(id, std::chrono::steady_clock::now());
    diagnose::Diagnosis d = Window::Diagnose(sealed, options.diagnose);
    auto job = std::make_shared<const pattern::CompactJob>(std::move(sealed.job));
    Publish(id, d, "window", job, RenderHtmlLocked(d, job.get(), id));
  }

  // Each rank's iterations over the run so far (with mu held).
  std::vector<report::RunSeries> SeriesLocked() const {
    std::vector<report::RunSeries> out;
    out.reserve(ranks.size());
    for (const auto& [r, st] : ranks)
      if (st.count > 0) out.push_back(st.Series(r));
    return out;
  }

  // The HTML report of diagnosis D (window ID; 0: the run's end) with the run's iteration
  // series and windows. Called with mu held; RenderHtmlUnlocked takes a snapshot instead.
  // WAITS and VIEWS_FROM: a hang's page (where each rank stands; the per-rank views are the
  // latest profiled window's).
  std::string RenderHtmlLocked(const diagnose::Diagnosis& d, const pattern::CompactJob* job,
                               int64_t id, std::vector<report::WaitGroup> waits = {},
                               int64_t views_from = 0) const {
    return RenderHtmlFrom(d, job, SeriesLocked(), marks, id, std::move(waits), views_from);
  }
  std::string RenderHtmlFrom(const diagnose::Diagnosis& d, const pattern::CompactJob* job,
                             std::vector<report::RunSeries> series,
                             std::vector<report::WindowMark> windows_so_far, int64_t id,
                             std::vector<report::WaitGroup> waits = {},
                             int64_t views_from = 0) const {
    report::HtmlInput in;
    in.title = id > 0 ? fmt::format("perftracker: window {} of {}", id, options.report_dir)
                      : fmt::format("perftracker: {}", options.report_dir);
    in.diagnosis = &d;
    in.job = job;
    in.series = std::move(series);
    in.windows = std::move(windows_so_far);
    in.waits = std::move(waits);
    in.views_from_window = job ? views_from : 0;
    in.generated = fmt::format("{:%Y-%m-%d %H:%M} UTC", fmt::gmtime(std::time(nullptr)));
    // The window's timeline, where `perftracker run` exported it (at the job's end).
    const int64_t w = id > 0 ? id : latest_window_id;
    const std::string rel = fmt::format("windows/{}/trace.json.gz", w);
    std::error_code ec;
    if (w > 0 && fs::exists(fs::path(options.report_dir) / rel, ec))
      in.trace_link = id > 0 ? "trace.json.gz" : rel;
    return report::RenderHtml(in);
  }

  // Closes window ID like CloseWindowLocked, but diagnoses with LK released: a 10,000-rank
  // diagnosis takes seconds, and every other call (uploads to the next window, iteration
  // reports, commands, status) needs the lock. The window is sealed first, so uploads that
  // arrive meanwhile are refused as for any closed window.
  void CloseWindow(std::unique_lock<std::mutex>& lk, int64_t id) {
    Window& w = *windows[id];
    if (w.closed()) return;
    Window::Sealed sealed = w.Seal();
    sched->Closed(id, std::chrono::steady_clock::now());
    std::vector<report::RunSeries> series = SeriesLocked();
    std::vector<report::WindowMark> windows_so_far = marks;
    lk.unlock();
    diagnose::Diagnosis d = Window::Diagnose(sealed, options.diagnose);
    auto job = std::make_shared<const pattern::CompactJob>(std::move(sealed.job));
    std::string html =
        RenderHtmlFrom(d, job.get(), std::move(series), std::move(windows_so_far), id);
    lk.lock();
    Publish(id, d, "window", job, std::move(html));
  }

  // Writes DIR/windows/<id>/diagnosis.json and report.html, and DIR/diagnosis.json and
  // report.html (the latest), stores and prints D. JOB: the window's patterns (null: a hang).
  void Publish(int64_t id, const diagnose::Diagnosis& d, const char* what,
               std::shared_ptr<const pattern::CompactJob> job, std::string html) {
    std::string json = report::RenderJson(d);
    fs::path dir = fs::path(options.report_dir) / "windows" / std::to_string(id);
    std::error_code ec;
    fs::create_directories(dir, ec);
    ::perftracker::Status st = WriteReport(d, (dir / "diagnosis.json").string());
    if (st.ok()) st = WriteReport(d, (fs::path(options.report_dir) / "diagnosis.json").string());
    if (st.ok()) st = WriteAtomically((dir / "report.html").string(), html);
    if (st.ok())
      st = WriteAtomically((fs::path(options.report_dir) / "report.html").string(), html);
    if (job) {
      latest_job = std::move(job);
      latest_window_id = id;
      latest_waits.clear();
    }
    for (const diagnose::Finding& f : d.findings)
      ++findings_total[{f.category, diagnose::CauseName(f.cause)}];
    // The series in SQLite for `perftracker report` (bounded: at scale only at the end).
    if (ranks.size() * RankState::kMaxSeriesPoints <= kSeriesRowsPerWindow)
      if (::perftracker::Status s3 = store->ReplaceIterationSeries(SeriesLocked()); !s3.ok())
        log::Error("server", "{}", s3.message());
    if (st.ok()) wrote_latest = true;
    if (!st.ok()) log::Error("server", "{}", st.message());
    if (::perftracker::Status s2 = store->FinishWindow(id, d, json); !s2.ok())
      log::Error("server", "{}", s2.message());
    latest = d;
    ++(std::string_view(what) == "hang" ? hangs_diagnosed : windows_diagnosed);
    log::Detail(
        "server", "{} {} diagnosed (unix {:.3f}): {} finding(s)", what, id,
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
        d.findings.size());
    if (options.print) {
      log::Event("", "{} {} diagnosed: {} ({})\n{}", what, id,
                 d.findings.empty() ? std::string("no findings")
                                    : fmt::format("{} finding(s)", d.findings.size()),
                 (dir / "diagnosis.json").string(), report::RenderText(d));
    }
  }

  void AddMarkLocked(report::WindowMark m) {
    if (marks.size() >= kMaxMarks) marks.erase(marks.begin());
    marks.push_back(std::move(m));
  }

  // Called with mu held.
  int64_t FurthestStepLocked() const {
    int64_t step = -1;
    for (const auto& [r, st] : ranks) step = std::max(step, st.last_step);
    return step;
  }

  // Called with mu held.
  void StartHangLocked(int rank, double mean_ms, std::chrono::steady_clock::time_point since) {
    // A profiling window in progress cannot finish while ranks are stuck: report what it has.
    if (sched->open_window()) CloseWindowLocked(sched->open_window());
    HangCollection h;
    h.id = ++last_window;
    h.since = since;
    h.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(options.stacks_seconds));
    // How long the job has been stuck: the detector fires after hang_factor x the mean.
    h.stalled_seconds = mean_ms > 0 ? 5 * mean_ms / 1e3 : 0;
    for (const auto& [id, a] : agents) h.expected.insert(a.ranks.begin(), a.ranks.end());
    for (const auto& [r, st] : ranks) h.expected.insert(r);
    AddMarkLocked({h.id, -1, 0, "hang"});
    ++windows_opened["hang"];
    if (::perftracker::Status st = store->AddWindow(job_id, h.id, -1, 0, "hang"); !st.ok())
      log::Error("server", "{}", st.message());
    v1::Command cmd;
    cmd.mutable_stacks()->set_request_id(h.id);
    SendLocked(cmd);
    sched->HangStarted(FurthestStepLocked());
    log::Event("", "hang reported by rank {}: collecting stacks from {} rank(s)", rank,
               h.expected.size());
    hang = std::move(h);
    cv.notify_all();
  }

  // Called with mu held.
  void FinishHangLocked() {
    HangCollection h = std::move(*hang);
    hang.reset();
    sched->HangFinished();
    std::vector<diagnose::RankStacks> replies;
    for (auto& [r, s] : h.replies) replies.push_back(s);
    double stalled =
        h.stalled_seconds +
        std::chrono::duration<double>(std::chrono::steady_clock::now() - h.since).count();
    diagnose::Diagnosis d = diagnose::DiagnoseHang(
        replies, std::vector<int>(h.expected.begin(), h.expected.end()), stalled);
    latest_waits = report::GroupWaits(replies);
    Publish(h.id, d, "hang", nullptr,
            RenderHtmlLocked(d, latest_job.get(), h.id, latest_waits, latest_window_id));
    if (options.on_hang) hang_callback = d;
  }

  // Whether agent ID may speak for RANK (with mu held): an agent that registered ranks speaks
  // for those; one that registered none (a folder-watching agent) for any rank no other agent
  // registered. An unknown id is NOT_FOUND, which tells an agent to register again.
  grpc::Status OwnsLocked(const std::string& id, int rank) {
    auto a = agents.find(id);
    if (a == agents.end()) return {grpc::StatusCode::NOT_FOUND, "unknown agent; register first"};
    auto d = declared_by.find(rank);
    const bool ok = a->second.ranks.empty() ? d == declared_by.end() || d->second == id
                                            : d != declared_by.end() && d->second == id;
    if (!ok)
      return {grpc::StatusCode::PERMISSION_DENIED,
              fmt::format("rank {} belongs to another agent", rank)};
    return grpc::Status::OK;
  }

  // gRPC does not catch exceptions: one escaping a handler or the timer would end the whole
  // launcher with the job. An internal failure (memory, a bug) fails that one call instead,
  // logged; the server goes on.
  template <typename F>
  static grpc::Status Guarded(const char* rpc, F&& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      log::Error("server", "{}: internal error, call refused: {}", rpc, e.what());
    } catch (...) {
      log::Error("server", "{}: internal error, call refused", rpc);
    }
    return {grpc::StatusCode::INTERNAL, std::string(rpc) + ": internal error in the server"};
  }

  void TimerLoop() {
    std::unique_lock lk(mu);
    while (!shutting_down) {
      cv.wait_for(lk, std::chrono::milliseconds(100));
      try {
        TimerTick(lk);
      } catch (const std::exception& e) {
        log::Error("server", "timer: internal error, the server goes on: {}", e.what());
      } catch (...) {
        log::Error("server", "timer: internal error, the server goes on");
      }
      if (!lk.owns_lock()) lk.lock();
    }
  }

  // One tick of the timer: window deadlines, hang confirmation, scheduled windows. LK is held
  // on entry and on a normal return.
  // Forgets what a long job no longer needs (with mu held): agents silent for
  // agent_expiry_seconds with no open stream (their ranks are no longer waited for), and
  // closed windows beyond the newest kKeptClosedWindows.
  void ExpireLocked() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = agents.begin(); it != agents.end();) {
      const AgentState& a = it->second;
      if (a.stream == nullptr &&
          now - a.last_seen > std::chrono::duration<double>(options.agent_expiry_seconds)) {
        log::Detail("server", "{} from {} silent for {:.0f} s: forgotten", it->first, a.host,
                    options.agent_expiry_seconds);
        std::erase_if(declared_by, [&](const auto& kv) { return kv.second == it->first; });
        it = agents.erase(it);
      } else {
        ++it;
      }
    }
    size_t closed = 0;
    for (auto it = windows.rbegin(); it != windows.rend();) {
      if (it->second->closed() && ++closed > kKeptClosedWindows &&
          it->first != sched->slowdown_window()) {
        it = decltype(it)(windows.erase(std::next(it).base()));
      } else {
        ++it;
      }
    }
  }

  void TimerTick(std::unique_lock<std::mutex>& lk) {
    ExpireLocked();
    if (const int64_t open = sched->open_window();
        open && windows[open]->Expired(Window::Clock::now()))
      CloseWindow(lk, open);
    if (auto p = sched->TakeConfirmedHang(std::chrono::steady_clock::now()))
      StartHangLocked(p->rank, p->mean_ms, p->since);
    if (hang && std::chrono::steady_clock::now() >= hang->deadline) FinishHangLocked();
    MaybeOpenScheduledLocked();
    if (hang_callback) {
      diagnose::Diagnosis d = std::move(*hang_callback);
      hang_callback.reset();
      lk.unlock();
      options.on_hang(d);
      lk.lock();
    }
  }

  // The windows the scheduler has due: a deferred slowdown, the baseline, the periodic ones.
  // Called with mu held.
  void MaybeOpenScheduledLocked() {
    if (shutting_down || hang) return;
    if (auto due = sched->Due(ProgressLocked(), std::chrono::steady_clock::now()))
      OpenWindowLocked(due->reason, 0, due->slowdown, due->mean_ms);
  }

  // Queues a command for every agent and wakes their streams. Called with mu held.
  void SendLocked(const v1::Command& cmd) {
    for (auto& [id, a] : agents) {
      std::deque<v1::Command> one = {cmd};
      if (a.stream == nullptr || !a.stream->Push(&one)) {
        a.queue.push_back(cmd);
        // An agent without a stream for long gets the latest commands only: older ones are
        // for windows that are over.
        while (a.queue.size() > kMaxQueuedCommands) a.queue.pop_front();
      }
    }
  }

  // The kind of a window's reason, for the windows_opened metric: its first word.
  static std::string ReasonKind(const std::string& reason) {
    for (const char* k : {"baseline", "periodic", "slowdown", "hang"})
      if (reason.rfind(k, 0) == 0) return k;
    return "user";
  }

  // /metrics in Prometheus' text format (called with mu held).
  std::string MetricsLocked() const {
    const std::string job = MetricsHttp::Label(job_key.value_or(""));
    std::string out;
    auto head = [&](const char* name, const char* type, const char* help) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    head("perftracker_iteration_duration_seconds", "gauge",
         "The rank's latest iteration time, as its detector measured it.");
    for (const auto& [r, st] : ranks)
      if (st.count > 0)
        out += fmt::format(
            "perftracker_iteration_duration_seconds{{job=\"{}\",rank=\"{}\",host=\"{}\"}} "
            "{:.6f}\n",
            job, r, MetricsHttp::Label(st.host), st.last_ms / 1e3);
    head("perftracker_iteration_mean_seconds", "gauge",
         "The rank's mean iteration time over the run.");
    for (const auto& [r, st] : ranks)
      if (st.count > 0)
        out += fmt::format(
            "perftracker_iteration_mean_seconds{{job=\"{}\",rank=\"{}\",host=\"{}\"}} "
            "{:.6f}\n",
            job, r, MetricsHttp::Label(st.host), st.sum_ms / st.count / 1e3);
    head("perftracker_iterations_total", "counter", "Iterations the rank reported.");
    for (const auto& [r, st] : ranks)
      out += fmt::format("perftracker_iterations_total{{job=\"{}\",rank=\"{}\",host=\"{}\"}} {}\n",
                         job, r, MetricsHttp::Label(st.host), st.count);
    head("perftracker_triggers_total", "counter",
         "Window requests by kind: a worker detector's slowdown or hang, or a user's trigger.");
    for (const char* k : {"slowdown", "hang", "user"}) {
      auto it = triggers_total.find(k);
      out += fmt::format("perftracker_triggers_total{{job=\"{}\",kind=\"{}\"}} {}\n", job, k,
                         it == triggers_total.end() ? 0 : it->second);
    }
    head("perftracker_detector_state", "gauge",
         "1 for the server's current state: idle, window (profiling), hang_suspected (a hang "
         "trigger waits for confirmation) or hang (stacks being collected).");
    const char* state = hang                    ? "hang"
                        : sched->pending_hang() ? "hang_suspected"
                        : sched->open_window()  ? "window"
                                                : "idle";
    for (const char* s : {"idle", "window", "hang_suspected", "hang"})
      out += fmt::format("perftracker_detector_state{{job=\"{}\",state=\"{}\"}} {}\n", job, s,
                         std::string_view(s) == state ? 1 : 0);
    head("perftracker_windows_opened_total", "counter",
         "Profiling windows opened, by reason (and hangs whose stacks were collected).");
    for (const char* k : {"baseline", "periodic", "slowdown", "user", "hang"}) {
      auto it = windows_opened.find(k);
      out += fmt::format("perftracker_windows_opened_total{{job=\"{}\",reason=\"{}\"}} {}\n", job,
                         k, it == windows_opened.end() ? 0 : it->second);
    }
    head("perftracker_findings_total", "counter",
         "Findings of every diagnosis, by category and cause.");
    for (const auto& [key, n] : findings_total)
      out +=
          fmt::format("perftracker_findings_total{{job=\"{}\",category=\"{}\",cause=\"{}\"}} {}\n",
                      job, MetricsHttp::Label(key.first), key.second, n);
    head("perftracker_latest_findings", "gauge", "Findings of the latest diagnosis.");
    out += fmt::format("perftracker_latest_findings{{job=\"{}\"}} {}\n", job,
                       latest ? latest->findings.size() : 0);
    head("perftracker_agents", "gauge",
         "Node agents registered, and those connected (a command stream open or a call in the "
         "last seconds).");
    const auto now = std::chrono::steady_clock::now();
    size_t connected = 0;
    for (const auto& [id, a] : agents)
      if (a.stream != nullptr || now - a.last_seen < std::chrono::seconds(kAgentConnectedSeconds))
        ++connected;
    out += fmt::format("perftracker_agents{{job=\"{}\",state=\"registered\"}} {}\n", job,
                       agents.size());
    out += fmt::format("perftracker_agents{{job=\"{}\",state=\"connected\"}} {}\n", job, connected);
    head("perftracker_upload_bytes_total", "counter", "Bytes of rank summaries accepted.");
    out +=
        fmt::format("perftracker_upload_bytes_total{{job=\"{}\"}} {}\n", job, upload_bytes_total);
    head("perftracker_uploads_total", "counter", "Rank summary uploads, accepted or refused.");
    out += fmt::format("perftracker_uploads_total{{job=\"{}\",result=\"accepted\"}} {}\n", job,
                       uploads_accepted);
    out += fmt::format("perftracker_uploads_total{{job=\"{}\",result=\"refused\"}} {}\n", job,
                       uploads_refused);
    return out;
  }

  // --- the service ---

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterReply* reply) override {
    return Guarded("Register", [&] { return DoRegister(ctx, req, reply); });
  }
  grpc::Status ReportIterations(grpc::ServerContext* ctx, const v1::ReportIterationsRequest* req,
                                v1::ReportIterationsReply* reply) override {
    return Guarded("ReportIterations", [&] { return DoReportIterations(ctx, req, reply); });
  }
  grpc::Status UploadWindow(grpc::ServerContext* ctx, const v1::UploadWindowRequest* req,
                            v1::UploadWindowReply* reply) override {
    grpc::Status st = Guarded("UploadWindow", [&] { return DoUploadWindow(ctx, req, reply); });
    if (st.ok()) {
      std::lock_guard lk(mu);
      ++(reply->accepted() ? uploads_accepted : uploads_refused);
      if (reply->accepted()) upload_bytes_total += req->summary().size();
    }
    return st;
  }
  grpc::Status UploadStacks(grpc::ServerContext* ctx, const v1::UploadStacksRequest* req,
                            v1::UploadStacksReply* reply) override {
    return Guarded("UploadStacks", [&] { return DoUploadStacks(ctx, req, reply); });
  }
  grpc::Status Trigger(grpc::ServerContext* ctx, const v1::TriggerRequest* req,
                       v1::TriggerReply* reply) override {
    return Guarded("Trigger", [&] { return DoTrigger(ctx, req, reply); });
  }
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusReply* reply) override {
    return Guarded("Status", [&] { return DoStatus(ctx, req, reply); });
  }

  grpc::Status DoRegister(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                          v1::RegisterReply* reply) {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    if (req->ranks_size() > limits::kMaxWorldSize)
      return {grpc::StatusCode::INVALID_ARGUMENT, "more ranks than a job can have"};
    if (req->job_id().size() > 256)
      return {grpc::StatusCode::INVALID_ARGUMENT, "job id longer than 256 bytes"};
    for (int r : req->ranks())
      if (!limits::ValidRank(r))
        return {grpc::StatusCode::INVALID_ARGUMENT, fmt::format("rank {} is out of range", r)};
    std::lock_guard lk(mu);
    // One job at a time: two jobs' ranks in one diagnosis would compare rank 0 of one job with
    // rank 0 of the other. Once the first job's agents are gone (expired), a new job starts.
    if (!job_key || *job_key != req->job_id()) {
      // Connected: a command stream open, or a call in the last seconds (an agent reconnects
      // within a second or two). A job that ended leaves agents with neither.
      const auto now = std::chrono::steady_clock::now();
      const bool connected = std::any_of(agents.begin(), agents.end(), [&](const auto& kv) {
        return kv.second.stream != nullptr ||
               now - kv.second.last_seen < std::chrono::seconds(kAgentConnectedSeconds);
      });
      if (job_key && connected) {
        return {grpc::StatusCode::FAILED_PRECONDITION,
                fmt::format("this server collects job '{}' (its agents are connected); job '{}' "
                            "needs a server of its own",
                            log::Printable(*job_key), log::Printable(req->job_id()))};
      }
      if (job_key) {
        log::Event("server", "job '{}' replaces job '{}', whose agents are gone",
                   log::Printable(req->job_id()), log::Printable(*job_key));
        ranks.clear();
        declared_by.clear();
        agents.clear();  // the previous job's, all without a stream
        sched->NewJob();
      }
      job_key = req->job_id();
    }
    // Unguessable: an id is what lets a caller upload for its ranks and read their commands.
    auto secret = NewToken();
    if (!secret.ok()) return {grpc::StatusCode::INTERNAL, secret.status().message()};
    std::string id = fmt::format("agent-{}-{}", next_agent++, secret->substr(0, 24));
    for (int r : req->ranks()) declared_by[r] = id;
    AgentState& a = agents[id];
    a.last_seen = std::chrono::steady_clock::now();
    a.host = req->host();
    a.ranks.assign(req->ranks().begin(), req->ranks().end());
    for (int r : a.ranks) ranks[r].host = a.host;
    reply->set_agent_id(id);
    log::Detail("server", "{} registered from {} (ranks {})", id, a.host,
                diagnose::RankList(a.ranks));
    return grpc::Status::OK;
  }

  grpc::Status DoReportIterations(grpc::ServerContext* ctx, const v1::ReportIterationsRequest* req,
                                  v1::ReportIterationsReply*) {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::lock_guard lk(mu);
    auto agent = agents.find(req->agent_id());
    if (agent == agents.end())
      return {grpc::StatusCode::NOT_FOUND, "unknown agent; register first"};
    agent->second.last_seen = std::chrono::steady_clock::now();
    for (const v1::IterationBatch& b : req->batches()) {
      if (!limits::ValidRank(b.rank())) continue;  // nothing to file it under
      if (!OwnsLocked(req->agent_id(), b.rank()).ok()) continue;
      RankState& r = ranks[b.rank()];
      int n = std::min(b.steps_size(), b.iteration_ms_size());
      for (int i = 0; i < n; ++i) {
        r.last_step = std::max(r.last_step, b.steps(i));
        r.AddStep(b.steps(i), b.iteration_ms(i));
      }
      if (auto cleared = sched->Progressed(r.last_step))
        log::Detail("server", "rank {}'s hang trigger cleared: iterations resumed", *cleared);
    }
    return grpc::Status::OK;
  }

  grpc::ServerWriteReactor<v1::Command>* WatchCommands(grpc::CallbackServerContext* ctx,
                                                       const v1::WatchRequest* req) override {
    auto* stream = new CommandStream();
    if (auto st = Authorize(ctx); !st.ok()) {
      stream->Close(st);
      return stream;
    }
    std::lock_guard lk(mu);
    auto it = agents.find(req->agent_id());
    if (it == agents.end() || shutting_down) {
      stream->Close(shutting_down ? grpc::Status::OK
                                  : grpc::Status(grpc::StatusCode::NOT_FOUND,
                                                 "unknown agent; register first"));
      return stream;
    }
    AgentState& agent = it->second;
    agent.last_seen = std::chrono::steady_clock::now();
    // A reconnecting agent replaces its old stream, which gives back what it did not send.
    if (agent.stream != nullptr) agent.stream->Close();
    agent.stream = stream;
    // By id, not by reference: a silent agent may have expired when the stream ends.
    stream->on_done = [this, id = it->first](CommandStream* done, std::deque<v1::Command> left) {
      std::lock_guard lk(mu);
      auto a = agents.find(id);
      if (a == agents.end()) return;
      AgentState& agent = a->second;
      agent.last_seen = std::chrono::steady_clock::now();
      if (agent.stream == done) agent.stream = nullptr;
      for (auto c = left.rbegin(); c != left.rend(); ++c) agent.queue.push_front(std::move(*c));
      while (agent.queue.size() > kMaxQueuedCommands) agent.queue.pop_front();
      if (agent.stream != nullptr && !agent.queue.empty()) agent.stream->Push(&agent.queue);
    };
    stream->Push(&agent.queue);
    return stream;
  }

  grpc::Status DoUploadWindow(grpc::ServerContext* ctx, const v1::UploadWindowRequest* req,
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
    // Parsing (inflate + decode) is most of an upload's cost and needs no shared state: done
    // before taking the lock, thousands of concurrent uploads parse in parallel.
    auto parsed = Window::Parse(up, req->window_id());
    std::unique_lock lk(mu);
    if (grpc::Status own = OwnsLocked(req->agent_id(), req->rank()); !own.ok()) {
      if (own.error_code() == grpc::StatusCode::NOT_FOUND) return own;
      reply->set_accepted(false);
      reply->set_message(own.error_message());
      return grpc::Status::OK;
    }
    auto it = windows.find(req->window_id());
    if (it == windows.end() || it->second->closed()) {
      reply->set_accepted(false);
      reply->set_message(fmt::format("window {} is not open", req->window_id()));
      return grpc::Status::OK;
    }
    if (!parsed.ok()) {
      reply->set_accepted(false);
      reply->set_message(parsed.status().message());
      return grpc::Status::OK;
    }
    auto kept = it->second->AddParsed(std::move(up), *std::move(parsed));
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
    if (::perftracker::Status st = store->AddRankSummary(row); !st.ok()) {
      log::Error("server", "{}", st.message());
      reply->set_message(fmt::format("accepted but not stored: {}", st.message()));
    }
    RankState& rs = ranks[s.rank];
    if (rs.host.empty()) rs.host = s.host;
    // Without iteration reports (a folder-watching agent), the window's iterations are all the
    // server knows of the rank's pace.
    if (rs.count == 0)
      for (double ms : s.iteration_ms) rs.Add(ms);
    log::Detail("server", "window {}: rank {} from {}, summary {} bytes", req->window_id(), s.rank,
                row.host, req->summary().size());
    reply->set_accepted(true);
    // The last expected upload closes the window; its reply waits for the diagnosis (a caller
    // that uploaded everything finds DIR/windows/<n>/diagnosis.json written), other calls don't.
    if (it->second->Complete()) CloseWindow(lk, req->window_id());
    return grpc::Status::OK;
  }

  grpc::Status DoUploadStacks(grpc::ServerContext* ctx, const v1::UploadStacksRequest* req,
                              v1::UploadStacksReply* reply) {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::lock_guard lk(mu);
    if (!hang || hang->id != req->request_id() || req->rank() < 0 ||
        !OwnsLocked(req->agent_id(), req->rank()).ok()) {
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
    hang->replies[s.rank] = std::move(s);
    hang->expected.insert(req->rank());
    reply->set_accepted(true);
    if (std::all_of(hang->expected.begin(), hang->expected.end(),
                    [&](int r) { return hang->replies.count(r) > 0; }))
      FinishHangLocked();
    cv.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status DoTrigger(grpc::ServerContext* ctx, const v1::TriggerRequest* req,
                         v1::TriggerReply* reply) {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::lock_guard lk(mu);
    const std::string& kind = req->kind();
    const auto now = std::chrono::steady_clock::now();
    ++triggers_total[kind == "hang" || kind == "slowdown" ? kind : "user"];
    if (kind == "hang") {
      sched->OnHangTrigger(req->rank(), req->mean_ms(), FurthestStepLocked(), now);
      if (auto p = sched->TakeConfirmedHang(now))  // hang_confirm_seconds <= 0: at once
        StartHangLocked(p->rank, p->mean_ms, p->since);
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
      switch (sched->OnSlowdown(req->iteration(), req->mean_ms(), reason, now)) {
        case WindowScheduler::SlowdownAction::kIgnore:
          reply->set_already_open(true);
          return grpc::Status::OK;
        case WindowScheduler::SlowdownAction::kFollowUp:
          reply->set_window_id(sched->open_window());
          reply->set_already_open(true);
          return grpc::Status::OK;
        case WindowScheduler::SlowdownAction::kOpen:
          break;
      }
    } else {
      // The caller's host (gRPC's peer is "ipv4:1.2.3.4:PORT"; the port changes per call).
      std::string peer = ctx->peer();
      peer = peer.substr(0, peer.rfind(':'));
      if (::perftracker::Status st = sched->OnUserTrigger(peer, now); !st.ok())
        return {grpc::StatusCode::RESOURCE_EXHAUSTED, st.message()};
    }
    TriggerResult r = OpenWindowLocked(reason, req->iterations(), slowdown, req->mean_ms());
    reply->set_window_id(r.window_id);
    reply->set_start_iteration(r.start_iteration);
    reply->set_already_open(r.already_open);
    return grpc::Status::OK;
  }

  grpc::Status DoStatus(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                        v1::StatusReply* reply) {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    // A page: about 60 bytes a rank, well under gRPC's 4 MB.
    constexpr int kPageRanks = 10000, kDefaultWindows = 20, kMaxListedRanks = 1000;
    const int limit = req->max_ranks() > 0 ? std::min(req->max_ranks(), kPageRanks) : kPageRanks;
    std::lock_guard lk(mu);
    reply->set_agents(static_cast<int>(agents.size()));
    reply->set_total_ranks(static_cast<int>(ranks.size()));
    reply->set_total_windows(static_cast<int>(windows.size()));
    const int offset = std::max(req->rank_offset(), 0);
    int index = 0;
    for (const auto& [r, st] : ranks) {
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
    auto first = windows.begin();
    if (windows.size() > static_cast<size_t>(max_windows))
      first = std::prev(windows.end(), max_windows);
    for (auto it = first; it != windows.end(); ++it) {
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
};

CollectorServer::CollectorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CollectorServer::~CollectorServer() { Shutdown(); }

StatusOr<std::unique_ptr<CollectorServer>> CollectorServer::Start(const ServerOptions& options) {
  if (options.report_dir.empty()) return InvalidArgument("server: --report-dir is required");
  if (!IsLoopbackListen(options.listen) && options.token.empty())
    return InvalidArgument(
        fmt::format("server: listening on {} (not 127.0.0.1) needs a shared token (--token-file)",
                    options.listen));
  // Off this machine the token and every summary cross the network: encrypted, or not at all.
  if (!IsLoopbackListen(options.listen) && !options.tls.enabled())
    return InvalidArgument(
        fmt::format("server: listening on {} (not 127.0.0.1) needs TLS (--tls-cert and --tls-key; "
                    "--tls-ca to require client certificates)",
                    options.listen));
  std::error_code ec;
  fs::create_directories(options.report_dir, ec);
  if (ec)
    return InvalidArgument(
        fmt::format("{}: cannot create folder: {}", options.report_dir, ec.message()));
  // Every agent holds a connection (a descriptor) for the whole job; the usual soft limit of
  // 1,024 descriptors would refuse agents long before 10,000. Raise it to the hard limit (no
  // privilege needed); a limit still too low shows as refused connections, not a crash.
  if (rlimit lim{}; getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->sched.emplace(options.schedule, std::chrono::steady_clock::now());
  PT_ASSIGN_OR_RETURN(impl->store,
                      Store::Open((fs::path(options.report_dir) / "perftracker.db").string()));
  PT_ASSIGN_OR_RETURN(impl->job_id, impl->store->AddJob(options.report_dir));
  // A server restarted on the same folder numbers its windows after the last one there: the
  // reports of the windows before the restart stay.
  for (const auto& e : fs::directory_iterator(fs::path(options.report_dir) / "windows", ec)) {
    int64_t n = 0;
    const std::string name = e.path().filename().string();
    auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (err == std::errc() && end == name.data() + name.size())
      impl->last_window = std::max(impl->last_window, n);
  }

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (options.tls.enabled()) {
    PT_ASSIGN_OR_RETURN(TlsPem pem, ReadTls(options.tls, /*server=*/true));
    grpc::SslServerCredentialsOptions ssl(
        pem.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                       : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = pem.ca;
    ssl.pem_key_cert_pairs.push_back({pem.key, pem.cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, creds, &impl->port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.RegisterService(impl.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0)
    return Unavailable(fmt::format("server: cannot listen on {}", options.listen));
  Impl* raw = impl.get();
  if (!options.metrics_listen.empty()) {
    PT_ASSIGN_OR_RETURN(impl->metrics, MetricsHttp::Start(options.metrics_listen, [raw] {
                          std::lock_guard lk(raw->mu);
                          return raw->MetricsLocked();
                        }));
  }
  impl->timer = std::thread([raw] { raw->TimerLoop(); });
  return std::unique_ptr<CollectorServer>(new CollectorServer(std::move(impl)));
}

int CollectorServer::port() const { return impl_->port; }
int CollectorServer::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : 0; }

RunSummary CollectorServer::Summary() const {
  std::lock_guard lk(impl_->mu);
  RunSummary r;
  r.windows = impl_->windows_diagnosed;
  r.hangs = impl_->hangs_diagnosed;
  if (impl_->latest) {
    r.has_latest = true;
    r.latest = *impl_->latest;
  }
  return r;
}

TriggerResult CollectorServer::Trigger(const std::string& reason, int iterations) {
  std::lock_guard lk(impl_->mu);
  return impl_->OpenWindowLocked(reason, iterations);
}

void CollectorServer::Wait() {
  std::unique_lock lk(impl_->mu);
  impl_->cv.wait(lk, [&] { return impl_->shutting_down; });
}

void CollectorServer::Shutdown() {
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
    impl_->shutting_down = true;
    impl_->cv.notify_all();
    for (auto& [id, a] : impl_->agents)
      if (a.stream != nullptr) a.stream->Close();
  }
  impl_->metrics.reset();  // its thread takes mu
  // Command streams were closed above; the deadline bounds the unary calls still in flight.
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (impl_->timer.joinable()) impl_->timer.join();
  std::lock_guard lk(impl_->mu);
  // The job ended while a window was open: what arrived is diagnosed; a window no rank could
  // report (training ended before it) is no finding about anyone, only a note.
  std::optional<std::string> unprofiled;
  if (const int64_t open = impl_->sched->open_window()) {
    Window& w = *impl_->windows[open];
    if (w.Reported().empty()) {
      unprofiled =
          fmt::format("window {} opened but the job ended before any rank reported it", open);
      w.Seal();
      impl_->sched->Closed(open, std::chrono::steady_clock::now());
    } else {
      impl_->CloseWindowLocked(open);
    }
  }
  // The job ended: a silence not yet reported was its exit, not a hang.
  if (impl_->sched->pending_hang() || impl_->hang)
    log::Detail("server", "a hang trigger was pending when the job ended; not reported");
  impl_->sched->ForgetHang();
  impl_->hang.reset();
  // The job ended: DIR/diagnosis.json always exists: the latest diagnosis, or no findings,
  // with the whole run's iteration statistics per rank.
  diagnose::Diagnosis final_d;
  if (impl_->latest) {
    final_d = *impl_->latest;
  } else {
    final_d.job.notes.push_back("no profiling window fired or completed during the run");
  }
  if (unprofiled) final_d.job.notes.push_back(*unprofiled);
  std::vector<double> means;
  for (const auto& [r, st] : impl_->ranks) {
    if (st.count == 0) continue;
    diagnose::IterationStats s = st.Stats();
    final_d.job.run_iterations[r] = s;
    if (!impl_->latest) {
      final_d.job.ranks.push_back(r);
      final_d.job.iteration_ms_per_rank[r] = s.mean_ms;
      final_d.job.iterations = std::max<int>(final_d.job.iterations, static_cast<int>(s.count));
      means.push_back(s.p50_ms);
    }
  }
  if (!means.empty()) {
    std::sort(means.begin(), means.end());
    final_d.job.iteration_ms_median = means[means.size() / 2];
    final_d.job.world_size =
        std::max<int>(final_d.job.world_size, impl_->ranks.rbegin()->first + 1);
  }
  fs::path latest = fs::path(impl_->options.report_dir) / "diagnosis.json";
  if (::perftracker::Status st = WriteReport(final_d, latest.string()); !st.ok())
    log::Error("server", "{}", st.message());
  // The run's page: the latest diagnosis with the whole run's iteration times and windows.
  if (::perftracker::Status st = WriteAtomically(
          (fs::path(impl_->options.report_dir) / "report.html").string(),
          impl_->RenderHtmlLocked(final_d, impl_->latest_job.get(), 0, impl_->latest_waits,
                                  impl_->latest_waits.empty() ? 0 : impl_->latest_window_id));
      !st.ok())
    log::Error("server", "{}", st.message());
  if (::perftracker::Status st = impl_->store->ReplaceIterationSeries(impl_->SeriesLocked());
      !st.ok())
    log::Error("server", "{}", st.message());
}

}  // namespace perftracker::server
