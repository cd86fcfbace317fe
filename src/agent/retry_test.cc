#include "agent/retry.h"

#include <gtest/gtest.h>

#include <vector>

namespace perftracker::agent {
namespace {

struct FakeStatus {
  int code = 0;  // 0 ok, 1 transient, 2 final
  bool ok() const { return code == 0; }
};

struct Calls {
  int calls = 0;
  std::vector<std::chrono::milliseconds> waits;
};

FakeStatus Drive(const std::vector<int>& codes, Calls* run, bool keep_waiting = true,
                 RetryPolicy policy = {}) {
  return CallWithRetry(
      policy,
      [&] {
        const int c = codes[std::min<size_t>(static_cast<size_t>(run->calls), codes.size() - 1)];
        ++run->calls;
        return FakeStatus{c};
      },
      [](const FakeStatus& s) { return s.code == 1; },
      [&](std::chrono::milliseconds d) {
        run->waits.push_back(d);
        return keep_waiting;
      });
}

TEST(RetryTest, TransientFailuresAreRetriedUntilSuccess) {
  Calls run;
  EXPECT_TRUE(Drive({1, 1, 0}, &run).ok());
  EXPECT_EQ(run.calls, 3);
  ASSERT_EQ(run.waits.size(), 2u);
  // Jittered around 500 ms, then around 1 s.
  EXPECT_GE(run.waits[0].count(), 250);
  EXPECT_LE(run.waits[0].count(), 750);
  EXPECT_GE(run.waits[1].count(), 500);
  EXPECT_LE(run.waits[1].count(), 1500);
}

TEST(RetryTest, AFinalFailureIsNotRetried) {
  Calls run;
  EXPECT_EQ(Drive({2, 0}, &run).code, 2);
  EXPECT_EQ(run.calls, 1);
  EXPECT_TRUE(run.waits.empty());
}

TEST(RetryTest, AttemptsAreBoundedAndWaitsCapped) {
  Calls run;
  RetryPolicy policy;
  policy.attempts = 7;
  policy.max_wait = std::chrono::milliseconds(2000);
  EXPECT_EQ(Drive({1}, &run, true, policy).code, 1);
  EXPECT_EQ(run.calls, 7);
  ASSERT_EQ(run.waits.size(), 6u);
  for (auto w : run.waits) EXPECT_LE(w.count(), 3000);  // 2 s cap plus half of it as jitter
  EXPECT_GE(run.waits.back().count(), 1000);
}

TEST(RetryTest, StoppingEndsTheWait) {
  Calls run;
  EXPECT_EQ(Drive({1, 0}, &run, /*keep_waiting=*/false).code, 1);
  EXPECT_EQ(run.calls, 1);
  EXPECT_EQ(run.waits.size(), 1u);
}

}  // namespace
}  // namespace perftracker::agent
