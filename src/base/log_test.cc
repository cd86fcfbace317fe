#include "base/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "file_text.h"

namespace perftracker::log {
namespace {

using testing_support::ReadText;

// Runs FN with stderr sent to a file and returns what it wrote there.
template <typename F>
std::string CaptureStderr(F fn) {
  std::string path = ::testing::TempDir() + "/log_test_stderr.txt";
  std::fflush(stderr);
  int saved = dup(STDERR_FILENO);
  std::FILE* f = std::fopen(path.c_str(), "w");
  dup2(fileno(f), STDERR_FILENO);
  fn();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::fclose(f);
  return ReadText(path);
}

TEST(LogTest, RoutesLevelsBetweenTerminalAndFile) {
  std::string file = ::testing::TempDir() + "/log_test.log";
  std::filesystem::remove(file);
  std::string terminal = CaptureStderr([&] {
    // Not configured: a daemon's output is its log, every level on stderr.
    Detail("agent", "before configure {}", 1);
    ASSERT_TRUE(Configure({.file = file, .verbose = false}).ok());
    Detail("agent", "rank {} connected", 3);
    Event("", "window {} opened", 1);
    Error("server", "cannot write {}", "x.json");
    Event("", "report:\nline two");
  });
  EXPECT_NE(terminal.find("perftracker agent: before configure 1\n"), std::string::npos);
  EXPECT_EQ(terminal.find("rank 3 connected"), std::string::npos) << terminal;
  EXPECT_NE(terminal.find("perftracker: window 1 opened\n"), std::string::npos);
  EXPECT_NE(terminal.find("perftracker server: error: cannot write x.json\n"), std::string::npos);
  // Only the first line of a several-line event carries the prefix.
  EXPECT_NE(terminal.find("perftracker: report:\nline two\n"), std::string::npos);

  std::string logged = ReadText(file);
  EXPECT_EQ(logged.find("before configure"), std::string::npos);
  EXPECT_NE(logged.find("detail agent: rank 3 connected\n"), std::string::npos) << logged;
  EXPECT_NE(logged.find("event  window 1 opened\n"), std::string::npos) << logged;
  EXPECT_NE(logged.find("error  server: cannot write x.json\n"), std::string::npos) << logged;
  EXPECT_NE(logged.find("event  line two\n"), std::string::npos) << logged;

  // Verbose: details on the terminal too.
  terminal = CaptureStderr([&] {
    ASSERT_TRUE(Configure({.file = file, .verbose = true}).ok());
    Detail("agent", "rank {} disconnected", 3);
  });
  EXPECT_NE(terminal.find("perftracker agent: rank 3 disconnected\n"), std::string::npos);
  ASSERT_TRUE(Configure({}).ok());
}

TEST(LogTest, UnwritableFileIsAnErrorNamingIt) {
  Status st = Configure({.file = "/nonexistent-dir/perftracker.log"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir/perftracker.log"), std::string::npos);
}

TEST(LogTest, StatusLineStaysOffWithoutATerminal) {
  std::string terminal = CaptureStderr([] {
    SetStatus("perftracker 0:01 | iteration 3");
    Event("", "after the status");
    SetStatus("");
  });
  // stderr is a file here: no status line and no terminal control codes.
  EXPECT_EQ(terminal.find("iteration 3"), std::string::npos);
  EXPECT_EQ(terminal.find('\033'), std::string::npos);
  EXPECT_NE(terminal.find("after the status"), std::string::npos);
}

TEST(LogTest, PrintableEscapesControlCharacters) {
  EXPECT_EQ(Printable("node-1"), "node-1");
  EXPECT_EQ(Printable("a\x1b[2Jb\nc"), "a\\x1b[2Jb\\x0ac");
  EXPECT_EQ(Printable("h\xc3\xa9te"), "h\xc3\xa9te");  // UTF-8 stays
}

}  // namespace
}  // namespace perftracker::log
