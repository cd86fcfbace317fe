#include "server/publisher.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>
#include <filesystem>

#include "report/report.h"

namespace perftracker::server {

namespace fs = std::filesystem;

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

Publisher::Result Publisher::Publish(int64_t id, const diagnose::Diagnosis& d, bool amended,
                                     std::shared_ptr<const pattern::CompactJob> job,
                                     std::string_view html) {
  Result r;
  r.json = report::RenderJson(d);
  const fs::path dir = fs::path(report_dir_) / "windows" / std::to_string(id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const bool profiled_nothing =
      d.job.ranks.empty() && d.findings.empty() && latest_.diagnosis.has_value();
  const bool root = (!amended || latest_.root_id == id) && !profiled_nothing;
  r.status = WriteAtomically((dir / "diagnosis.json").string(), r.json);
  if (r.status.ok() && root)
    r.status = WriteAtomically((fs::path(report_dir_) / "diagnosis.json").string(), r.json);
  if (r.status.ok()) r.status = WriteAtomically((dir / "report.html").string(), html);
  if (r.status.ok() && root)
    r.status = WriteAtomically((fs::path(report_dir_) / "report.html").string(), html);
  if (root) {
    latest_.root_id = id;
    latest_.diagnosis = d;
  }
  if (job) {
    latest_.job = std::move(job);
    latest_.window_id = id;
    latest_.waits.clear();
  }
  return r;
}

std::string Publisher::RenderPage(const diagnose::Diagnosis& d, const pattern::CompactJob* job,
                                  std::vector<report::RunSeries> series,
                                  std::vector<report::WindowMark> marks, int64_t id,
                                  std::vector<report::WaitGroup> waits, int64_t views_from) const {
  report::HtmlInput in;
  in.title = id > 0 ? fmt::format("perftracker: window {} of {}", id, report_dir_)
                    : fmt::format("perftracker: {}", report_dir_);
  in.diagnosis = &d;
  in.job = job;
  in.series = std::move(series);
  in.windows = std::move(marks);
  in.waits = std::move(waits);
  in.views_from_window = job ? views_from : 0;
  in.generated = fmt::format("{:%Y-%m-%d %H:%M} UTC", fmt::gmtime(std::time(nullptr)));
  const int64_t w = id > 0 ? id : latest_.window_id;
  const std::string rel = fmt::format("windows/{}/trace.json.gz", w);
  std::error_code ec;
  if (w > 0 && std::filesystem::exists(std::filesystem::path(report_dir_) / rel, ec))
    in.trace_link = id > 0 ? "trace.json.gz" : rel;
  return report::RenderHtml(in);
}

}  // namespace perftracker::server
