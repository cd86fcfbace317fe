// The windows of a run (WindowBook): the numbering that windows and hangs share (a window's
// reports are DIR/windows/<id>/), the windows still in memory (the open one and the newest
// closed ones; older ones live in SQLite and their folders), and the marks of every window and
// hang for the report's chart, and the memory window due (a memory growth's, waiting for the
// window or hang under way). Not thread-safe: the collector's mutex guards it
// (server/server_impl.h).
#ifndef PERFTRACKER_SERVER_WINDOW_BOOK_H_
#define PERFTRACKER_SERVER_WINDOW_BOOK_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "report/html.h"
#include "server/window.h"

namespace perftracker::server {

class WindowBook {
 public:
  using Map = std::map<int64_t, std::unique_ptr<Window>>;

  // Marks kept for the report's chart: the newest (a long job's chart has room for no more).
  static constexpr size_t kMaxMarks = 4096;
  // Closed windows kept in memory (their summaries), newest first; older ones are in SQLite
  // and in REPORT_DIR/windows/<id>/.
  static constexpr size_t kKeptClosedWindows = 16;

  // The next window's or hang's id: one more than any so far.
  int64_t NextId() { return ++last_id_; }
  // An id already used (a restarted server's earlier windows on the same folder): later ids
  // come after it.
  void UsedId(int64_t id) { last_id_ = std::max(last_id_, id); }
  int64_t last_id() const { return last_id_; }

  // Takes window W (its id from NextId), returns it.
  Window& Add(std::unique_ptr<Window> w);
  // Window ID, or null: never opened, or forgotten (ForgetOldClosed).
  Window* Find(int64_t id);
  const Window* Find(int64_t id) const;

  // Forgets the closed windows beyond the newest kKeptClosedWindows, except KEEP's (0: none).
  void ForgetOldClosed(int64_t keep);

  // A window's or hang's mark for the chart; beyond kMaxMarks the oldest goes.
  void AddMark(report::WindowMark m);
  const std::vector<report::WindowMark>& marks() const { return marks_; }

  const Map& windows() const { return windows_; }

  // A memory growth on RANK (REASON: the log's line) asks for a window in which the growing
  // ranks record their allocations (WindowSpec::memory_ranks); growths until it opens join it.
  void MemoryWindowDue(int rank, const std::string& reason);
  // The window due, its reason and ranks (sorted), once: nullopt when none is.
  struct DueMemoryWindow {
    std::string reason;  // the first growth's
    std::vector<int> ranks;
  };
  std::optional<DueMemoryWindow> TakeMemoryWindow();

 private:
  Map windows_;
  std::optional<DueMemoryWindow> memory_due_;
  std::vector<report::WindowMark> marks_;
  int64_t last_id_ = 0;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_WINDOW_BOOK_H_
