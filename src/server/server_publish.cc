#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>

#include "report/report.h"
#include "server/server_impl.h"

namespace perftracker::server {

std::string Server::Impl::RenderHtmlLocked(const diagnose::Diagnosis& d,
                                           const pattern::CompactJob* job, int64_t id,
                                           std::vector<report::WaitGroup> waits,
                                           int64_t views_from) const {
  return RenderHtmlFrom(d, job, RunSeriesOf(ranks), windows.marks(), id, std::move(waits),
                        views_from);
}

std::string Server::Impl::RenderHtmlFrom(const diagnose::Diagnosis& d,
                                         const pattern::CompactJob* job,
                                         std::vector<report::RunSeries> series,
                                         std::vector<report::WindowMark> windows_so_far, int64_t id,
                                         std::vector<report::WaitGroup> waits,
                                         int64_t views_from) const {
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
  const int64_t w = id > 0 ? id : reports->latest().window_id;
  const std::string rel = fmt::format("windows/{}/trace.json.gz", w);
  std::error_code ec;
  if (w > 0 && fs::exists(fs::path(options.report_dir) / rel, ec))
    in.trace_link = id > 0 ? "trace.json.gz" : rel;
  return report::RenderHtml(in);
}

void Server::Impl::Publish(int64_t id, const diagnose::Diagnosis& d, const char* what,
                           std::shared_ptr<const pattern::CompactJob> job, std::string html) {
  const bool amended = std::string_view(what) == "amended";
  Publisher::Result written = reports->Publish(id, d, amended, std::move(job), html);
  counters.CountDiagnosis(d, what);
  // The series in SQLite for `perftracker report` (bounded: at scale only at the end).
  if (ranks.size() * RankState::kMaxSeriesPoints <= kSeriesRowsPerWindow)
    if (::perftracker::Status s3 = store->ReplaceIterationSeries(RunSeriesOf(ranks)); !s3.ok())
      log::Error("server", "{}", s3.message());
  if (!written.status.ok()) log::Error("server", "{}", written.status.message());
  if (::perftracker::Status s2 = store->FinishWindow(id, d, written.json); !s2.ok())
    log::Error("server", "{}", s2.message());
  // What the window measured: the slowdown cooldown's reference (server/scheduler.h).
  if (std::string_view(what) == "window") sched->Measured(id, d.job.iteration_ms_median);
  log::Detail(
      "server", "{} {} diagnosed (unix {:.3f}): {} finding(s)", what, id,
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
      d.findings.size());
  if (options.print) {
    const fs::path json =
        fs::path(options.report_dir) / "windows" / std::to_string(id) / "diagnosis.json";
    log::Event("", "{} {} diagnosed: {} ({})\n{}", what, id,
               d.findings.empty() ? std::string("no findings")
                                  : fmt::format("{} finding(s)", d.findings.size()),
               json.string(), report::RenderText(d));
  }
}

}  // namespace perftracker::server
