#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>

#include "report/report.h"
#include "server/server_impl.h"

namespace perftracker::server {

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

std::string Server::Impl::RenderHtmlLocked(const diagnose::Diagnosis& d,
                                           const pattern::CompactJob* job, int64_t id,
                                           std::vector<report::WaitGroup> waits,
                                           int64_t views_from) const {
  return RenderHtmlFrom(d, job, SeriesLocked(), windows.marks(), id, std::move(waits), views_from);
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
  const int64_t w = id > 0 ? id : latest_window_id;
  const std::string rel = fmt::format("windows/{}/trace.json.gz", w);
  std::error_code ec;
  if (w > 0 && fs::exists(fs::path(options.report_dir) / rel, ec))
    in.trace_link = id > 0 ? "trace.json.gz" : rel;
  return report::RenderHtml(in);
}

void Server::Impl::Publish(int64_t id, const diagnose::Diagnosis& d, const char* what,
                           std::shared_ptr<const pattern::CompactJob> job, std::string html) {
  std::string json = report::RenderJson(d);
  fs::path dir = fs::path(options.report_dir) / "windows" / std::to_string(id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const bool amended = std::string_view(what) == "amended";
  // A window that profiled nothing (its ranks ended before its first iteration) leaves the
  // job's report to the diagnosis before it.
  const bool profiled_nothing = d.job.ranks.empty() && d.findings.empty() && latest.has_value();
  const bool root = (!amended || root_report_id == id) && !profiled_nothing;
  ::perftracker::Status st = WriteReport(d, (dir / "diagnosis.json").string());
  if (st.ok() && root)
    st = WriteReport(d, (fs::path(options.report_dir) / "diagnosis.json").string());
  if (st.ok()) st = WriteAtomically((dir / "report.html").string(), html);
  if (st.ok() && root)
    st = WriteAtomically((fs::path(options.report_dir) / "report.html").string(), html);
  if (root) root_report_id = id;
  if (job) {
    latest_job = std::move(job);
    latest_window_id = id;
    latest_waits.clear();
  }
  counters.CountDiagnosis(d, what);
  // The series in SQLite for `perftracker report` (bounded: at scale only at the end).
  if (ranks.size() * RankState::kMaxSeriesPoints <= kSeriesRowsPerWindow)
    if (::perftracker::Status s3 = store->ReplaceIterationSeries(SeriesLocked()); !s3.ok())
      log::Error("server", "{}", s3.message());
  if (st.ok()) wrote_latest = true;
  if (!st.ok()) log::Error("server", "{}", st.message());
  if (::perftracker::Status s2 = store->FinishWindow(id, d, json); !s2.ok())
    log::Error("server", "{}", s2.message());
  if (root) latest = d;
  // What the window measured: the slowdown cooldown's reference (server/scheduler.h).
  if (std::string_view(what) == "window") sched->Measured(id, d.job.iteration_ms_median);
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

}  // namespace perftracker::server
