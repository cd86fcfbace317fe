#include "base/private_file.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "file_text.h"
#include "temp_dir.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;
using testing_support::ReadText;

class PrivateFileTest : public ::testing::Test {
 protected:
  testing_support::TempDir tmp_{"pt-private-file"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(PrivateFileTest, CreatesAFileOnlyThisUserMayRead) {
  const std::string path = (dir_ / "a").string();
  ASSERT_TRUE(CreatePrivateFile(path, "hello", IfPresent::kFail).ok());
  EXPECT_EQ(ReadText(path), "hello");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  // Never into a file already there.
  int err = 0;
  const Status again = CreatePrivateFile(path, "other", IfPresent::kFail, &err);
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(err, EEXIST);
  EXPECT_EQ(again.message(), path + ": File exists");
  EXPECT_EQ(ReadText(path), "hello");
  // A stale file of this user's may be replaced.
  ASSERT_TRUE(CreatePrivateFile(path, "fresh", IfPresent::kReplaceOwnFile).ok());
  EXPECT_EQ(ReadText(path), "fresh");
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
  EXPECT_EQ(ReadText(victim), "keep");
  EXPECT_EQ(ReadText(hard), "x");
}

TEST_F(PrivateFileTest, AtomicWritesReplaceOrKeepWhatIsThere) {
  const std::string path = (dir_ / "w").string();
  std::ofstream(path + ".tmp") << "a writer that died";
  ASSERT_TRUE(WritePrivateFileAtomically(path, "one", AtPath::kReplace).ok());
  EXPECT_EQ(ReadText(path), "one");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ASSERT_TRUE(WritePrivateFileAtomically(path, "two", AtPath::kReplace).ok());
  EXPECT_EQ(ReadText(path), "two");
  // Kept: the file already at PATH fails the write and stays as it was.
  EXPECT_FALSE(WritePrivateFileAtomically(path, "three", AtPath::kKeep).ok());
  EXPECT_EQ(ReadText(path), "two");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const std::string fresh = (dir_ / "fresh").string();
  ASSERT_TRUE(WritePrivateFileAtomically(fresh, "new", AtPath::kKeep).ok());
  EXPECT_EQ(ReadText(fresh), "new");
  EXPECT_FALSE(fs::exists(fresh + ".tmp"));
  // A link planted at the temporary name: refused, its target untouched.
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "keep";
  fs::create_symlink(victim, dir_ / "x.tmp");
  EXPECT_FALSE(WritePrivateFileAtomically((dir_ / "x").string(), "y", AtPath::kReplace).ok());
  EXPECT_EQ(ReadText(victim), "keep");
}

}  // namespace
}  // namespace perftracker
