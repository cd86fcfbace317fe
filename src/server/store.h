// The server's SQLite store: jobs, windows, per-rank summary metadata and findings. libsqlite3
// directly (one connection, callers serialize), so the server has no ORM or extra dependency.
#ifndef PERFTRACKER_SERVER_STORE_H_
#define PERFTRACKER_SERVER_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "diagnose/finding.h"
#include "report/html.h"

struct sqlite3;

namespace perftracker::server {

struct RankSummaryRow {
  int64_t window_id = 0;
  int rank = -1;
  std::string host;
  int64_t summary_bytes = 0;
  int iterations = 0;
  double mean_iteration_ms = 0;
  std::string hardware_json;
  std::string summary;  // the uploaded summary itself (pattern/summary_io.h)
};

class Store {
 public:
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Opens (creating when absent) the database at PATH; ":memory:" for tests.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path);

  StatusOr<int64_t> AddJob(const std::string& report_dir);
  // The highest window id any job of this database opened (0: none). A restarted server numbers
  // its windows after it: a window its last life opened and was killed in has no report folder,
  // and its id again would send the agents into that window's trace folder.
  StatusOr<int64_t> LastWindowId();
  // Windows, summaries and findings below belong to the last job added.
  Status AddWindow(int64_t job_id, int64_t window_id, int64_t start_iteration, int iterations,
                   const std::string& reason);
  Status AddRankSummary(const RankSummaryRow& row);
  // Marks the window done and stores its findings and the full diagnosis JSON.
  Status FinishWindow(int64_t window_id, const diagnose::Diagnosis& diagnosis,
                      const std::string& diagnosis_json);

  // Each rank's iteration times over the run (bounded by the server), replacing the job's
  // earlier copy.
  Status ReplaceIterationSeries(const std::vector<report::RunSeries>& series);

  // What `perftracker report DIR` draws from a run's database: its last job that diagnosed a
  // window, that window's uploaded summaries, the windows and the iteration series.
  struct RunRecord {
    int64_t job_id = 0;
    int64_t window_id = 0;  // the latest window with summaries (0: none)
    std::vector<report::WindowMark> windows;
    std::vector<std::string> summaries;  // pattern/summary_io.h bytes, one per rank
    std::string diagnosis_json;          // that window's diagnosis ("" when not diagnosed)
    std::vector<report::RunSeries> series;
  };
  // Reads the database at PATH (read-only); a window id > 0 picks that window.
  static StatusOr<RunRecord> ReadRun(const std::string& path, int64_t window_id = 0);

  // For tests and status: one column of one query as text.
  StatusOr<std::vector<std::string>> QueryColumn(const std::string& sql);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Status Exec(const std::string& sql);
  sqlite3* db_;
  int64_t job_id_ = 0;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_STORE_H_
