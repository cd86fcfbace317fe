#include "agent/trace_retention.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace perftracker::agent {
namespace {

namespace fs = std::filesystem;

fs::path Dir() {
  fs::path d = fs::temp_directory_path() / ("pt_retention_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void Window(const fs::path& dir, int id, size_t bytes) {
  fs::path w = dir / ("window-" + std::to_string(id));
  fs::create_directories(w);
  std::ofstream(w / "rank-0.json") << std::string(bytes, 'x');
}

TEST(TraceRetention, KeepsTheNewestWindowsAndTheCurrentOne) {
  const fs::path d = Dir();
  for (int id : {1, 2, 3, 4, 5, 10}) Window(d, id, 100);
  fs::create_directories(d / "notes");  // not a window folder: left alone
  auto removed = PruneTraces(d.string(), {.keep_windows = 3, .max_bytes = 1 << 20}, 11);
  ASSERT_EQ(removed.size(), 3u);
  EXPECT_EQ(removed[0].window_id, 3);
  EXPECT_EQ(removed[0].bytes, 100u);
  EXPECT_TRUE(fs::exists(d / "window-10"));
  EXPECT_TRUE(fs::exists(d / "window-5"));
  EXPECT_TRUE(fs::exists(d / "window-4"));
  EXPECT_FALSE(fs::exists(d / "window-3"));
  EXPECT_FALSE(fs::exists(d / "window-1"));
  EXPECT_TRUE(fs::exists(d / "notes"));
  fs::remove_all(d);
}

TEST(TraceRetention, TheSizeCapRemovesOlderWindowsButNeverTheCurrent) {
  const fs::path d = Dir();
  Window(d, 1, 400);
  Window(d, 2, 400);
  Window(d, 3, 5000);  // the current window, alone over the cap
  auto removed = PruneTraces(d.string(), {.keep_windows = 3, .max_bytes = 1000}, 3);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_TRUE(fs::exists(d / "window-3"));
  EXPECT_FALSE(fs::exists(d / "window-2"));
  EXPECT_TRUE(PruneTraces((d / "missing").string(), {}, 1).empty());
  fs::remove_all(d);
}

}  // namespace
}  // namespace perftracker::agent
