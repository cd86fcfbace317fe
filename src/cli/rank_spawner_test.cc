#include "cli/rank_spawner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "cli/testing.h"

namespace perftracker::cli {
namespace {

using testing::ScopedEnv;

TEST(RankSpawnerTest, RankEnvIsTorchrunsLayout) {
  RunOptions o;
  o.nproc = 4;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "node1";
  const std::map<std::string, std::string> common = {{"PYTHONPATH", "/py"}, {"RANK", "stale"}};
  auto env = RankEnv(common, o, 2, 29500);
  EXPECT_EQ(env["RANK"], "6");
  EXPECT_EQ(env["LOCAL_RANK"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], "node1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["PYTHONPATH"], "/py");
}

TEST(RankSpawnerTest, WorkerEnvPutsThePackageFirst) {
  {
    ScopedEnv pp("PYTHONPATH", "/user/lib");
    ScopedEnv unbuffered("PYTHONUNBUFFERED", nullptr);
    auto env = WorkerEnv("/tmp/x/agent.sock", "/pt/python", true);
    EXPECT_EQ(env["PERFTRACKER_AGENT_SOCKET"], "/tmp/x/agent.sock");
    EXPECT_EQ(env["PYTHONPATH"], "/pt/python:/user/lib");
    EXPECT_EQ(env["PYTHONUNBUFFERED"], "1");
  }
  ScopedEnv no_pp("PYTHONPATH", "");
  ScopedEnv user_choice("PYTHONUNBUFFERED", "0");
  auto env = WorkerEnv("s", "/pt/python", true);
  EXPECT_EQ(env["PYTHONPATH"], "/pt/python");
  EXPECT_EQ(env.count("PYTHONUNBUFFERED"), 0u);  // the user's own setting stays
  EXPECT_EQ(WorkerEnv("s", "/pt/python", false).count("PYTHONUNBUFFERED"), 0u);
}

TEST(RankSpawnerTest, ChildEnvOverridesTheLaunchersAndSorts) {
  ScopedEnv mine("PT_TEST_VAR", "old");
  auto env = ChildEnv({{"PT_TEST_VAR", "new"}, {"AAA_PT_TEST", "1"}});
  EXPECT_NE(std::find(env.begin(), env.end(), "PT_TEST_VAR=new"), env.end());
  EXPECT_EQ(std::find(env.begin(), env.end(), "PT_TEST_VAR=old"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "AAA_PT_TEST=1"), env.end());
  EXPECT_TRUE(std::is_sorted(env.begin(), env.end()));
}

TEST(RankSpawnerTest, ExitCodeOfAWaitStatus) {
  pid_t pid = fork();
  if (pid == 0) _exit(3);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(ExitCode(status), 3);
  pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  kill(pid, SIGKILL);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(ExitCode(status), 128 + SIGKILL);
}

TEST(RankSpawnerTest, JobExitCodeChoice) {
  std::vector<Child> children(3);
  children[1].code = 7;
  children[2].code = 9;
  // No stop: the first child that failed, in rank order.
  EXPECT_EQ(JobExitCode({}, children), 7);
  EXPECT_EQ(JobExitCode({}, std::vector<Child>(2)), 0);
  // The first failure seen wins over rank order.
  EXPECT_EQ(JobExitCode({.first_failure = 9}, children), 9);
  // A signal: the shell's convention, over failures.
  EXPECT_EQ(JobExitCode({.first_failure = 9, .interrupted = SIGINT}, children), 130);
  EXPECT_EQ(JobExitCode({.interrupted = SIGTERM}, children), 143);
  // A hang stop: its failure, else 1, over a signal.
  EXPECT_EQ(JobExitCode({.hang_stop = true, .interrupted = SIGTERM}, children), 1);
  EXPECT_EQ(JobExitCode({.first_failure = 4, .hang_stop = true}, children), 4);
}

TEST(RankSpawnerTest, TheBlamedChildFailedForItsOwnReason) {
  std::vector<Child> children(3);
  for (int r = 0; r < 3; ++r) children[static_cast<size_t>(r)].rank = r;
  children[0].code = 1;
  children[1].code = 1;
  const std::vector<std::vector<std::string>> tails = {
      {"RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection closed by peer [::1]:4242"},
      {"RuntimeError: injected failure"},
      {}};
  auto tail_of = [&](int i) { return tails[static_cast<size_t>(i)]; };
  // Rank 0 reaped first, having lost its connection to rank 1, which raised.
  JobEnd end{.first_failure = 1, .first_failed = 0, .failed_unstopped = {0, 1}};
  EXPECT_EQ(BlamedChild(end, children, tail_of), 1);
  // Rank 1 reaped first: it stays.
  end.first_failed = 1;
  end.failed_unstopped = {1, 0};
  EXPECT_EQ(BlamedChild(end, children, tail_of), 1);
  // Only rank 0 failed before the stop: whatever its error says, it is the one.
  end.first_failed = 0;
  end.failed_unstopped = {0};
  EXPECT_EQ(BlamedChild(end, children, tail_of), 0);
  // None failed.
  EXPECT_EQ(BlamedChild(JobEnd{}, children, tail_of), -1);
}

// The signals SuperviseRanks waits for, blocked as the launcher blocks them (OLD: the mask
// before, which the ranks get back).
void BlockSupervisedSignals(sigset_t* set, sigset_t* old) {
  sigemptyset(set);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGHUP}) sigaddset(set, s);
  pthread_sigmask(SIG_BLOCK, set, old);
}

// Real processes: a failing rank stops the others, which end by the stop signal.
TEST(RankSpawnerTest, SuperviseStopsTheOthersWhenOneFails) {
  sigset_t set, old_mask;
  BlockSupervisedSignals(&set, &old_mask);
  GroupReaper reaper;
  ASSERT_TRUE(reaper.Start());
  std::vector<Child> children(2);
  children[0].rank = 0;
  children[0].pid = Spawn({"sleep", "30"}, ChildEnv({}), old_mask);
  children[1].rank = 1;
  children[1].pid = Spawn({"sh", "-c", "exit 5"}, ChildEnv({}), old_mask);
  // Rank 2 fails on its own within the grace the others get (a peer that lost rank 1).
  children.push_back({});
  children[2].rank = 2;
  children[2].pid = Spawn({"sh", "-c", "sleep 0.5; exit 6"}, ChildEnv({}), old_mask);
  ASSERT_GT(children[0].pid, 0);
  ASSERT_GT(children[1].pid, 0);
  ASSERT_GT(children[2].pid, 0);
  for (const Child& c : children) reaper.Add(c.pid);
  std::atomic<bool> hang_kill{false};
  const auto start = std::chrono::steady_clock::now();
  JobEnd end = SuperviseRanks(children, set, reaper, hang_kill, 10);
  reaper.Done();
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(end.first_failure, 5);
  EXPECT_FALSE(end.hang_stop);
  EXPECT_EQ(end.interrupted, 0);
  EXPECT_TRUE(children[0].done);
  EXPECT_EQ(children[0].code, 128 + SIGTERM);
  EXPECT_EQ(JobExitCode(end, children), 5);
  // The ranks that failed before the stop, in the order they ended; not the one stopped.
  EXPECT_EQ(end.failed_unstopped, (std::vector<int>{1, 2}));
}

TEST(RankSpawnerTest, SuperviseWaitsForTheRanksAloneAndSignalsOnlyTheLiving) {
  // Issue 40: supervision reaped any child (waitpid(-1)), the agents' Slurm step among them,
  // whose end the launcher then never saw.
  sigset_t set, old_mask;
  BlockSupervisedSignals(&set, &old_mask);
  GroupReaper reaper;
  const pid_t other = Spawn({"sh", "-c", "exit 3"}, ChildEnv({}), old_mask);  // not a rank
  std::vector<Child> children(1);
  children[0].pid = Spawn({"sh", "-c", "sleep 0.5"}, ChildEnv({}), old_mask);
  ASSERT_GT(other, 0);
  ASSERT_GT(children[0].pid, 0);
  std::atomic<bool> hang_kill{false};
  JobEnd end = SuperviseRanks(children, set, reaper, hang_kill, 10);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  EXPECT_EQ(end.first_failure, 0);
  EXPECT_TRUE(children[0].done);
  int status = 0;
  ASSERT_EQ(waitpid(other, &status, 0), other) << "the other child was taken";
  EXPECT_EQ(ExitCode(status), 3);
  // A rank already waited for is not signalled again: its number may be another process's now
  // (here a live group standing for such a process).
  Child gone;
  gone.pid = Spawn({"sleep", "30"}, ChildEnv({}), old_mask);
  ASSERT_GT(gone.pid, 0);
  gone.done = true;
  std::vector<Child> done = {gone};
  SignalAll(done, SIGTERM);
  usleep(200'000);
  EXPECT_EQ(waitpid(gone.pid, &status, WNOHANG), 0) << "a reaped rank's group was signalled";
  kill(-gone.pid, SIGKILL);
  waitpid(gone.pid, &status, 0);
}

TEST(RankSpawnerTest, SuperviseStopsEveryRankOnAHangKill) {
  sigset_t set, old_mask;
  BlockSupervisedSignals(&set, &old_mask);
  GroupReaper reaper;
  std::vector<Child> children(1);
  children[0].pid = Spawn({"sleep", "30"}, ChildEnv({}), old_mask);
  ASSERT_GT(children[0].pid, 0);
  std::atomic<bool> hang_kill{true};
  JobEnd end = SuperviseRanks(children, set, reaper, hang_kill, 10);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  EXPECT_TRUE(end.hang_stop);
  EXPECT_EQ(end.first_failure, 0);
  EXPECT_EQ(JobExitCode(end, children), 1);
}

}  // namespace
}  // namespace perftracker::cli
