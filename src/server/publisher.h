// Where a diagnosed window's report goes, and which report is the job's. Every window, hang and
// amendment is written to REPORT_DIR/windows/<id>/ (diagnosis.json, report.html); the job's
// current one to REPORT_DIR/ as well, and kept (LatestReport: the run's final report and /metrics
// start from it). The JSON is rendered once per publish and handed back for the store. Not
// thread-safe: the server calls it under its lock.
//   Publisher p(dir); p.Publish(3, d, false, job, html) writes dir/windows/3/diagnosis.json,
//   dir/windows/3/report.html, dir/diagnosis.json and dir/report.html; p.latest().root_id == 3
#ifndef PERFTRACKER_SERVER_PUBLISHER_H_
#define PERFTRACKER_SERVER_PUBLISHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "diagnose/finding.h"
#include "pattern/compact_job.h"
#include "report/html.h"

namespace perftracker::server {

// Writes through a temporary file and a rename, so readers never see half a report.
Status WriteAtomically(const std::string& path, std::string_view text);
// DIAGNOSIS as JSON at PATH, atomically.
Status WriteReport(const diagnose::Diagnosis& diagnosis, const std::string& path);

// The job's report as the last publish left it.
struct LatestReport {
  std::optional<diagnose::Diagnosis> diagnosis;  // REPORT_DIR/diagnosis.json's
  int64_t root_id = 0;                           // the window or hang it is of
  // The last profiled window's patterns (the page's per-rank views; a hang has none), its id,
  // and where each rank stood when the latest diagnosis is a hang's.
  std::shared_ptr<const pattern::CompactJob> job;
  int64_t window_id = 0;
  std::vector<report::WaitGroup> waits;
};

class Publisher {
 public:
  explicit Publisher(std::string report_dir) : report_dir_(std::move(report_dir)) {}

  // D's JSON, and whether every file was written (the first error otherwise).
  struct Result {
    std::string json;
    Status status;
  };
  // Writes D and its page HTML for window or hang ID. AMENDED: D rewrites ID's earlier diagnosis
  // (REPORT_DIR's files only while they hold ID's). JOB: the window's patterns (null: a hang). A
  // window that profiled nothing (no rank reported, no finding) leaves the job's report to the
  // diagnosis before it.
  Result Publish(int64_t id, const diagnose::Diagnosis& d, bool amended,
                 std::shared_ptr<const pattern::CompactJob> job, std::string_view html);

  // The HTML page of D, window or hang ID's diagnosis (0: the run's end), with the run's
  // iteration SERIES and windows (MARKS). JOB: the window's patterns (null: a hang). WAITS and
  // VIEWS_FROM: a hang's page (where each rank stands; the per-rank views are window
  // VIEWS_FROM's). Links the window's timeline where `perftracker run` exported it
  // (windows/<id>/trace.json.gz, at the job's end).
  std::string RenderPage(const diagnose::Diagnosis& d, const pattern::CompactJob* job,
                         std::vector<report::RunSeries> series,
                         std::vector<report::WindowMark> marks, int64_t id,
                         std::vector<report::WaitGroup> waits = {}, int64_t views_from = 0) const;

  const LatestReport& latest() const { return latest_; }
  LatestReport& latest() { return latest_; }
  const std::string& report_dir() const { return report_dir_; }

 private:
  std::string report_dir_;
  LatestReport latest_;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_PUBLISHER_H_
