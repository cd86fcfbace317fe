#include "base/private_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class PrivateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pt_private_file_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(PrivateFileTest, CreatesAFileOnlyThisUserMayRead) {
  const std::string path = (dir_ / "a").string();
  ASSERT_TRUE(CreatePrivateFile(path, "hello", IfPresent::kFail).ok());
  EXPECT_EQ(Read(path), "hello");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  // Never into a file already there.
  int err = 0;
  const Status again = CreatePrivateFile(path, "other", IfPresent::kFail, &err);
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(err, EEXIST);
  EXPECT_EQ(again.message(), path + ": File exists");
  EXPECT_EQ(Read(path), "hello");
  // A stale file of this user's may be replaced.
  ASSERT_TRUE(CreatePrivateFile(path, "fresh", IfPresent::kReplaceOwnFile).ok());
  EXPECT_EQ(Read(path), "fresh");
}

TEST_F(PrivateFileTest, NeverWritesThroughALinkPlantedAtTheName) {
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "keep";
  const fs::path soft = dir_ / "soft", hard = dir_ / "hard";
  fs::create_symlink(victim, soft);
  fs::create_hard_link(victim, hard);
  for (const fs::path& p : {soft, hard}) {
    EXPECT_FALSE(CreatePrivateFile(p.string(), "x", IfPresent::kFail).ok());
  }
  // Replacing a stale file removes a symbolic link's name only if it is a regular file: the
  // link stays refused. A hard link is a regular file of this user's: its name is removed and
  // a new file made, the victim untouched.
  EXPECT_FALSE(CreatePrivateFile(soft.string(), "x", IfPresent::kReplaceOwnFile).ok());
  EXPECT_TRUE(CreatePrivateFile(hard.string(), "x", IfPresent::kReplaceOwnFile).ok());
  EXPECT_EQ(Read(victim), "keep");
  EXPECT_EQ(Read(hard), "x");
}

TEST_F(PrivateFileTest, AtomicWritesReplaceOrKeepWhatIsThere) {
  const std::string path = (dir_ / "w").string();
  std::ofstream(path + ".tmp") << "a writer that died";
  ASSERT_TRUE(WritePrivateFileAtomically(path, "one", AtPath::kReplace).ok());
  EXPECT_EQ(Read(path), "one");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ASSERT_TRUE(WritePrivateFileAtomically(path, "two", AtPath::kReplace).ok());
  EXPECT_EQ(Read(path), "two");
  // Kept: the file already at PATH fails the write and stays as it was.
  EXPECT_FALSE(WritePrivateFileAtomically(path, "three", AtPath::kKeep).ok());
  EXPECT_EQ(Read(path), "two");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const std::string fresh = (dir_ / "fresh").string();
  ASSERT_TRUE(WritePrivateFileAtomically(fresh, "new", AtPath::kKeep).ok());
  EXPECT_EQ(Read(fresh), "new");
  EXPECT_FALSE(fs::exists(fresh + ".tmp"));
  // A link planted at the temporary name: refused, its target untouched.
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "keep";
  fs::create_symlink(victim, dir_ / "x.tmp");
  EXPECT_FALSE(WritePrivateFileAtomically((dir_ / "x").string(), "y", AtPath::kReplace).ok());
  EXPECT_EQ(Read(victim), "keep");
}

}  // namespace
}  // namespace perftracker
