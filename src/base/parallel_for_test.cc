#include "base/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace perftracker {
namespace {

TEST(ParallelForTest, EveryItemOnceWhateverTheThreadCount) {
  for (size_t threads : {0u, 1u, 2u, 7u, 64u}) {
    std::vector<std::atomic<int>> calls(100);
    ParallelFor(calls.size(), threads, [&](size_t i) { ++calls[i]; });
    for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i], 1) << i << " " << threads;
  }
}

TEST(ParallelForTest, NoItemsNoCall) {
  bool called = false;
  ParallelFor(0, 4, [&](size_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ParallelForTest, OneThreadRunsOnTheCaller) {
  const std::thread::id me = std::this_thread::get_id();
  std::set<std::thread::id> seen;
  ParallelFor(10, 1, [&](size_t) { seen.insert(std::this_thread::get_id()); });
  EXPECT_EQ(seen, std::set<std::thread::id>{me});
}

TEST(ParallelForTest, UsesAtMostTheThreadsAskedFor) {
  std::mutex mu;
  std::set<std::thread::id> seen;
  ParallelFor(200, 3, [&](size_t) {
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_GE(seen.size(), 1u);
  EXPECT_LE(seen.size(), 3u);
}

TEST(ParallelForTest, DefaultThreadsIsAtLeastOne) { EXPECT_GE(DefaultThreads(), 1u); }

}  // namespace
}  // namespace perftracker
