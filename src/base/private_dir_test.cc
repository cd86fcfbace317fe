#include "base/private_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

// A fresh, empty folder for one test.
std::string Scratch(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/private_dir_test_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(PrivateDirTest, CreatesAMissingFolderAndItsParentsOwnerOnly) {
  const std::string dir = Scratch("create") + "/a/b/sock";
  ASSERT_TRUE(MakePrivateDir(dir).ok());
  EXPECT_EQ(ModeOf(dir), 0700u);
  // Again: the folder exists, is ours and private.
  EXPECT_TRUE(MakePrivateDir(dir).ok());
}

TEST(PrivateDirTest, RefusesAnExistingFolderOthersMayEnterWithoutChangingIt) {
  const std::string dir = Scratch("open") + "/shared";
  fs::create_directory(dir);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  const Status st = MakePrivateDir(dir);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(dir), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0777"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  EXPECT_EQ(ModeOf(dir), 0777u);  // not chmod-ed
  // Group-readable only is refused too: others could list what is in it.
  ASSERT_EQ(::chmod(dir.c_str(), 0750), 0);
  EXPECT_FALSE(MakePrivateDir(dir).ok());
}

TEST(PrivateDirTest, RefusesALinkToAPrivateFolder) {
  const std::string base = Scratch("link");
  ASSERT_TRUE(MakePrivateDir(base + "/real").ok());
  fs::create_directory_symlink(base + "/real", base + "/alias");
  const Status st = MakePrivateDir(base + "/alias");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("link"), std::string::npos) << st.message();
}

TEST(PrivateDirTest, RefusesAFile) {
  const std::string file = Scratch("file") + "/f";
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_FALSE(MakePrivateDir(file).ok());
}

TEST(PrivateDirTest, RefusesAnotherUsersFolderEvenIfPrivate) {
  std::string dir;
  if (::geteuid() == 0) {
    // Root: a 0700 folder given to nobody (uid 65534), as another user would have made it.
    dir = Scratch("theirs") + "/theirs";
    fs::create_directory(dir);
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  } else {
    dir = "/";  // root's: another user's for anyone else
  }
  const Status st = MakePrivateDir(dir);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("another user"), std::string::npos) << st.message();
}

TEST(PrivateDirTest, RefusesAnEmptyPath) { EXPECT_FALSE(MakePrivateDir("").ok()); }

TEST(OwnFolderTest, OthersMayReadAReportFolderButNotWriteInIt) {
  const std::string base = Scratch("own");
  const std::string dir = base + "/reports";
  ASSERT_TRUE(MakeOwnFolder(dir, "report folder").ok());
  EXPECT_EQ(ModeOf(dir), 0700u);  // new: private
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  EXPECT_TRUE(MakeOwnFolder(dir, "report folder").ok());  // the user's, readable: kept
  EXPECT_EQ(ModeOf(dir), 0755u);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  const Status st = CheckOwnFolder(dir, "report folder");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("report folder is writable by others (mode 0777)"), std::string::npos)
      << st.message();
  EXPECT_EQ(ModeOf(dir), 0777u);  // not chmod-ed
  // A link of the user's to a folder of theirs stands for it (MakePrivateDir refuses it).
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  fs::create_directory_symlink(dir, base + "/alias");
  EXPECT_TRUE(CheckOwnFolder(base + "/alias", "report folder").ok());
  EXPECT_FALSE(CheckOwnFolder(base + "/missing", "report folder").ok());
}

}  // namespace
}  // namespace perftracker
