#include "cli/online_commands.h"

#include <gtest/gtest.h>

#include "cli/testing.h"

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

}  // namespace
}  // namespace perftracker::cli
