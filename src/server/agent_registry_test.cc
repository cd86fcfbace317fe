#include "server/agent_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

namespace perftracker::server {
namespace {

using Clock = AgentRegistry::Clock;
using Ownership = AgentRegistry::Ownership;
using ::testing::ElementsAre;
using ::testing::Pair;

v1::Command Profile(int64_t window) {
  v1::Command c;
  c.mutable_profile()->set_window_id(window);
  return c;
}

TEST(AgentRegistryTest, IdsAreNumberedAndCarryTheSecretsStart) {
  AgentRegistry agents;
  EXPECT_EQ(agents.NextId("0123456789abcdef0123456789abcdef"), "agent-1-0123456789abcdef01234567");
  EXPECT_EQ(agents.NextId("xy"), "agent-2-xy");
}

TEST(AgentRegistryTest, AnAgentSpeaksForTheRanksItDeclared) {
  AgentRegistry agents;
  const auto now = Clock::now();
  agents.Add("a", "host-a", {0, 1}, now);
  agents.Add("b", "host-b", {2}, now);
  EXPECT_EQ(agents.Owns("a", 1), Ownership::kOwns);
  EXPECT_EQ(agents.Owns("a", 2), Ownership::kAnotherAgents);
  EXPECT_EQ(agents.Owns("a", 7), Ownership::kAnotherAgents);  // declared ranks only
  EXPECT_EQ(agents.Owns("nobody", 0), Ownership::kUnknownAgent);
  EXPECT_THAT(agents.DeclaredRanks(), ElementsAre(0, 1, 2));
}

TEST(AgentRegistryTest, AnAgentThatDeclaredNoneSpeaksForAnyUndeclaredRank) {
  AgentRegistry agents;
  const auto now = Clock::now();
  agents.Add("declaring", "h1", {0}, now);
  agents.Add("watcher", "h2", {}, now);  // a folder-watching agent
  EXPECT_EQ(agents.Owns("watcher", 5), Ownership::kOwns);
  EXPECT_EQ(agents.Owns("watcher", 0), Ownership::kAnotherAgents);
  EXPECT_THAT(agents.DeclaredRanks(), ElementsAre(0));
}

TEST(AgentRegistryTest, ConnectedMeansAStreamOrARecentCall) {
  AgentRegistry agents;
  const auto t0 = Clock::now();
  agents.Add("a", "h", {0}, t0);
  agents.Add("b", "h", {1}, t0 - std::chrono::seconds(AgentRegistry::kConnectedSeconds + 1));
  EXPECT_EQ(agents.CountConnected(t0), 1u);
  EXPECT_EQ(agents.CountConnected(t0 + std::chrono::seconds(AgentRegistry::kConnectedSeconds)), 0u);
}

TEST(AgentRegistryTest, CommandsWaitForAStreamAndOnlyTheNewestAreKept) {
  AgentRegistry agents;
  agents.Add("a", "h", {0}, Clock::now());
  for (int k = 1; k <= 20; ++k) agents.Send(Profile(k));
  const auto& q = agents.Find("a")->queue;
  ASSERT_EQ(q.size(), AgentRegistry::kMaxQueuedCommands);
  EXPECT_EQ(q.front().profile().window_id(), 5);
  EXPECT_EQ(q.back().profile().window_id(), 20);
}

TEST(AgentRegistryTest, WhatAStreamDidNotSendGoesBackFirst) {
  AgentRegistry agents;
  const auto t0 = Clock::now();
  agents.Add("a", "h", {0}, t0);
  agents.Send(Profile(3));
  std::deque<v1::Command> left = {Profile(1), Profile(2)};
  agents.StreamEnded("a", nullptr, std::move(left), t0 + std::chrono::seconds(5));
  const AgentState* a = agents.Find("a");
  ASSERT_EQ(a->queue.size(), 3u);
  EXPECT_EQ(a->queue[0].profile().window_id(), 1);
  EXPECT_EQ(a->queue[2].profile().window_id(), 3);
  EXPECT_EQ(a->last_seen, t0 + std::chrono::seconds(5));
  // An agent forgotten meanwhile: nothing to give back to.
  agents.StreamEnded("gone", nullptr, {Profile(9)}, t0);
  EXPECT_EQ(agents.size(), 1u);
}

TEST(AgentRegistryTest, SilentAgentsWithoutAStreamAreForgottenWithTheirRanks) {
  AgentRegistry agents;
  const auto t0 = Clock::now();
  agents.Add("old", "h-old", {0, 1}, t0);
  agents.Add("new", "h-new", {2}, t0 + std::chrono::seconds(50));
  auto gone = agents.Expire(t0 + std::chrono::seconds(61), 60);
  EXPECT_THAT(gone, ElementsAre(Pair("old", "h-old")));
  EXPECT_EQ(agents.Find("old"), nullptr);
  EXPECT_THAT(agents.DeclaredRanks(), ElementsAre(2));
  // Its ranks are nobody's now: the next agent that declares none speaks for them.
  agents.Add("watcher", "h", {}, t0);
  EXPECT_EQ(agents.Owns("watcher", 0), Ownership::kOwns);
  EXPECT_TRUE(agents.Expire(t0 + std::chrono::seconds(61), 60).size() == 1);  // the watcher
}

TEST(AgentRegistryTest, WhatIsKnownOfASilentRanksAgent) {
  AgentRegistry agents;
  const auto opened = Clock::now();
  AgentState& a = agents.Add("a", "host-a", {0}, opened - std::chrono::seconds(30));
  a.window_received = 6;
  a.relays_workers = true;
  agents.Send(Profile(7));
  const auto now = opened + std::chrono::seconds(12);
  AgentSeen seen = agents.SeenFor(0, "", /*declared=*/true, 7, opened, now);
  EXPECT_TRUE(seen.identified);
  EXPECT_EQ(seen.host, "host-a");
  EXPECT_DOUBLE_EQ(seen.silent_seconds, 42);
  EXPECT_FALSE(seen.connected);
  EXPECT_FALSE(seen.registered_after_open);
  EXPECT_EQ(seen.window_received, 6);
  EXPECT_TRUE(seen.command_waiting);  // window 7's command still queued
  EXPECT_TRUE(seen.relays_workers);
  EXPECT_FALSE(agents.SeenFor(0, "", true, 8, opened, now).command_waiting);

  // No agent declared rank 3: the one that reported for it, here gone.
  AgentSeen gone = agents.SeenFor(3, "vanished", /*declared=*/false, 7, opened, now);
  EXPECT_FALSE(gone.identified);
  EXPECT_TRUE(gone.gone);
  // Never served by a known agent, in a window of undeclared ranks: not gone, unknown.
  AgentSeen never = agents.SeenFor(3, "", /*declared=*/false, 7, opened, now);
  EXPECT_FALSE(never.identified);
  EXPECT_FALSE(never.gone);
  EXPECT_TRUE(agents.SeenFor(3, "", /*declared=*/true, 7, opened, now).gone);
}

TEST(AgentRegistryTest, ANewJobForgetsEveryAgent) {
  AgentRegistry agents;
  agents.Add(agents.NextId("s"), "h", {0}, Clock::now());
  agents.Clear();
  EXPECT_EQ(agents.size(), 0u);
  EXPECT_TRUE(agents.DeclaredRanks().empty());
  EXPECT_EQ(agents.Owns("agent-1-s", 0), Ownership::kUnknownAgent);
  EXPECT_EQ(agents.NextId("s"), "agent-2-s");  // the numbering goes on: ids stay unique in logs
}

}  // namespace
}  // namespace perftracker::server
