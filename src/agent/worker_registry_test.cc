#include "agent/worker_registry.h"

#include <gtest/gtest.h>

#include <set>

namespace perftracker::agent {
namespace {

using Clock = WorkerRegistry::Clock;

WorkerStatus Worker(int pid, int rank) {
  WorkerStatus w;
  w.pid = pid;
  w.rank = rank;
  return w;
}

TEST(WorkerRegistryTest, ChangesAreTakenOnceAndOnlyForKnownRanks) {
  WorkerRegistry r(8, 10, [](int) { return false; });
  r.Note(Worker(100, 0));
  r.Note(Worker(101, -1));  // its rank not known yet
  r.Note(Worker(0, 3));     // no pid: not kept
  auto changed = r.TakeChanged();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].pid, 100);
  EXPECT_TRUE(r.TakeChanged().empty());
  r.Note(Worker(101, 1));  // now it is
  changed = r.TakeChanged();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].rank, 1);
  EXPECT_EQ(r.All().size(), 2u);
}

TEST(WorkerRegistryTest, AFullRegistryMakesRoomOnlyByForgettingAnExitedWorker) {
  WorkerRegistry r(2, 10, [](int) { return true; });
  r.Note(Worker(1, 0));
  r.Note(Worker(2, 1));
  r.Note(Worker(3, 2));  // full, none exited: not kept
  EXPECT_EQ(r.All().size(), 2u);
  r.NoteExit(Worker(1, 0), 1e9, Clock::now());
  r.Note(Worker(3, 2));  // takes the exited worker's place
  std::set<int> pids;
  for (const WorkerStatus& w : r.All()) pids.insert(w.pid);
  EXPECT_EQ(pids, (std::set<int>{2, 3}));
}

TEST(WorkerRegistryTest, AnExitedWorkersProcessIsLookedForUntilItIsGoneOrTheTimeIsUp) {
  std::set<int> gone;
  WorkerRegistry r(8, 10, [&](int pid) { return gone.count(pid) > 0; });
  const Clock::time_point t0 = Clock::now();
  const WorkerStatus w = r.NoteExit(Worker(7, 0), 1234.5, t0);
  EXPECT_TRUE(w.exited);
  EXPECT_FALSE(w.process_gone);
  EXPECT_EQ(w.exited_unix_s, 1234.5);
  ASSERT_EQ(r.TakeChanged().size(), 1u);
  r.RecheckExits(t0 + std::chrono::seconds(1));
  EXPECT_TRUE(r.TakeChanged().empty());  // still there
  gone.insert(7);
  r.RecheckExits(t0 + std::chrono::seconds(2));
  auto changed = r.TakeChanged();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_TRUE(changed[0].process_gone);
  // Another that never ends is given up on after the recheck time.
  r.NoteExit(Worker(8, 1), 1234.5, t0);
  r.TakeChanged();
  r.RecheckExits(t0 + std::chrono::seconds(11));
  gone.insert(8);
  r.RecheckExits(t0 + std::chrono::seconds(12));
  EXPECT_TRUE(r.TakeChanged().empty());
  // A worker seen alive again (a reused pid) is no longer rechecked.
  r.NoteExit(Worker(9, 2), 1234.5, t0);
  r.Note(Worker(9, 2));
  r.TakeChanged();
  gone.insert(9);
  r.RecheckExits(t0 + std::chrono::seconds(1));
  EXPECT_TRUE(r.TakeChanged().empty());
}

}  // namespace
}  // namespace perftracker::agent
