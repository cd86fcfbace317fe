#include "cli/online_commands.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "cli/testing.h"
#include "temp_dir.h"

namespace perftracker::cli {
namespace {

TEST(OnlineCommandsTest, DurationsInSecondsMinutesHours) {
  EXPECT_EQ(*ParseDuration("--x", "90"), 90);
  EXPECT_EQ(*ParseDuration("--x", "90s"), 90);
  EXPECT_EQ(*ParseDuration("--x", "15m"), 900);
  EXPECT_EQ(*ParseDuration("--x", "1.5h"), 5400);
  EXPECT_EQ(*ParseDuration("--x", "0"), 0);
}

TEST(OnlineCommandsTest, NotADuration) {
  EXPECT_EQ(ParseDuration("--profile-every", "3x").status().message(),
            "--profile-every: '3x' is not a duration (e.g. 90s, 15m, 2h)");
  for (const char* text : {"", "m", "-5m", "1e10h", "nan", "5 m"})
    EXPECT_FALSE(ParseDuration("--x", text).ok()) << text;
}

TEST(OnlineCommandsTest, ForNodeNamesThisNode) {
  testing::ScopedEnv node("SLURMD_NODENAME", "n7");
  EXPECT_EQ(ForNode("/tmp/pt-{node}/agent.sock"), "/tmp/pt-n7/agent.sock");
  EXPECT_EQ(ForNode("/r/traces/{node}"), "/r/traces/n7");
  EXPECT_EQ(ForNode("/tmp/agent.sock"), "/tmp/agent.sock");
}

// Issue 26: a folder others may write into lets them plant traces (--watch) or put their own
// socket where the workers connect. Both are refused with one line, and left as they were.
TEST(OnlineCommandsTest, AgentRefusesFoldersOthersMayWriteInto) {
  testing_support::TempDir tmp("pt-online");
  ASSERT_FALSE(tmp.path().empty());
  const std::string open_dir = tmp.path() + "/open";
  std::filesystem::create_directory(open_dir);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);

  OnlineFlags watch;
  watch.server = "127.0.0.1:1";
  watch.watch_dir = open_dir;
  Status st = RunAgent(watch);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(open_dir), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0777"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);

  OnlineFlags sock;
  sock.server = "127.0.0.1:1";
  sock.socket = open_dir + "/agent.sock";
  sock.trace_dir = tmp.path() + "/traces";
  st = RunAgent(sock);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(open_dir), std::string::npos) << st.message();
  EXPECT_FALSE(std::filesystem::exists(sock.socket));
  struct stat sb {};
  ASSERT_EQ(stat(open_dir.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 07777, 0777u);  // not chmod-ed
}

}  // namespace
}  // namespace perftracker::cli
