#include "server/rank_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace perftracker::server {
namespace {

TEST(RankStateTest, StatisticsOfTheTimesAdded) {
  RankState r;
  EXPECT_EQ(r.Stats().count, 0);
  for (double ms : {30.0, 10.0, 20.0, 40.0}) r.Add(ms);
  const diagnose::IterationStats s = r.Stats();
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean_ms, 25);
  EXPECT_DOUBLE_EQ(s.min_ms, 10);
  EXPECT_DOUBLE_EQ(s.max_ms, 40);
  EXPECT_NEAR(s.p50_ms, 30, 0.3);  // the element of order 0.5 x 4, within 1%
  EXPECT_DOUBLE_EQ(s.p99_ms, 40);  // within 1%, and at most the exact maximum
  EXPECT_DOUBLE_EQ(r.last_ms, 40);
  EXPECT_TRUE(r.series_steps.empty());  // Add alone keeps no series
}

TEST(RankStateTest, SeriesHoldsBucketMeansWithTheOpenBucket) {
  RankState r;
  r.AddStep(0, 10);
  r.AddStep(1, 20);
  r.AddStep(2, 30);
  EXPECT_THAT(r.series_steps, ::testing::ElementsAre(0, 1));
  const report::RunSeries s = r.Series(7);
  EXPECT_EQ(s.rank, 7);
  EXPECT_THAT(s.steps, ::testing::ElementsAre(0, 1, 2));
  EXPECT_THAT(s.ms, ::testing::ElementsAre(10, 20, 30));
  EXPECT_EQ(r.Stats().count, 3);
}

TEST(RankStateTest, AFullSeriesMergesNeighboursAndDoublesTheStride) {
  RankState r;
  for (int64_t step = 0; step <= static_cast<int64_t>(RankState::kMaxSeriesPoints); ++step) {
    r.AddStep(step, static_cast<double>(step % 2 == 0 ? 10 : 30));
  }
  EXPECT_EQ(r.stride, 2);
  ASSERT_EQ(r.series_steps.size(), RankState::kMaxSeriesPoints / 2);
  EXPECT_EQ(r.series_steps[1], 2);
  EXPECT_FLOAT_EQ(r.series_ms[1], 20);
  // Steps now go into buckets of two.
  r.AddStep(RankState::kMaxSeriesPoints + 1, 50);
  const report::RunSeries s = r.Series(0);
  EXPECT_EQ(s.steps.back(), static_cast<int64_t>(RankState::kMaxSeriesPoints));
  EXPECT_FLOAT_EQ(s.ms.back(), (10 + 50) / 2.0f);
}

TEST(RankStateTest, PercentilesFromASketchOfFixedSize) {
  RankState r;
  std::mt19937_64 rng(5);
  std::lognormal_distribution<double> ln(std::log(100.0), 0.2);
  std::vector<double> all;
  for (int i = 0; i < 1000000; ++i) all.push_back(ln(rng));
  for (double ms : all) r.Add(ms);
  const size_t bytes = r.times.bytes();
  for (double ms : all) r.Add(ms);  // twice as many: not a byte more
  EXPECT_EQ(r.times.bytes(), bytes);
  EXPECT_LT(bytes, 4u << 10);  // a reservoir of 2^18 floats was 1 MiB per rank
  std::sort(all.begin(), all.end());
  const diagnose::IterationStats s = r.Stats();
  EXPECT_EQ(s.count, 2000000);
  EXPECT_NEAR(s.p50_ms, all[500000], all[500000] * 0.01);
  EXPECT_NEAR(s.p99_ms, all[990000], all[990000] * 0.01);
}

// ExplainMissing: why a rank did not report for window 5, which starts at iteration 100 and
// opened when the rank stood at iteration 40.

using diagnose::MissingReason;

constexpr MissedWindow kWindow{5, 100, 40};

// A rank whose agent is connected, confirmed the window and relays workers; its worker got the
// command, accepted it, and the rank went on to iteration 60.
struct Silent {
  RankState state;
  AgentSeen agent;
  Silent() {
    state.last_step = 60;
    state.worker = WorkerSeen{1234, 5, 5, true, false, false, false, 60};
    agent.identified = true;
    agent.connected = true;
    agent.host = "node-b";
    agent.window_received = 5;
    agent.relays_workers = true;
  }
  diagnose::MissingRank Explain(MissedWindow w = kWindow) const {
    return ExplainMissing(3, &state, agent, w);
  }
};

TEST(ExplainMissingTest, DeadWhenItsProcessEnded) {
  Silent s;
  s.state.worker->exited = true;
  s.state.worker->process_gone = true;
  s.state.worker->last_iteration = 57;
  s.state.last_step = 57;
  s.agent.connected = false;  // dead comes first, whatever else
  diagnose::MissingRank m = s.Explain();
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.reason, MissingReason::kRankDead);
  EXPECT_EQ(m.detail,
            "process exited at iteration 57, killed or crashed without an exit message, pid 1234");
  EXPECT_EQ(m.last_iteration, 57);
  s.state.worker->process_gone = false;
  s.state.worker->exit_message = true;
  // A normal exit before the window's first iteration: the job ended first, no problem.
  m = s.Explain();
  EXPECT_EQ(m.reason, MissingReason::kEndedBeforeWindow);
  EXPECT_EQ(m.detail, "a normal exit at iteration 57, the window starts at 100");
  EXPECT_FALSE(diagnose::IsProblem(m.reason));
  // ...but one inside the window is a rank that left it: dead.
  s.state.worker->last_iteration = 104;
  s.state.last_step = 104;
  m = s.Explain();
  EXPECT_EQ(m.reason, MissingReason::kRankDead);
  EXPECT_EQ(m.detail, "process exited at iteration 104, a normal exit, pid 1234");
}

TEST(ExplainMissingTest, AgentGoneWhenSilentOrForgotten) {
  Silent s;
  s.agent.connected = false;
  s.agent.silent_seconds = 42;
  diagnose::MissingRank m = s.Explain();
  EXPECT_EQ(m.reason, MissingReason::kAgentGone);
  EXPECT_EQ(m.detail, "its agent on node-b silent for 42 s");
  AgentSeen forgotten;
  forgotten.gone = true;
  EXPECT_EQ(ExplainMissing(3, &s.state, forgotten, kWindow).reason, MissingReason::kAgentGone);
}

TEST(ExplainMissingTest, CommandNotDeliveredAlongTheWay) {
  auto detail = [](const Silent& s) {
    diagnose::MissingRank m = s.Explain();
    EXPECT_EQ(m.reason, MissingReason::kCommandNotDelivered) << m.detail;
    return m.detail;
  };
  {
    Silent s;
    s.agent.command_waiting = true;
    s.agent.window_received.reset();  // an agent that does not say
    EXPECT_EQ(detail(s), "the command still waited for its agent's command stream");
  }
  {
    Silent s;
    s.agent.window_received = 4;
    EXPECT_EQ(detail(s), "its agent did not confirm the command");
    s.agent.registered_after_open = true;
    EXPECT_EQ(detail(s),
              "its agent registered after the window opened (restarted?) and never got the "
              "command");
  }
  {
    Silent s;
    s.state.worker.reset();
    EXPECT_EQ(detail(s), "no worker of this rank is connected to its agent");
  }
  {
    Silent s;
    s.state.worker->exited = true;  // its process still runs
    EXPECT_EQ(detail(s), "its worker (pid 1234) disconnected from the agent");
  }
  {
    Silent s;
    s.state.worker->window_sent = 4;
    EXPECT_EQ(detail(s), "its agent did not send it to the worker (pid 1234)");
  }
  {
    Silent s;
    s.state.worker->window_acked = 4;
    EXPECT_EQ(detail(s), "the worker (pid 1234) did not acknowledge it");
  }
  {
    Silent s;
    s.state.worker->window_accepted = false;
    EXPECT_EQ(detail(s), "the worker (pid 1234) refused it: another window was pending or open");
  }
}

TEST(ExplainMissingTest, NoIterationSinceTheCommand) {
  Silent s;
  s.state.last_step = 40;  // where it stood when the window opened
  s.state.worker->last_iteration = 40;
  diagnose::MissingRank m = s.Explain();
  EXPECT_EQ(m.reason, MissingReason::kNoIterationSinceCommand);
  EXPECT_EQ(m.detail, "last iteration 40");
  EXPECT_EQ(m.last_iteration, 40);
  s.state.last_step = 60;  // moving, but short of the window's first iteration
  s.state.worker->last_iteration = 60;
  EXPECT_EQ(s.Explain().detail, "last iteration 60, the window starts at 100");
  s.state.last_step = -1;  // never learned an iteration
  s.state.worker->last_iteration = -1;
  EXPECT_EQ(s.Explain().detail, "no iteration reported at all: it never learned an iteration");
}

TEST(ExplainMissingTest, UnknownOtherwise) {
  Silent s;
  s.state.last_step = 120;  // past the window: it profiled, its summary never came
  diagnose::MissingRank m = s.Explain();
  EXPECT_EQ(m.reason, MissingReason::kUnknown);
  EXPECT_EQ(m.detail, "it reached iteration 120, but its summary never arrived");
  // A folder-watching agent says nothing of workers or iterations: nothing to go by.
  AgentSeen folder;
  folder.identified = true;
  folder.connected = true;
  EXPECT_EQ(ExplainMissing(3, nullptr, folder, kWindow).reason, MissingReason::kUnknown);
}

TEST(ExplainMissingTest, ALateExitOfAnOldPidKeepsTheNewWorker) {
  WorkerSeen live{2000, 5, 5, true, false, false, false, 60};
  WorkerSeen old_exit{1000, 4, 4, true, true, false, true, 30};
  EXPECT_FALSE(live.ReplacedBy(old_exit));
  WorkerSeen own_exit = live;
  own_exit.exited = true;
  EXPECT_TRUE(live.ReplacedBy(own_exit));
  EXPECT_TRUE(old_exit.ReplacedBy(live));
}

}  // namespace
}  // namespace perftracker::server

namespace perftracker::server {
namespace {

TEST(MemoryTimelinesTest, EachCurrentRanksHostAndGpuSamplesBounded) {
  std::map<int, RankState> ranks;
  for (int r = 0; r < 3; ++r) {
    for (int64_t step = 0; step < 200; ++step) {
      ranks[r].memory.Add(step, (1000.0 + (r == 1 ? step : 0)) * 1024 * 1024);
      if (r == 2) ranks[r].gpu_memory.Add(step, 5e9);
    }
  }
  const std::vector<diagnose::RankMemoryUse> t = MemoryTimelines(ranks, {1, 2});  // rank 0 left
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].rank, 1);
  EXPECT_EQ(t[0].device, "host");
  EXPECT_EQ(t[1].device, "host");
  EXPECT_EQ(t[2].device, "gpu");
  for (const auto& m : t) {
    EXPECT_LE(m.iteration_end_bytes.size(), kMaxMemoryTimelinePoints);
    EXPECT_EQ(m.iteration_numbers.size(), m.iteration_end_bytes.size());
    EXPECT_EQ(m.iteration_numbers.back(), m.iteration_numbers.size() > 1 ? 199 : 0);
  }
  // Rank 1 grows a MiB an iteration: its timeline ends 199 MiB above where it began.
  EXPECT_DOUBLE_EQ(t[0].end_bytes - t[0].start_bytes, 199.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(t[0].peak_allocated_bytes, t[0].end_bytes);
}

TEST(MemoryTimelinesTest, AtScaleTheGrowingAndTheLargestRanks) {
  std::map<int, RankState> ranks;
  std::set<int> current;
  for (int r = 0; r < 1000; ++r) {
    current.insert(r);
    ranks[r].memory.Add(0, 1e9 + r);
  }
  const std::vector<diagnose::RankMemoryUse> t = MemoryTimelines(ranks, current);
  ASSERT_EQ(t.size(), kMaxMemoryTimelineRanks);
  EXPECT_EQ(t.front().rank, 1000 - static_cast<int>(kMaxMemoryTimelineRanks));  // the largest
  EXPECT_EQ(t.back().rank, 999);
}

}  // namespace
}  // namespace perftracker::server

namespace perftracker::server {
namespace {

// A leak is named at the first sample the rule can name it at (a new high is checked at once),
// not up to kMemoryCheckEvery samples later; a flat rank is never named.
TEST(MemoryWatchTest, ALeakIsNamedAsSoonAsTheRuleCan) {
  constexpr double kMiB = 1024.0 * 1024.0;
  MemoryWatch watch;
  diagnose::MemorySeries mirror;
  int64_t reported_at = -1, first_possible = -1;
  for (int64_t step = 0; step < 1200; step += 30) {  // one sample every 30 iterations
    const double bytes = (1000 + (step >= 600 ? static_cast<double>(step - 600) : 0.0)) * kMiB;
    mirror.Add(step, bytes);
    if (first_possible < 0 && diagnose::FindMemoryGrowth(mirror)) first_possible = step;
    if (watch.Add(step, bytes) && reported_at < 0) reported_at = step;
  }
  ASSERT_GE(first_possible, 600);
  EXPECT_EQ(reported_at, first_possible);
  EXPECT_LE(reported_at - 600, 120);
  MemoryWatch flat;
  for (int64_t step = 0; step < 3000; step += 30)
    EXPECT_FALSE(flat.Add(step, (1000 + (step / 30) % 3) * kMiB).has_value()) << step;
}

TEST(RankStateTest, TheGpuSeriesIsPyTorchsOnceTheCollectorSendsIt) {
  constexpr double kMiB = 1024.0 * 1024.0;
  RankState st;
  MemoryReport nvml;
  nvml.rss = 300 * kMiB;
  nvml.gpu_used = 4000 * kMiB;
  nvml.gpu_index = 2;
  nvml.gpu_free = 70000 * kMiB;
  nvml.gpu_total = 81920 * kMiB;
  st.AddMemory(10, nvml);  // before the job's code initialized CUDA: NVML's figure
  ASSERT_EQ(st.gpu_memory.series.samples().size(), 1u);
  EXPECT_EQ(st.gpu_memory.series.samples().back().bytes, 4000 * kMiB);
  EXPECT_FALSE(st.gpu_series_torch);
  MemoryReport torch = nvml;
  torch.cuda_allocated = 900 * kMiB;
  torch.cuda_reserved = 1500 * kMiB;
  torch.cuda_peak_allocated = 1000 * kMiB;
  st.AddMemory(20, torch);
  EXPECT_TRUE(st.gpu_series_torch);
  EXPECT_EQ(st.gpu_memory.series.samples().back().bytes, 900 * kMiB);
  EXPECT_EQ(st.cuda_reserved_bytes, 1500 * kMiB);
  EXPECT_EQ(st.cuda_peak_allocated_bytes, 1000 * kMiB);
  EXPECT_EQ(st.gpu, 2);
  EXPECT_EQ(st.gpu_total_bytes, 81920 * kMiB);
  // A report without the collector's figures adds nothing to the series: NVML's usage holds the
  // context and the cache, a climb the tensors did not make.
  const size_t n = st.gpu_memory.series.samples().size();
  st.AddMemory(30, nvml);
  EXPECT_EQ(st.gpu_memory.series.samples().size(), n);
  EXPECT_EQ(st.gpu_memory.series.samples().back().bytes, 900 * kMiB);
  // No iteration in the report: nothing.
  EXPECT_TRUE(st.AddMemory(-1, torch).empty());
  EXPECT_EQ(st.gpu_memory.series.samples().size(), n);
}

TEST(RankStateTest, TheJobsProgressOverItsRanks) {
  std::map<int, RankState> ranks;
  ranks[0].AddStep(0, 10);
  ranks[0].AddStep(1, 30);
  ranks[0].last_step = 1;
  ranks[0].attempt_iterations = 2;
  ranks[2].AddStep(4, 20);  // a rank of a later attempt, further along
  ranks[2].last_step = 4;
  ranks[2].attempt = 1;
  ranks[2].attempt_iterations = 1;
  ranks[3];  // heard of, never reported an iteration
  EXPECT_EQ(FurthestStep(ranks), 4);
  EXPECT_EQ(FurthestStep({}), -1);
  EXPECT_EQ(RanksOfAttempt(ranks, 0), (std::set<int>{0, 3}));
  EXPECT_EQ(RanksOfAttempt(ranks, 1), (std::set<int>{2}));
  const std::vector<report::RunSeries> series = RunSeriesOf(ranks);
  ASSERT_EQ(series.size(), 2u);  // rank 3 reported nothing
  EXPECT_EQ(series[0].rank, 0);
  EXPECT_EQ(series[1].rank, 2);
  const JobProgress p = ProgressOf(ranks, {0, 2});
  EXPECT_EQ(p.furthest_step, 4);
  EXPECT_DOUBLE_EQ(p.mean_iteration_ms, 20);  // (10 + 30 + 20) / 3
  EXPECT_EQ(p.fewest_iterations, 1);
  EXPECT_EQ(ProgressOf(ranks, {0, 5}).fewest_iterations, 0);  // rank 5: never heard of
  EXPECT_EQ(ProgressOf(ranks, {}).fewest_iterations, -1);
}

}  // namespace
}  // namespace perftracker::server
