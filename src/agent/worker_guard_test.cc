#include "agent/worker_guard.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "temp_dir.h"

namespace perftracker::agent {
namespace {

namespace fs = std::filesystem;

class WorkerGuardTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    fs::create_directory(Root());
    auto real = RealPath(Root());
    ASSERT_TRUE(real.ok()) << real.status().message();
    root_ = *real;
  }
  std::string Root() const { return dir_.path() + "/traces"; }
  std::string Touch(const std::string& path) const {
    std::FILE* f = std::fopen(path.c_str(), "w");
    EXPECT_NE(f, nullptr) << path;
    if (f) std::fclose(f);
    return path;
  }

  testing_support::TempDir dir_{"pt-guard"};
  std::string root_;
};

TEST_F(WorkerGuardTest, AcceptsARegularFileInsideTheTraceFolder) {
  fs::create_directory(Root() + "/window-1");
  const std::string path = Touch(Root() + "/window-1/rank-0.python.json");
  auto got = CheckTraceFile(root_, path);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, root_ + "/window-1/rank-0.python.json");
}

TEST_F(WorkerGuardTest, RefusesWhatLiesOutside) {
  const std::string outside = Touch(dir_.path() + "/other.json");
  EXPECT_FALSE(CheckTraceFile(root_, outside).ok());
  // Through "..", or a sibling folder whose name starts like the trace folder's.
  EXPECT_FALSE(CheckTraceFile(root_, Root() + "/../other.json").ok());
  fs::create_directory(Root() + "-x");
  EXPECT_FALSE(CheckTraceFile(root_, Touch(Root() + "-x/a.json")).ok());
  EXPECT_FALSE(CheckTraceFile(root_, "relative.json").ok());
  EXPECT_FALSE(CheckTraceFile(root_, "").ok());
  EXPECT_FALSE(CheckTraceFile(root_, Root() + "/missing.json").ok());
  EXPECT_FALSE(CheckTraceFile(root_, root_).ok());  // the folder itself
}

TEST_F(WorkerGuardTest, RefusesLinksEvenToFilesInside) {
  const std::string outside = Touch(dir_.path() + "/secret");
  fs::create_symlink(outside, Root() + "/out.json");
  const auto out = CheckTraceFile(root_, Root() + "/out.json");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("out.json"), std::string::npos);
  const std::string inside = Touch(Root() + "/real.json");
  fs::create_symlink(inside, Root() + "/alias.json");
  EXPECT_FALSE(CheckTraceFile(root_, Root() + "/alias.json").ok());
}

TEST_F(WorkerGuardTest, RefusesAnotherUsersFile) {
  // Issue 40: a trace planted by another user was read as a rank's. (Made another's with
  // chown: the test runs as root, as the project's tests do for their second user.)
  ASSERT_EQ(geteuid(), 0u) << "run as root: the test needs a file of another user's";
  const std::string theirs = Touch(Root() + "/rank-1.python.json");
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  const auto got = CheckTraceFile(root_, theirs);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("belongs to user 65534"), std::string::npos)
      << got.status().message();
}

// A FIFO opened for reading blocks until a writer comes; the check must not.
TEST_F(WorkerGuardTest, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = Root() + "/rank-0.python.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = CheckTraceFile(root_, fifo);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("not a regular file"), std::string::npos);
  fs::create_directory(Root() + "/dir.json");
  EXPECT_FALSE(CheckTraceFile(root_, Root() + "/dir.json").ok());
}

TEST_F(WorkerGuardTest, PeerOfASocketIsThisProcess) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  auto peer = PeerOf(fds[0]);
  close(fds[0]);
  close(fds[1]);
  ASSERT_TRUE(peer.ok()) << peer.status().message();
  EXPECT_EQ(peer->uid, geteuid());
  EXPECT_EQ(peer->pid, getpid());
  EXPECT_TRUE(PeerAllowed(geteuid(), geteuid()));
  EXPECT_FALSE(PeerAllowed(65534, 0));  // nobody's process, a root agent
  EXPECT_FALSE(PeerAllowed(0, 1000));   // root's process, a user's agent
}

}  // namespace
}  // namespace perftracker::agent
