#include "server/window_publisher.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "base/background.h"
#include "base/log.h"
#include "report/report.h"
#include "server/server_impl.h"

namespace perftracker::server {

void WindowPublisher::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void WindowPublisher::WaitPublished(std::unique_lock<std::mutex>& lk, int64_t id) {
  cv_.wait(lk, [&] { return last_published_ >= id || done_; });
}

void WindowPublisher::Join() {
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WindowPublisher::CloseLater(int64_t id) {
  Window& w = *s_.windows.Find(id);
  if (w.closed()) return;
  Window::Sealed sealed = w.Seal();
  s_.ExplainMissingLocked(&sealed);
  const int64_t start = sealed.spec.start_iteration;
  queue_.push_back(
      {std::move(sealed), RunSeriesOf(s_.ranks), s_.windows.marks(), s_.healthy.RateBefore(start)});
  s_.sched->Closed(id, std::chrono::steady_clock::now());
  cv_.notify_one();
}

void WindowPublisher::Loop() {
  if (::perftracker::Status st = BecomeBackgroundThread("pt-publish"); !st.ok())
    log::Detail("server", "{}", st.message());
  std::unique_lock lk(s_.mu);
  for (;;) {
    cv_.wait(lk, [&] { return !queue_.empty() || done_; });
    if (queue_.empty()) return;  // done_, nothing left
    SealedWindow w = std::move(queue_.front());
    queue_.pop_front();
    const int64_t id = w.sealed.spec.id;
    std::vector<diagnose::Finding> memory = s_.MemoryFindingsLocked();
    std::vector<diagnose::RankMemoryUse> timelines =
        MemoryTimelines(s_.ranks, s_.CurrentRanksLocked());
    lk.unlock();
    diagnose::WindowInput in = w.sealed.DiagnosisInput();
    in.rate = w.rate;
    in.memory = std::move(memory);
    in.timelines = std::move(timelines);
    in.options = s_.options.diagnose;
    diagnose::Diagnosis d = diagnose::DiagnoseWindow(std::move(in), &baseline_);
    auto job = std::make_shared<const pattern::CompactJob>(std::move(w.sealed.job));
    std::string html =
        s_.reports->RenderPage(d, job.get(), std::move(w.series), std::move(w.marks), id);
    lk.lock();
    Publish(id, d, "window", job, std::move(html));
    last_published_ = std::max(last_published_, id);
    cv_.notify_all();
  }
}

void WindowPublisher::Publish(int64_t id, const diagnose::Diagnosis& d, const char* what,
                              std::shared_ptr<const pattern::CompactJob> job, std::string html) {
  const bool amended = std::string_view(what) == "amended";
  Publisher::Result written = s_.reports->Publish(id, d, amended, std::move(job), html);
  s_.counters.CountDiagnosis(d, what);
  // The series in SQLite for `perftracker report` (bounded: at scale only at the end).
  if (s_.ranks.size() * RankState::kMaxSeriesPoints <= kSeriesRowsPerWindow)
    if (::perftracker::Status s3 = s_.store->ReplaceIterationSeries(RunSeriesOf(s_.ranks));
        !s3.ok())
      log::Error("server", "{}", s3.message());
  if (!written.status.ok()) log::Error("server", "{}", written.status.message());
  if (::perftracker::Status s2 = s_.store->FinishWindow(id, d, written.json); !s2.ok())
    log::Error("server", "{}", s2.message());
  // What the window measured: the slowdown cooldown's reference (server/scheduler.h).
  if (std::string_view(what) == "window") s_.sched->Measured(id, d.job.iteration_ms_median);
  log::Detail(
      "server", "{} {} diagnosed (unix {:.3f}): {} finding(s)", what, id,
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
      d.findings.size());
  if (s_.options.print) {
    const fs::path json =
        fs::path(s_.options.report_dir) / "windows" / std::to_string(id) / "diagnosis.json";
    log::Event("", "{} {} diagnosed: {} ({})\n{}", what, id,
               d.findings.empty() ? std::string("no findings")
                                  : fmt::format("{} finding(s)", d.findings.size()),
               json.string(), report::RenderText(d));
  }
}

}  // namespace perftracker::server
