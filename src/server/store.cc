#include "server/store.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <chrono>
#include <memory>
#include <utility>

#include "base/limits.h"
#include "diagnose/finding.h"

namespace perftracker::server {
namespace {

// Statement wrapper: finalizes on every return path.
// Bytes bound as a BLOB (a std::string alone binds as TEXT).
struct Blob {
  const std::string& bytes;
};

class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql) {
    rc_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void Bind(int i, const Blob& b) { BindBlob(i, b.bytes); }
  // Binds ARGS to parameters 1, 2, ... in order (nothing when the statement did not prepare:
  // Step reports that): s.BindAll(job_id, int64_t{rank}, host, Blob{bytes}).
  template <typename... Args>
  void BindAll(const Args&... args) {
    if (!ok()) return;
    int i = 0;
    (Bind(++i, args), ...);
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status Step(sqlite3* db, Stmt& stmt) {
  if (!stmt.ok()) return Internal(fmt::format("sqlite: {}", sqlite3_errmsg(db)));
  int rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    return Internal(fmt::format("sqlite: {}", sqlite3_errmsg(db)));
  return Status::Ok();
}

}  // namespace

Store::~Store() { sqlite3_close(db_); }

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Internal(fmt::format("{}: cannot open database: {}", path, msg));
  }
  std::unique_ptr<Store> store(new Store(db));
  PT_RETURN_IF_ERROR(store->Exec(R"sql(
    PRAGMA journal_mode=WAL;
    PRAGMA synchronous=NORMAL;
    CREATE TABLE IF NOT EXISTS jobs(
      id INTEGER PRIMARY KEY AUTOINCREMENT, report_dir TEXT, started_at REAL);
    CREATE TABLE IF NOT EXISTS windows(
      job_id INTEGER, window_id INTEGER, start_iteration INTEGER, iterations INTEGER,
      reason TEXT, state TEXT, opened_at REAL, closed_at REAL, diagnosis_json TEXT,
      PRIMARY KEY(job_id, window_id));
    CREATE TABLE IF NOT EXISTS rank_summaries(
      job_id INTEGER, window_id INTEGER, rank INTEGER, host TEXT, summary_bytes INTEGER,
      iterations INTEGER, mean_iteration_ms REAL, hardware_json TEXT, summary BLOB);
    CREATE TABLE IF NOT EXISTS iteration_series(
      job_id INTEGER, rank INTEGER, step INTEGER, ms REAL);
    CREATE INDEX IF NOT EXISTS iteration_series_job ON iteration_series(job_id, rank, step);
    CREATE TABLE IF NOT EXISTS findings(
      job_id INTEGER, window_id INTEGER, idx INTEGER, category TEXT, class TEXT, cause TEXT,
      ranks TEXT, impact_ms REAL, summary TEXT);
  )sql"));
  // A database from before the summary column: add it (an error only says it exists).
  (void)store->Exec("ALTER TABLE rank_summaries ADD COLUMN summary BLOB");
  return store;
}

Status Store::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Internal(fmt::format("sqlite: {}", msg));
  }
  return Status::Ok();
}

StatusOr<int64_t> Store::AddJob(const std::string& report_dir) {
  Stmt s(db_, "INSERT INTO jobs(report_dir, started_at) VALUES(?, ?)");
  s.BindAll(report_dir, NowSeconds());
  PT_RETURN_IF_ERROR(Step(db_, s));
  job_id_ = sqlite3_last_insert_rowid(db_);
  return job_id_;
}

StatusOr<int64_t> Store::LastWindowId() {
  Stmt s(db_, "SELECT COALESCE(MAX(window_id), 0) FROM windows");
  if (!s.ok()) return Internal(fmt::format("sqlite: {}", sqlite3_errmsg(db_)));
  if (sqlite3_step(s.get()) != SQLITE_ROW)
    return Internal(fmt::format("sqlite: {}", sqlite3_errmsg(db_)));
  return sqlite3_column_int64(s.get(), 0);
}

Status Store::AddWindow(int64_t job_id, int64_t window_id, int64_t start_iteration, int iterations,
                        const std::string& reason) {
  Stmt s(db_,
         "INSERT INTO windows(job_id, window_id, start_iteration, iterations, reason, state, "
         "opened_at) VALUES(?, ?, ?, ?, ?, 'open', ?)");
  s.BindAll(job_id, window_id, start_iteration, static_cast<int64_t>(iterations), reason,
            NowSeconds());
  return Step(db_, s);
}

Status Store::AddRankSummary(const RankSummaryRow& row) {
  Stmt s(db_,
         "INSERT INTO rank_summaries(job_id, window_id, rank, host, summary_bytes, iterations, "
         "mean_iteration_ms, hardware_json, summary) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.BindAll(job_id_, row.window_id, static_cast<int64_t>(row.rank), row.host, row.summary_bytes,
            static_cast<int64_t>(row.iterations), row.mean_iteration_ms, row.hardware_json,
            Blob{row.summary});
  return Step(db_, s);
}

Status Store::FinishWindow(int64_t window_id, const diagnose::Diagnosis& diagnosis,
                           const std::string& diagnosis_json) {
  {
    Stmt s(db_,
           "UPDATE windows SET state='done', closed_at=?, diagnosis_json=? "
           "WHERE job_id=? AND window_id=?");
    s.BindAll(NowSeconds(), diagnosis_json, job_id_, window_id);
    PT_RETURN_IF_ERROR(Step(db_, s));
  }
  int64_t idx = 0;
  for (const diagnose::Finding& f : diagnosis.findings) {
    Stmt s(db_,
           "INSERT INTO findings(job_id, window_id, idx, category, class, cause, ranks, "
           "impact_ms, summary) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.BindAll(job_id_, window_id, idx++, std::string(diagnose::CategoryName(f.category)),
              std::string(diagnose::FindingClassName(f.finding_class)),
              std::string(diagnose::CauseName(f.cause)), diagnose::RankList(f.ranks), f.impact_ms,
              f.summary);
    PT_RETURN_IF_ERROR(Step(db_, s));
  }
  return Status::Ok();
}

Status Store::ReplaceIterationSeries(const std::vector<report::RunSeries>& series) {
  PT_RETURN_IF_ERROR(Exec("BEGIN"));
  Status st = [&]() -> Status {
    {
      Stmt del(db_, "DELETE FROM iteration_series WHERE job_id=?");
      if (del.ok()) del.Bind(1, job_id_);
      PT_RETURN_IF_ERROR(Step(db_, del));
    }
    Stmt ins(db_, "INSERT INTO iteration_series(job_id, rank, step, ms) VALUES(?, ?, ?, ?)");
    for (const report::RunSeries& s : series) {
      for (size_t i = 0; i < s.steps.size() && i < s.ms.size(); ++i) {
        if (ins.ok()) {
          sqlite3_reset(ins.get());
          ins.Bind(1, job_id_);
          ins.Bind(2, static_cast<int64_t>(s.rank));
          ins.Bind(3, s.steps[i]);
          ins.Bind(4, static_cast<double>(s.ms[i]));
        }
        PT_RETURN_IF_ERROR(Step(db_, ins));
      }
    }
    return Status::Ok();
  }();
  if (!st.ok()) {
    (void)Exec("ROLLBACK");
    return st;
  }
  return Exec("COMMIT");
}

StatusOr<Store::RunRecord> Store::ReadRun(const std::string& path, int64_t window_id) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return InvalidArgument(fmt::format("{}: cannot open database: {}", path, msg));
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, sqlite3_close);
  // The file may be anyone's: nothing in its schema runs (views and triggers off, so a view named
  // as a table cannot loop a recursive query forever; functions in it untrusted), nothing is
  // written through it (defensive), and no value it holds may be larger than a summary file.
  for (const auto& [option, on] :
       {std::pair{SQLITE_DBCONFIG_DEFENSIVE, 1}, std::pair{SQLITE_DBCONFIG_ENABLE_VIEW, 0},
        std::pair{SQLITE_DBCONFIG_ENABLE_TRIGGER, 0}, std::pair{SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0}})
    if (sqlite3_db_config(db, option, on, nullptr) != SQLITE_OK)
      return InvalidArgument(fmt::format("{}: cannot open database: {}", path, sqlite3_errmsg(db)));
  sqlite3_limit(db, SQLITE_LIMIT_LENGTH, static_cast<int>(limits::kMaxSummaryFile));
  auto fail = [&](const char* what) {
    return InvalidArgument(
        fmt::format("{}: not a perftracker database ({}: {})", path, what, sqlite3_errmsg(db)));
  };
  RunRecord run;
  {
    // The latest window that has summaries (or the one asked for), and its job.
    Stmt s(db,
           window_id > 0
               ? "SELECT job_id, window_id FROM rank_summaries WHERE window_id=? ORDER BY job_id "
                 "DESC LIMIT 1"
               : "SELECT job_id, window_id FROM rank_summaries ORDER BY job_id DESC, window_id "
                 "DESC LIMIT 1");
    if (!s.ok()) return fail("rank_summaries");
    if (window_id > 0) s.Bind(1, window_id);
    if (sqlite3_step(s.get()) == SQLITE_ROW) {
      run.job_id = sqlite3_column_int64(s.get(), 0);
      run.window_id = sqlite3_column_int64(s.get(), 1);
    } else if (window_id > 0) {
      return InvalidArgument(fmt::format("{}: no summaries of window {}", path, window_id));
    }
  }
  if (run.job_id == 0) {
    Stmt s(db, "SELECT max(id) FROM jobs");
    if (!s.ok()) return fail("jobs");
    if (sqlite3_step(s.get()) == SQLITE_ROW) run.job_id = sqlite3_column_int64(s.get(), 0);
  }
  {
    Stmt s(db,
           "SELECT window_id, start_iteration, iterations, reason FROM windows WHERE job_id=? "
           "ORDER BY window_id");
    if (!s.ok()) return fail("windows");
    s.Bind(1, run.job_id);
    while (sqlite3_step(s.get()) == SQLITE_ROW) {
      report::WindowMark w;
      w.id = sqlite3_column_int64(s.get(), 0);
      w.start_iteration = sqlite3_column_int64(s.get(), 1);
      w.iterations = sqlite3_column_int(s.get(), 2);
      const unsigned char* reason = sqlite3_column_text(s.get(), 3);
      w.reason = reason ? reinterpret_cast<const char*>(reason) : "";
      run.windows.push_back(std::move(w));
    }
  }
  if (run.window_id > 0) {
    Stmt s(db, "SELECT diagnosis_json FROM windows WHERE job_id=? AND window_id=?");
    if (!s.ok()) return fail("windows");
    s.Bind(1, run.job_id);
    s.Bind(2, run.window_id);
    if (sqlite3_step(s.get()) == SQLITE_ROW)
      if (const unsigned char* t = sqlite3_column_text(s.get(), 0))
        run.diagnosis_json = reinterpret_cast<const char*>(t);
  }
  if (run.window_id > 0) {
    Stmt s(db, "SELECT summary FROM rank_summaries WHERE job_id=? AND window_id=? ORDER BY rank");
    if (!s.ok()) return fail("rank_summaries");
    s.Bind(1, run.job_id);
    s.Bind(2, run.window_id);
    while (sqlite3_step(s.get()) == SQLITE_ROW) {
      const void* blob = sqlite3_column_blob(s.get(), 0);
      const int n = sqlite3_column_bytes(s.get(), 0);
      if (blob && n > 0) run.summaries.emplace_back(static_cast<const char*>(blob), n);
    }
  }
  {
    Stmt s(db, "SELECT rank, step, ms FROM iteration_series WHERE job_id=? ORDER BY rank, step");
    // A database from before the series table has none: the report goes without.
    if (s.ok()) {
      s.Bind(1, run.job_id);
      while (sqlite3_step(s.get()) == SQLITE_ROW) {
        const int rank = sqlite3_column_int(s.get(), 0);
        if (run.series.empty() || run.series.back().rank != rank) {
          run.series.emplace_back();
          run.series.back().rank = rank;
        }
        run.series.back().steps.push_back(sqlite3_column_int64(s.get(), 1));
        run.series.back().ms.push_back(static_cast<float>(sqlite3_column_double(s.get(), 2)));
      }
    }
  }
  return run;
}

StatusOr<std::vector<std::string>> Store::QueryColumn(const std::string& sql) {
  Stmt s(db_, sql);
  if (!s.ok()) return Internal(fmt::format("sqlite: {}", sqlite3_errmsg(db_)));
  std::vector<std::string> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(s.get(), 0);
    out.emplace_back(text ? reinterpret_cast<const char*>(text) : "");
  }
  if (rc != SQLITE_DONE) return Internal(fmt::format("sqlite: {}", sqlite3_errmsg(db_)));
  return out;
}

}  // namespace perftracker::server
