#include <fmt/format.h>

#include "report/report.h"
#include "server/server_impl.h"

namespace perftracker::server {

std::string Server::Impl::RenderHtmlLocked(const diagnose::Diagnosis& d,
                                           const pattern::CompactJob* job, int64_t id,
                                           std::vector<report::WaitGroup> waits,
                                           int64_t views_from) const {
  return reports->RenderPage(d, job, RunSeriesOf(ranks), windows.marks(), id, std::move(waits),
                             views_from);
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
