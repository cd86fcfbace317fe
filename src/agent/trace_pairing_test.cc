// Pairing a worker's Python and torch traces on a fake clock: no sockets, no waiting.
#include "agent/trace_pairing.h"

#include <gtest/gtest.h>

namespace perftracker::agent {
namespace {

using Paired = TracePairing::Paired;

class TracePairingTest : public ::testing::Test {
 protected:
  TracePairing::Time At(double s) const {
    return t0_ + std::chrono::duration_cast<TracePairing::Clock::duration>(
                     std::chrono::duration<double>(s));
  }
  std::vector<Paired> Reap(double s) {
    std::vector<Paired> out;
    pairing_.Reap(At(s), &out);
    return out;
  }
  TracePairing::Time t0_ = TracePairing::Clock::now();
  TracePairing pairing_{{.torch_wait_seconds = 30, .orphan_torch_seconds = 60}};
};

TEST_F(TracePairingTest, PythonThenTorchOfTheSameWindow) {
  pairing_.PythonTrace(100, 0, 3, "/t/rank-0.python.json", true, At(0));
  EXPECT_TRUE(Reap(1).empty());  // its torch trace is expected
  ASSERT_TRUE(pairing_.TorchTrace(100, 0, 3, "/t/other-name.json", std::nullopt, At(2)));
  auto out = Reap(2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].pid, 100);
  EXPECT_EQ(out[0].rank, 0);
  EXPECT_EQ(out[0].paths,
            (std::vector<std::string>{"/t/rank-0.python.json", "/t/other-name.json"}));
  EXPECT_EQ(out[0].missing_part, "");
  EXPECT_EQ(pairing_.pending(), 0u);
}

TEST_F(TracePairingTest, TorchFirstAndNoWindowIdsPairByPath) {
  ASSERT_TRUE(pairing_.TorchTrace(7, -1, std::nullopt, "/t/pid-7.python.json.torch.json",
                                  std::nullopt, At(0)));
  EXPECT_TRUE(Reap(1).empty());
  pairing_.PythonTrace(7, 2, std::nullopt, "/t/pid-7.python.json", true, At(1));
  auto out = Reap(1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].paths.size(), 2u);
  EXPECT_EQ(out[0].paths[0], "/t/pid-7.python.json");
  EXPECT_EQ(out[0].rank, 2);
}

TEST_F(TracePairingTest, ATorchTraceThatNeverComesIsWaitedForThenNamed) {
  pairing_.PythonTrace(1, 0, 5, "/t/a.json", true, At(0));
  EXPECT_TRUE(Reap(29.9).empty());
  auto out = Reap(30);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].paths, std::vector<std::string>{"/t/a.json"});
  EXPECT_EQ(out[0].missing_part, "torch.profiler");
  EXPECT_EQ(out[0].missing_why, "its trace did not arrive within 30 s of the Python tracer's file");
  // It comes after all: dropped, not a second trace of the window.
  EXPECT_FALSE(pairing_.TorchTrace(1, 0, 5, "/t/late.json", std::nullopt, At(40)));
  EXPECT_TRUE(Reap(200).empty());
}

TEST_F(TracePairingTest, NoTorchExpectedOrTorchFailedIsTakenAtOnce) {
  pairing_.PythonTrace(1, 0, 5, "/t/a.json", /*torch_expected=*/false, At(0));
  auto out = Reap(0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].missing_part, "");
  pairing_.PythonTrace(2, 1, 5, "/t/b.json", true, At(0));
  ASSERT_TRUE(pairing_.TorchTrace(2, 1, 5, "", std::string("profiler\x01 crashed"), At(1)));
  out = Reap(1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].paths, std::vector<std::string>{"/t/b.json"});
  EXPECT_EQ(out[0].missing_part, "torch.profiler");
  EXPECT_EQ(out[0].missing_why, "profiler\\x01 crashed");  // escaped for the terminal
}

TEST_F(TracePairingTest, AnOrphanTorchTraceIsTakenAloneAfterItsWait) {
  ASSERT_TRUE(pairing_.TorchTrace(9, 3, 8, "/t/t.json", std::nullopt, At(0)));
  EXPECT_TRUE(Reap(59).empty());
  auto out = Reap(60);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].paths, std::vector<std::string>{"/t/t.json"});
  EXPECT_EQ(out[0].missing_part, "python");
}

TEST_F(TracePairingTest, TwoWorkersAndTwoWindowsDoNotMix) {
  pairing_.PythonTrace(1, 0, 1, "/w1/r0.json", true, At(0));
  pairing_.PythonTrace(2, 1, 1, "/w1/r1.json", true, At(0));
  ASSERT_TRUE(pairing_.TorchTrace(2, 1, 1, "/w1/r1.torch", std::nullopt, At(1)));
  pairing_.PythonTrace(1, 0, 2, "/w2/r0.json", true, At(1));
  ASSERT_TRUE(pairing_.TorchTrace(1, 0, 2, "/w2/r0.torch", std::nullopt, At(1)));
  auto out = Reap(1);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].paths[1], "/w1/r1.torch");
  EXPECT_EQ(out[1].paths[1], "/w2/r0.torch");
  EXPECT_EQ(pairing_.pending(), 1u);  // worker 1's window 1 still waits for its torch trace
}

TEST_F(TracePairingTest, AFloodEvictsTheOldestPending) {
  for (size_t i = 0; i < TracePairing::kMaxPending + 10; ++i)
    pairing_.PythonTrace(static_cast<int>(i), 0, 1, "/p.json", true, At(0));
  EXPECT_EQ(pairing_.pending(), TracePairing::kMaxPending);
}

}  // namespace
}  // namespace perftracker::agent
