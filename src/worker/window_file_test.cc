#include "worker/window_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "base/python_window_format.h"
#include "file_text.h"
#include "temp_dir.h"

namespace perftracker::worker {
namespace {

namespace fs = std::filesystem;

using testing_support::ReadText;

PythonWindow Window(const std::string& path) {
  PythonWindow w;
  w.path = path;
  w.pid = 7;
  return w;
}

TEST(WindowFileTest, WritesAPrivateFileAndNoTemporaryOne) {
  testing_support::TempDir dir("pt-window-file");
  const std::string path = dir.path() + "/rank-0.python.json";
  ASSERT_TRUE(WritePythonWindow(Window(path)).ok());
  EXPECT_NE(ReadText(path).find(python_window::kSchema), std::string::npos);
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// Issue 26: a link planted at the trace's name (or its temporary one) used to make the worker
// overwrite whatever it pointed to; an existing file was replaced.
TEST(WindowFileTest, NeverFollowsALinkNorReplacesAFile) {
  testing_support::TempDir dir("pt-window-file");
  const std::string victim = dir.path() + "/victim";
  std::ofstream(victim) << "precious";
  const std::string path = dir.path() + "/rank-0.python.json";
  fs::create_symlink(victim, path);
  EXPECT_FALSE(WritePythonWindow(Window(path)).ok());
  EXPECT_EQ(ReadText(victim), "precious");
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const std::string other = dir.path() + "/rank-1.python.json";
  fs::create_symlink(victim, other + ".tmp");
  EXPECT_FALSE(WritePythonWindow(Window(other)).ok());
  EXPECT_EQ(ReadText(victim), "precious");
  EXPECT_FALSE(fs::exists(other));

  const std::string existing = dir.path() + "/rank-2.python.json";
  std::ofstream(existing) << "earlier";
  EXPECT_FALSE(WritePythonWindow(Window(existing)).ok());
  EXPECT_EQ(ReadText(existing), "earlier");
}

TEST(WindowFileTest, ASampledHeapIsWrittenAsKeptMemory) {
  PythonWindow w = Window("unused");
  EXPECT_EQ(PythonWindowJson(w).find("kept_memory"), std::string::npos);  // none sampled
  w.kept.sample_bytes = 65536;
  w.kept.samples = 9;
  w.kept.dropped = 1;
  // The last cell: tensors followed whole, made by the op named 2.
  w.kept.cells = {KeptHeapCell{3, 0, 1048576.4, 8}, KeptHeapCell{4, -1, 70000, 1},
                  KeptHeapCell{4, 1, 4096, 2, 2}};
  const std::string json = PythonWindowJson(w);
  EXPECT_NE(json.find(R"("kept_memory":{"sample_bytes":65536,"samples":9,"dropped":1,)"
                      R"("cells":[[3,0,1048576,8],[4,-1,70000,1],[4,1,4096,2,2]]})"),
            std::string::npos)
      << json;
}

}  // namespace
}  // namespace perftracker::worker
