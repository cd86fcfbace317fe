#include "diagnose/causes.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

// A timing-only straggler on rank 2 of four, 10 ms per iteration lost, 50 ms iterations.
Finding Straggler() {
  Finding f;
  f.finding_class = FindingClass::kSubset;
  f.category = Category::kStraggler;
  f.cause = Cause::kUnknown;
  f.confidence = policy::kConfidenceTimingOnly;
  f.ranks = {2};
  f.hosts = {"vm"};
  f.impact_ms = 10;
  return f;
}

// Recorded on this project's 2-core VM: four DDP ranks (gloo) and their helpers, 10 s windows
// of 50 ms iterations (200 iterations).
RankMetrics BusyHost() {
  RankMetrics m;
  for (int r = 0; r < 4; ++r) {
    m[r]["window.seconds"] = 10;
    m[r]["host.procs_running"] = 5.5;
    m[r]["host.cores"] = 2;
    m[r]["proc.run_s"] = 4.0 + 0.2 * r;
    m[r]["proc.runq_wait_s"] = 2.4 + 0.1 * r;
    m[r]["cgroup.nr_periods"] = 0;
    m[r]["cgroup.nr_throttled"] = 0;
    m[r]["cgroup.throttled_s"] = 0;
  }
  return m;
}

TEST(CpuThrottledRule, NamesTheQuotaWithItsFigures) {
  RankMetrics m = BusyHost();
  m[2]["cgroup.nr_periods"] = 100;
  m[2]["cgroup.nr_throttled"] = 75;
  m[2]["cgroup.throttled_s"] = 7.5;
  m[2]["cgroup.quota_cpus"] = 0.25;
  Finding f = Straggler();
  CpuThrottledRule rule;
  ASSERT_TRUE(rule.Explain({m, 50}, &f));
  EXPECT_EQ(f.category, Category::kCpuThrottled);
  EXPECT_EQ(f.cause, Cause::kHardware);
  EXPECT_DOUBLE_EQ(f.evidence.at("throttled_periods_share"), 0.75);
  EXPECT_DOUBLE_EQ(f.evidence.at("quota_cpus"), 0.25);
  EXPECT_NE(f.summary.find("quota of 0.25 CPUs"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("75% of its scheduling periods, 7.5 s throttled in a 10.0 s window"),
            std::string::npos)
      << f.summary;
}

TEST(CpuThrottledRule, LeavesAQuotaEveryRankSharesAndAFewThrottledPeriods) {
  RankMetrics m = BusyHost();
  for (auto& [r, v] : m) {  // every rank throttled alike: no rank's own cause
    v["cgroup.nr_periods"] = 100;
    v["cgroup.nr_throttled"] = r == 2 ? 80 : 60;
  }
  Finding f = Straggler();
  EXPECT_FALSE(CpuThrottledRule().Explain({m, 50}, &f));
  m = BusyHost();
  m[2]["cgroup.nr_periods"] = 100;
  m[2]["cgroup.nr_throttled"] = 10;  // a burst now and then
  EXPECT_FALSE(CpuThrottledRule().Explain({m, 50}, &f));
  m[2]["cgroup.nr_periods"] = 5;  // too few periods to tell
  m[2]["cgroup.nr_throttled"] = 5;
  EXPECT_FALSE(CpuThrottledRule().Explain({m, 50}, &f));
  EXPECT_EQ(f.category, Category::kStraggler);
}

TEST(CpuThrottledRule, AFarTighterQuotaIsTheRanksOwnWherePeersAreThrottledToo) {
  // Recorded: a 4-rank job in a 0.7-CPU cgroup (a container's CPU limit) throttled in 64% of
  // its periods; rank 2 moved into a cgroup of 0.05 CPUs, throttled in all of them.
  RankMetrics m = BusyHost();
  for (auto& [r, v] : m) {
    v["cgroup.nr_periods"] = 45;
    v["cgroup.nr_throttled"] = r == 2 ? 45 : 29;
    v["cgroup.quota_cpus"] = r == 2 ? 0.05 : 0.7;
  }
  Finding f = Straggler();
  ASSERT_TRUE(CpuThrottledRule().Explain({m, 50}, &f));
  EXPECT_NE(f.summary.find("quota of 0.05 CPUs"), std::string::npos) << f.summary;
  // One quota shared (the same figure on every rank): the job's limit, not rank 2's.
  for (auto& [r, v] : m) v["cgroup.quota_cpus"] = 0.7;
  Finding g = Straggler();
  EXPECT_FALSE(CpuThrottledRule().Explain({m, 50}, &g));
  EXPECT_TRUE(TighterQuota(m, 2, 0.35));
  EXPECT_FALSE(TighterQuota(m, 2, 0.36));
  EXPECT_FALSE(TighterQuota(m, 2, -1));                // no quota of its own
  for (auto& [r, v] : m) v["cgroup.quota_cpus"] = -1;  // peers without a quota
  EXPECT_TRUE(TighterQuota(m, 2, 4));
}

TEST(RunQueueContentionRule, NamesARankTheSchedulerHoldsBack) {
  RankMetrics m = BusyHost();
  // A competing process on rank 2's core: 4 s waiting for 4 s on the CPU, peers ~0.6 s per s.
  m[2]["proc.run_s"] = 4.0;
  m[2]["proc.runq_wait_s"] = 4.0;
  Finding f = Straggler();
  ASSERT_TRUE(RunQueueContentionRule().Explain({m, 50}, &f));
  EXPECT_EQ(f.category, Category::kCpuContention);
  EXPECT_NEAR(f.evidence.at("runq_wait_per_cpu_s"), 1.0, 1e-9);
  // Peers (ranks 0, 1, 3): 2.4/4.0, 2.5/4.2, 2.7/4.6 -> median 0.595.
  EXPECT_NEAR(f.evidence.at("peers_runq_wait_per_cpu_s"), 2.5 / 4.2, 1e-9);
  // (4.0 - 0.595 * 4.0) s over 200 iterations.
  EXPECT_NEAR(f.evidence.at("extra_runq_wait_ms_per_iteration"), (4.0 - 2.5 / 4.2 * 4) * 5, 1e-9);
  EXPECT_NE(f.summary.find("denied the CPU on host vm"), std::string::npos) << f.summary;
  // The finding named one function (10 ms); the wait held back all the rank does: 8.1 ms more.
  EXPECT_NEAR(f.impact_ms, 10, 1e-9);
  // A function that rose since the baseline, on a rank whose own work takes 9 ms longer than
  // its peers': the wait held back all it does, and its peers wait for it up to that excess.
  Finding small = Straggler();
  small.impact_ms = 2.2;
  small.evidence["own_work_ms"] = 61;
  small.evidence["peers_own_work_ms"] = 52;
  ASSERT_TRUE(RunQueueContentionRule().Explain({m, 50}, &small));
  EXPECT_NEAR(small.impact_ms, (4.0 - 2.5 / 4.2 * 4) * 5, 1e-9);  // 8.1 ms, under the 9
  EXPECT_NEAR(small.impact_fraction, small.impact_ms / 50, 1e-9);
  // In step with its peers (1 ms more own work), or with no own work measured: its threads'
  // extra wait is not the job's loss (seen: rank 0's store server thread, 4 ranks on 2 cores,
  // "the job loses 11.7 ms/iter" ranked above a real straggler of 5.7 ms). The function's
  // measured excess stays the cost.
  Finding in_step = Straggler();
  in_step.impact_ms = 2.2;
  in_step.evidence["own_work_ms"] = 53;
  in_step.evidence["peers_own_work_ms"] = 52;
  ASSERT_TRUE(RunQueueContentionRule().Explain({m, 50}, &in_step));
  EXPECT_NEAR(in_step.impact_ms, 2.2, 1e-9);
  Finding unmeasured = Straggler();
  unmeasured.impact_ms = 2.2;
  ASSERT_TRUE(RunQueueContentionRule().Explain({m, 50}, &unmeasured));
  EXPECT_NEAR(unmeasured.impact_ms, 2.2, 1e-9);
}

TEST(RunQueueContentionRule, ABusyHostAloneIsNoCause) {
  // The busy host of every rank, rank 2 with more work (longer sequences): it runs more and
  // waits at its peers' rate. Before this rule such a rank was called CPU contention.
  RankMetrics m = BusyHost();
  m[2]["proc.run_s"] = 6.0;
  m[2]["proc.runq_wait_s"] = 3.6;
  Finding f = Straggler();
  EXPECT_FALSE(RunQueueContentionRule().Explain({m, 50}, &f));
  EXPECT_EQ(ExplainRankFinding({m, 50}, &f), nullptr);
  EXPECT_EQ(f.category, Category::kStraggler);
  EXPECT_NE(f.evidence_text.at("host").find("the host is not why it is slower"), std::string::npos);
  // Waiting markedly more, but far too little to explain 10 ms per iteration: not the cause.
  m[2]["proc.run_s"] = 4.0;
  m[2]["proc.runq_wait_s"] = 2.4 * 1.6 * 4.0 / 4.0;
  m[2]["window.seconds"] = 10;
  Finding g = Straggler();
  g.impact_ms = 40;
  EXPECT_FALSE(RunQueueContentionRule().Explain({m, 50}, &g));
}

TEST(ExplainRankFinding, ThrottlingComesFirstAndOnlyRankFindingsAreExplained) {
  RankMetrics m = BusyHost();
  m[2]["cgroup.nr_periods"] = 100;
  m[2]["cgroup.nr_throttled"] = 75;
  m[2]["proc.runq_wait_s"] = 8.0;  // it waits too; the quota is the direct evidence
  Finding f = Straggler();
  const CauseRule* rule = ExplainRankFinding({m, 50}, &f);
  ASSERT_NE(rule, nullptr);
  EXPECT_STREQ(rule->name(), "cpu_throttled");
  Finding comm = Straggler();
  comm.category = Category::kCommunication;
  EXPECT_EQ(ExplainRankFinding({m, 50}, &comm), nullptr);
  Finding all = Straggler();
  all.finding_class = FindingClass::kAll;
  EXPECT_EQ(ExplainRankFinding({m, 50}, &all), nullptr);
  Finding two = Straggler();
  two.ranks = {1, 2};
  EXPECT_EQ(ExplainRankFinding({m, 50}, &two), nullptr);
}

// Recorded: a real 4-rank job, rank 2 in a cgroup of 0.1 CPUs (tests/test_os_causes.py), its
// slowdown window of 3 s at ~50 ms iterations. The peer comparison named nobody.
TEST(FindThrottledRanks, NamesAThrottledRankNoFindingNamed) {
  RankMetrics m;
  const double runq[4] = {0.516, 0.479, 1.766, 0.5};
  for (int r = 0; r < 4; ++r) {
    m[r]["window.seconds"] = 2.976;
    m[r]["proc.run_s"] = 0.26;
    m[r]["proc.runq_wait_s"] = runq[r];
    m[r]["cgroup.nr_periods"] = r == 2 ? 29 : 0;
    m[r]["cgroup.nr_throttled"] = r == 2 ? 20 : 0;
    m[r]["cgroup.throttled_s"] = r == 2 ? 0.699 : 0;
    m[r]["cgroup.quota_cpus"] = r == 2 ? 0.1 : -1;
  }
  std::vector<Finding> found = FindThrottledRanks({m, 49.8}, {{2, "vm"}}, {});
  ASSERT_EQ(found.size(), 1u);
  const Finding& f = found[0];
  EXPECT_EQ(f.ranks, std::vector<int>{2});
  EXPECT_EQ(f.hosts, std::vector<std::string>{"vm"});
  EXPECT_EQ(f.category, Category::kCpuThrottled);
  EXPECT_NEAR(f.impact_ms, 0.699 * 49.8 / 2.976, 1e-9);  // 11.7 ms per iteration
  EXPECT_NE(f.summary.find("quota of 0.10 CPUs"), std::string::npos) << f.summary;
  // A rank already named is explained by ExplainRankFinding, not found twice.
  Finding named = Straggler();
  EXPECT_TRUE(FindThrottledRanks({m, 49.8}, {}, {named}).empty());
  // Throttled for less than the size gates: nothing.
  m[2]["cgroup.throttled_s"] = 0.01;
  EXPECT_TRUE(FindThrottledRanks({m, 49.8}, {}, {}).empty());
}

TEST(FindContendedRanks, NamesARankTheSchedulerHoldsBackThatNoFindingNamed) {
  // Recorded (two DDP ranks, hidden 1024, rank 1 sharing its core with a busy process): the peer
  // comparison named nobody (DDP's wait is in the same run_backward as rank 1's compute).
  RankMetrics m;
  m[0] = {{"window.seconds", 3.191}, {"proc.run_s", 1.793}, {"proc.runq_wait_s", 1.122}};
  m[1] = {{"window.seconds", 3.195}, {"proc.run_s", 1.592}, {"proc.runq_wait_s", 2.647}};
  std::vector<Finding> found = FindContendedRanks({m, 41.6}, {{1, "vm"}}, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].ranks, std::vector<int>{1});
  EXPECT_EQ(found[0].category, Category::kCpuContention);
  // (2.647 - 1.122 / 1.793 * 1.592) s in 3.195 s of 41.6 ms iterations: 21.5 ms per iteration.
  EXPECT_NEAR(found[0].impact_ms, (2.647 - 1.122 / 1.793 * 1.592) * 41.6 / 3.195, 1e-9);
  // Healthy ranks of a busy host (within 1.25x of each other): nobody.
  EXPECT_TRUE(FindContendedRanks({BusyHost(), 50}, {}, {}).empty());
  // Named already: explained by ExplainRankFinding instead.
  Finding named = Straggler();
  named.ranks = {1};
  EXPECT_TRUE(FindContendedRanks({m, 41.6}, {}, {named}).empty());
}

// Four ranks of one node, rank R on GPU R (its kernels' device); NVML's sample of each GPU as
// the agent adds it to every rank's metrics (H100-class boost 1980 MHz; GPU 2 power-capped to
// 1410 MHz, NVML reason 0x4).
struct GpuNode {
  RankMetrics metrics;
  pattern::CompactJob job;
  explicit GpuNode(double gpu2_clock, double gpu2_reasons) {
    std::map<std::string, double> node;
    for (int g = 0; g < 4; ++g) {
      node[fmt::format("gpu{}.sm_clock_mhz", g)] = g == 2 ? gpu2_clock : 1980 - 15 * g;
      node[fmt::format("gpu{}.clock_event_reasons", g)] = g == 2 ? gpu2_reasons : 0;
      node[fmt::format("gpu{}.temperature_c", g)] = g == 2 ? 83 : 61;
      node[fmt::format("gpu{}.power_w", g)] = g == 2 ? 350 : 690;
      node[fmt::format("gpu{}.ecc_uncorrected", g)] = 0;
    }
    for (int r = 0; r < 4; ++r) {
      metrics[r] = node;
      pattern::RankSummary s;
      s.rank = r;
      s.world_size = 4;
      s.iteration_ms = {50, 50, 50};
      pattern::FunctionPattern k;
      k.name = "sm90_xmma_gemm";
      k.kind = trace::EventKind::kKernel;
      k.fclass = pattern::FunctionClass::kCompute;
      k.device = r;
      k.per_iter_us = r == 2 ? 40000 : 28000;
      s.functions.push_back(k);
      job.Add(std::move(s));
    }
    job.SortByRank();
  }
  CauseInput In() { return {metrics, 50, job.ranks()}; }
};

TEST(GpuThrottledRule, NamesTheClockAndNvmlsReason) {
  GpuNode node(1410, 0x4);
  Finding f = Straggler();
  ASSERT_TRUE(GpuThrottledRule().Explain(node.In(), &f));
  EXPECT_EQ(f.category, Category::kGpuThrottled);
  EXPECT_EQ(f.cause, Cause::kHardware);
  EXPECT_EQ(f.evidence.at("gpu_index"), 2);
  EXPECT_EQ(f.evidence.at("peers_sm_clock_mhz"), 1965);  // 1980, 1965, 1935
  EXPECT_NE(f.summary.find("rank 2's GPU 2 is throttled (software power cap): its SM clock is "
                           "1410 MHz, its peers' 1965 MHz, 83 C, 350 W"),
            std::string::npos)
      << f.summary;
  // Clocks set low by hand: a configuration, not the hardware.
  GpuNode set(1410, 0x2);
  Finding g = Straggler();
  ASSERT_TRUE(GpuThrottledRule().Explain(set.In(), &g));
  EXPECT_EQ(g.cause, Cause::kConfiguration);
}

TEST(GpuThrottledRule, AFastClockOrNoSlowingReasonIsNoCause) {
  Finding f = Straggler();
  GpuNode boost(1900, 0x4);  // within 85% of its peers
  EXPECT_FALSE(GpuThrottledRule().Explain(boost.In(), &f));
  GpuNode idle(1410, 0x1 | 0x10);  // idle and sync boost slow nothing
  EXPECT_FALSE(GpuThrottledRule().Explain(idle.In(), &f));
  EXPECT_FALSE(GpuThrottledRule().Explain({BusyHost(), 50}, &f));  // no GPU
  EXPECT_EQ(GpuClockReasonNames(0x4 | 0x40),
            (std::vector<std::string>{"software power cap", "hardware thermal slowdown"}));
}

TEST(IoStallRule, NamesTheRankThatWritesWhatItsPeersDoNot) {
  constexpr double kMiB = 1024.0 * 1024.0;
  RankMetrics m = BusyHost();  // 10 s windows of 50 ms iterations: 200 iterations
  for (int r = 0; r < 4; ++r) {
    m[r]["proc.read_bytes"] = 0;
    m[r]["proc.write_bytes"] = r == 2 ? 200 * 8 * kMiB : 200 * 4096;  // a checkpoint vs a log
  }
  Finding f = Straggler();
  f.functions = {{"torch/serialization.py(N): save", "python_function", {}}};
  ASSERT_TRUE(IoStallRule().Explain({m, 50}, &f));
  EXPECT_EQ(f.category, Category::kIoStall);
  EXPECT_DOUBLE_EQ(f.evidence.at("write_bytes_per_iteration"), 8 * kMiB);
  EXPECT_NE(f.summary.find("rank 2 stalls on storage I/O: it writes 8.0 MiB per iteration, its "
                           "peers 0.0 MiB (in torch/serialization.py(N): save)"),
            std::string::npos)
      << f.summary;
  // Every rank writing alike, or a rank writing a little: no cause.
  for (int r = 0; r < 4; ++r) m[r]["proc.write_bytes"] = 200 * 8 * kMiB;
  Finding g = Straggler();
  EXPECT_FALSE(IoStallRule().Explain({m, 50}, &g));
  for (int r = 0; r < 4; ++r) m[r]["proc.write_bytes"] = r == 2 ? 200 * 64 * 1024 : 0;
  EXPECT_FALSE(IoStallRule().Explain({m, 50}, &g));
  // No I/O figures at all (an agent without /proc/PID/io): nothing.
  EXPECT_FALSE(IoStallRule().Explain({BusyHost(), 50}, &g));
}

// Four ranks of one role, each with aten::linear and aten::mm: per-iteration µs and the inputs'
// shapes and elements (the skew fault of examples/train_ddp.py: rank 2's batches hold 8x the
// rows; its aten::mm inputs [512, 256], [256, 256] against its peers' [64, 256], [256, 256]).
std::vector<pattern::CompactRank> ShapedJob(pattern::CompactJob* job, double rank2_mm_us,
                                            int rank2_rows) {
  for (int r = 0; r < 4; ++r) {
    pattern::RankSummary s;
    s.rank = r;
    s.world_size = 4;
    s.iteration_ms = {50, 50, 50};
    const int rows = r == 2 ? rank2_rows : 64;
    for (const char* name : {"aten::linear", "aten::mm"}) {
      pattern::FunctionPattern f;
      f.name = name;
      f.kind = trace::EventKind::kCpuOp;
      f.count = 30;
      f.calls_per_iter = 10;
      f.per_iter_us = r == 2 ? rank2_mm_us : 4000;
      f.input_dims = fmt::format("[{}, 256], [256, 256]", rows);
      f.input_elements = rows * 256.0 + 256 * 256;
      s.functions.push_back(f);
    }
    pattern::FunctionPattern plain;  // a function without shapes
    plain.name = "aten::add_";
    plain.per_iter_us = 100;
    s.functions.push_back(plain);
    job->Add(std::move(s));
  }
  job->SortByRank();
  return job->ranks();
}

TEST(MoreWorkRule, NamesTheLargerInputsAndBothShapes) {
  pattern::CompactJob job;
  const std::vector<pattern::CompactRank> ranks = ShapedJob(&job, 14000, 512);
  ASSERT_EQ(ranks[2].shapes.size(), 2u);
  const RankMetrics none;
  Finding f = Straggler();
  f.functions = {{"<built-in method mm>", "python_function", {}}};
  ASSERT_TRUE(MoreWorkRule().Explain({none, 50, ranks}, &f));
  EXPECT_EQ(f.category, Category::kMoreWork);
  EXPECT_EQ(f.cause, Cause::kSoftware);
  // 2.4x the elements in all, 8x in the activation beside the same weight.
  EXPECT_DOUBLE_EQ(f.evidence.at("input_elements_ratio"), 8.0);
  EXPECT_DOUBLE_EQ(f.evidence.at("larger_input_extra_ms_per_iteration"), 10);
  EXPECT_NE(f.summary.find("inputs are [512, 256], [256, 256] vs [64, 256], [256, 256] on its "
                           "peers (8.0x the data per call), 10.0 ms/iter more"),
            std::string::npos)
      << f.summary;
  // The function with the larger inputs leads; what timing named stays.
  ASSERT_EQ(f.functions.size(), 2u);
  EXPECT_EQ(f.functions[1].name, "<built-in method mm>");
  EXPECT_TRUE(f.functions[0].name == "aten::linear" || f.functions[0].name == "aten::mm");
}

TEST(FindMoreWorkRanks, NamesARankWithLargerInputsThatNoFindingNamed) {
  // Timing alone stayed under the noise gate (a shared host); 8x the data per call is no noise.
  pattern::CompactJob job;
  const std::vector<pattern::CompactRank> ranks = ShapedJob(&job, 14000, 512);
  const RankMetrics none;
  std::vector<Finding> found = FindMoreWorkRanks({none, 50, ranks}, {{2, "vm"}}, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].ranks, std::vector<int>{2});
  EXPECT_EQ(found[0].category, Category::kMoreWork);
  EXPECT_DOUBLE_EQ(found[0].impact_ms, 10);
  EXPECT_EQ(found[0].hosts, std::vector<std::string>{"vm"});
  Finding named = Straggler();
  EXPECT_TRUE(FindMoreWorkRanks({none, 50, ranks}, {}, {named}).empty());
  // The same shapes everywhere: nothing.
  pattern::CompactJob even;
  EXPECT_TRUE(FindMoreWorkRanks({none, 50, ShapedJob(&even, 4000, 64)}, {}, {}).empty());
}

TEST(MoreWorkRule, SameShapesOrTooLittleTimeIsNoCause) {
  const RankMetrics none;
  {
    pattern::CompactJob job;  // slower on the same inputs: not more work
    const std::vector<pattern::CompactRank> ranks = ShapedJob(&job, 14000, 64);
    Finding f = Straggler();
    EXPECT_FALSE(MoreWorkRule().Explain({none, 50, ranks}, &f));
  }
  {
    pattern::CompactJob job;  // a fifth more rows: within the jitter of real batches
    const std::vector<pattern::CompactRank> ranks = ShapedJob(&job, 14000, 76);
    Finding f = Straggler();
    EXPECT_FALSE(MoreWorkRule().Explain({none, 50, ranks}, &f));
  }
  {
    // Its costliest shape is larger, the mean of all its calls' inputs is not: the same calls
    // on the same inputs, its time gone to another shape (a throttled rank's).
    pattern::CompactJob job;
    std::vector<pattern::CompactRank> ranks = ShapedJob(&job, 14000, 512);
    for (size_t i = 0; i < ranks[2].shapes.size(); ++i)
      ranks[2].shapes[i].elements = ranks[0].shapes[i].elements;
    Finding f = Straggler();
    EXPECT_FALSE(MoreWorkRule().Explain({none, 50, ranks}, &f));
  }
  {
    pattern::CompactJob job;  // larger inputs, but 2 ms of the 10 the rank loses
    const std::vector<pattern::CompactRank> ranks = ShapedJob(&job, 6000, 512);
    Finding f = Straggler();
    EXPECT_FALSE(MoreWorkRule().Explain({none, 50, ranks}, &f));
  }
  {
    // Recorded: a rank that fills a 1 MiB buffer every step (a leak) calls aten::fill_ on
    // [262144] once an iteration; its peers' fills are of [1, 256], 0.1 times an iteration.
    pattern::CompactJob job;
    for (int r = 0; r < 4; ++r) {
      pattern::RankSummary s;
      s.rank = r;
      s.iteration_ms = {50, 50};
      pattern::FunctionPattern fill;
      fill.name = "aten::fill_";
      fill.calls_per_iter = r == 2 ? 1 : 0.1;
      fill.per_iter_us = r == 2 ? 16000 : 5;
      fill.input_dims = r == 2 ? "[262144], []" : "[1, 256], []";
      fill.input_elements = r == 2 ? 262144 : 256;
      s.functions.push_back(fill);
      job.Add(std::move(s));
    }
    job.SortByRank();
    const std::vector<pattern::CompactRank> ranks = job.ranks();
    Finding f = Straggler();
    EXPECT_FALSE(MoreWorkRule().Explain({none, 50, ranks}, &f));
  }
  Finding f = Straggler();  // no patterns at all
  EXPECT_FALSE(MoreWorkRule().Explain({none, 50}, &f));
}

// Four ranks' aten::mm: rank 2's calls, time, costliest shape and mean input apart.
std::vector<pattern::CompactRank> MmJob(pattern::CompactJob* job, double rank2_calls,
                                        double rank2_elements) {
  for (int r = 0; r < 4; ++r) {
    pattern::RankSummary s;
    s.rank = r;
    s.world_size = 4;
    s.iteration_ms = {100, 100};
    pattern::FunctionPattern mm;
    mm.name = "aten::mm";
    mm.kind = trace::EventKind::kCpuOp;
    mm.calls_per_iter = r == 2 ? rank2_calls : 7;
    mm.per_iter_us = r == 2 ? 66000 : 44000;
    mm.input_dims = r == 2 ? "[256, 256], [256, 256]" : "[64, 256], [256, 256]";
    mm.input_elements = r == 2 ? rank2_elements : 40338;
    s.functions.push_back(mm);
    job->Add(std::move(s));
  }
  job->SortByRank();
  return job->ranks();
}

TEST(MoreWorkRule, ExtraCallsOfAnOpAreNoMoreWork) {
  // Recorded on torch 1.13 (CI's test_online_run straggler, --fault-work 7): rank 2 adds 7
  // torch.mm of [256, 256] x [256, 256] a step to the model's 7 backward aten::mm (mean input
  // 40,338 elements): 14 calls of mean 85,705 = (7 x 40,338 + 7 x 131,072) / 14. Its costliest
  // shape is 4x larger and its mean input 2.1x, but the calls are extra, not the same calls on
  // more data (the peers made half as many: the old bound let that through): the Python rule
  // names them.
  pattern::CompactJob job;
  const std::vector<pattern::CompactRank> ranks = MmJob(&job, 14, 85705);
  const RankMetrics none;
  Finding f = Straggler();
  EXPECT_FALSE(MoreWorkRule().Explain({none, 50, ranks}, &f)) << f.summary;
  EXPECT_TRUE(FindMoreWorkRanks({none, 50, ranks}, {}, {}).empty());
  // The same seven calls on the larger inputs: more work.
  pattern::CompactJob even_calls;
  const std::vector<pattern::CompactRank> same = MmJob(&even_calls, 7, 131072);
  Finding g = Straggler();
  EXPECT_TRUE(MoreWorkRule().Explain({none, 50, same}, &g));
}

TEST(ExplainRankFinding, MoreWorkBeforeTheRunQueueAndExplainedOnce) {
  pattern::CompactJob job;
  const std::vector<pattern::CompactRank> ranks = ShapedJob(&job, 14000, 512);
  // It also waits more in the run queue (more work, more time runnable on a busy host).
  RankMetrics m = BusyHost();
  m[2]["proc.runq_wait_s"] = 8.0;
  Finding f = Straggler();
  const CauseRule* rule = ExplainRankFinding({m, 50, ranks}, &f);
  ASSERT_NE(rule, nullptr);
  EXPECT_STREQ(rule->name(), "more_work");
  // A window's second pass (its metrics after the offline diagnosis) keeps that explanation.
  const std::string summary = f.summary;
  EXPECT_EQ(ExplainRankFinding({m, 50, ranks}, &f), nullptr);
  EXPECT_EQ(f.category, Category::kMoreWork);
  EXPECT_EQ(f.summary, summary);
}

// Recorded (examples/train_ddp.py --loader-workers 2 --fault slow-loader --fault-rank 1
// --fault-ms 200, 4 ranks on the 2-core VM, window 2): rank 1's two workers sleep 200 ms in
// the collate function per batch; its training thread waits 59.3 ms/iter in the DataLoader's
// next(), its peers' 2.9 ms.
// The training thread's wait in a multi-process DataLoader's next(), WAIT_US per iteration.
pattern::FunctionPattern LoaderNext(double wait_us) {
  pattern::FunctionPattern next;
  next.name = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__";
  next.kind = trace::EventKind::kUserAnnotation;
  next.fclass = pattern::FunctionClass::kDataLoader;
  next.main_thread = true;
  next.count = 3;
  next.calls_per_iter = 1;
  next.per_iter_us = wait_us;
  return next;
}

struct SlowLoaderJob {
  RankMetrics metrics;
  pattern::CompactJob job;
  SlowLoaderJob(double rank1_collate_s, double rank1_wait_us) {
    const double collate_s[4] = {0.0351, rank1_collate_s, 0.0276, 0.0291};
    const double dataset_s[4] = {0.0128, 0.0090, 0.0127, 0.0186};
    const double wait_us[4] = {2913, rank1_wait_us, 2750, 3050};
    for (int r = 0; r < 4; ++r) {
      auto& m = metrics[r];
      m["window.seconds"] = 5.0;
      m["loader.workers"] = 2;
      m["loader.batches"] = r == 1 ? 49 : 48;
      m["loader.collate_s"] = collate_s[r];
      m["loader.dataset_s"] = dataset_s[r];
      m["loader.collate_fn=SleepyCollate.__call__ (train_ddp.py:111)"] = 1;
      m["loader.dataset_fn=TensorDataset.__getitem__ (dataset.py:205)"] = 1;
      pattern::RankSummary s;
      s.rank = r;
      s.world_size = 4;
      s.iteration_ms = {101, 101, 101};
      s.functions.push_back(LoaderNext(wait_us[r]));
      job.Add(std::move(s));
    }
    job.SortByRank();
  }
  CauseInput In() { return {metrics, 101, job.ranks()}; }
};

TEST(LoaderWorkersRule, NamesTheWorkersFunctionAndTheWait) {
  SlowLoaderJob j(9.8636, 59300);
  Finding f = Straggler();
  f.ranks = {1};
  f.category = Category::kDataLoader;
  f.impact_ms = 56.4;
  ASSERT_TRUE(LoaderWorkersRule().Explain(j.In(), &f));
  EXPECT_EQ(f.category, Category::kDataLoader);
  EXPECT_EQ(f.cause, Cause::kSoftware);
  EXPECT_NEAR(f.evidence.at("loader_ms_per_batch"), (9.8636 + 0.009) * 1000 / 49, 1e-6);
  EXPECT_NE(f.summary.find("rank 1's data loader is slow: its 2 DataLoader worker processes take "
                           "201.5 ms per batch in the collate function SleepyCollate.__call__ "
                           "(train_ddp.py:111) vs 0.9 ms on its peers"),
            std::string::npos)
      << f.summary;
  ASSERT_FALSE(f.functions.empty());
  EXPECT_EQ(f.functions[0].name, "SleepyCollate.__call__ (train_ddp.py:111)");
}

// Measured (4 ranks x 2 DataLoader workers on 2 cores, clean): every rank's training thread
// waits 7.5 ms/iter for data while the workers spend 0.7 ms per batch on it (0.9 here).
TEST(ExplainLoaderHandOff, WorkersFastAtTheirWorkMeanTheBatchWaitsForACpu) {
  SlowLoaderJob j(0.0300, 7500);
  for (auto& [r, m] : j.metrics) {
    m["host.procs_running"] = 11.3;
    m["host.cores"] = 2;
  }
  // The job's ranks all wait alike (the job builder gives rank 1 its own wait).
  pattern::CompactJob job;
  for (const pattern::CompactRank& r : j.job.ranks()) {
    pattern::RankSummary s;
    s.rank = r.rank;
    s.world_size = 4;
    s.iteration_ms = {62, 62, 62};
    s.functions.push_back(LoaderNext(7500));
    job.Add(std::move(s));
  }
  job.SortByRank();
  const CauseInput in{j.metrics, 62, job.ranks()};
  Finding f;
  f.finding_class = FindingClass::kAll;
  f.category = Category::kDataLoader;
  f.cause = Cause::kSoftware;
  f.ranks = {0, 1, 2, 3};
  f.impact_ms = 7.5;
  f.summary = "data loading is slow on all 4 ranks: enumerate(DataLoader)#... takes 7.5 ms/iter";
  ASSERT_TRUE(ExplainLoaderHandOff(in, &f));
  EXPECT_EQ(f.category, Category::kDataLoader);
  EXPECT_EQ(f.cause, Cause::kConfiguration);
  EXPECT_NEAR(f.evidence.at("loader_ms_per_batch"), 0.9, 0.05);
  EXPECT_EQ(f.evidence.at("data_wait_ms_per_iteration"), 7.5);
  EXPECT_NE(f.summary.find("though the DataLoader worker processes work only 0.9 ms per batch: "
                           "the batches wait for CPU time (11.3 runnable threads on 2 cores)"),
            std::string::npos)
      << f.summary;
  // On a host with CPUs to spare the batch waits in the hand-off.
  for (auto& [r, m] : j.metrics) m["host.procs_running"] = 1.3;
  Finding h = f;
  h.summary = "data loading is slow";
  h.confidence = 0;
  ASSERT_TRUE(ExplainLoaderHandOff({j.metrics, 62, job.ranks()}, &h));
  EXPECT_NE(h.summary.find("the batches wait in the hand-off between processes (the host has CPUs "
                           "to spare: 1.3 runnable threads on 2 cores)"),
            std::string::npos)
      << h.summary;
  // Workers that take most of the wait at their own work: the dataset is the cause, untouched.
  RankMetrics slow = j.metrics;
  for (auto& [r, m] : slow) m["loader.collate_s"] = 0.25;  // 5.2 ms per batch
  Finding g = f;
  g.cause = Cause::kSoftware;
  g.evidence.clear();
  EXPECT_FALSE(ExplainLoaderHandOff({slow, 62, job.ranks()}, &g));
  EXPECT_EQ(g.cause, Cause::kSoftware);
  // No worker processes (the loader runs in the training process): nothing to say.
  EXPECT_FALSE(ExplainLoaderHandOff({RankMetrics(), 62, job.ranks()}, &g));
}

TEST(LoaderWorkersRule, WorkersAsFastAsThePeersOrNoWaitIsNoCause) {
  Finding f = Straggler();
  f.ranks = {1};
  f.impact_ms = 56.4;
  SlowLoaderJob fast(0.03, 59300);  // the workers keep pace: the wait is elsewhere
  EXPECT_FALSE(LoaderWorkersRule().Explain(fast.In(), &f));
  SlowLoaderJob ahead(9.8636, 3000);  // slow workers, but far enough ahead: no wait
  EXPECT_FALSE(LoaderWorkersRule().Explain(ahead.In(), &f));
  RankMetrics none = BusyHost();  // no worker files (num_workers=0): nothing to say
  EXPECT_FALSE(LoaderWorkersRule().Explain({none, 50}, &f));
}

TEST(FindSlowLoaderWorkers, NamesARankThePeerComparisonMissed) {
  // The training thread's wait alternates between ~0 and ~110 ms (two workers hand over a
  // batch each per round): too noisy for the timing gate, plain in the workers' own count.
  SlowLoaderJob j(9.8636, 59300);
  std::vector<Finding> found = FindSlowLoaderWorkers(j.In(), {{1, "vm"}}, {});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].ranks, std::vector<int>{1});
  EXPECT_EQ(found[0].category, Category::kDataLoader);
  EXPECT_NEAR(found[0].impact_ms, (59300 - 2913) / 1000.0, 1e-9);
  Finding named = Straggler();
  named.ranks = {1};
  EXPECT_TRUE(FindSlowLoaderWorkers(j.In(), {}, {named}).empty());
  // An all-rank finding that lists it (the batches' hand-off on ranks 0,1,3) is not its own.
  Finding shared = Straggler();
  shared.finding_class = FindingClass::kAll;
  shared.category = Category::kDataLoader;
  shared.ranks = {0, 1, 3};
  EXPECT_EQ(FindSlowLoaderWorkers(j.In(), {}, {shared}).size(), 1u);
}

// A 2-stage x 2 pipeline: ranks 0 and 2 are stage 0, 1 and 3 stage 1. Stage 0's FUNCTIONS run
// on 512 rows and take 14 ms an iteration, stage 1's on 64 rows, 4 ms (its layers are
// narrower; its gloo:all_reduce moves its own parameters); the others alike on every rank.
std::vector<pattern::CompactRank> PipelineJob(pattern::CompactJob* job,
                                              std::set<std::string> differ = {"aten::mm",
                                                                              "gloo:all_reduce"}) {
  for (int r = 0; r < 4; ++r) {
    pattern::RankSummary s;
    s.rank = r;
    s.world_size = 4;
    s.iteration_ms = {50, 50, 50};
    for (const char* name : {"aten::mm", "gloo:all_reduce"}) {
      const bool stage0 = r % 2 == 0 && differ.count(name) > 0;
      const int rows = stage0 ? 512 : 64;
      pattern::FunctionPattern f;
      f.name = name;
      f.kind = trace::EventKind::kCpuOp;
      f.count = 30;
      f.calls_per_iter = 10;
      f.per_iter_us = stage0 ? 14000 : 4000;
      f.input_dims = fmt::format("[{}, 256], [256, 256]", rows);
      f.input_elements = rows * 256.0 + 256 * 256;
      s.functions.push_back(f);
    }
    job->Add(std::move(s));
  }
  job->SortByRank();
  return job->ranks();
}

TEST(RoleTruePeers, AStageIsNeverComparedWithAnotherStage) {
  pattern::CompactJob job;
  const std::vector<pattern::CompactRank> ranks = PipelineJob(&job);
  const RankMetrics none;
  const std::vector<int> groups = {0, 1, 0, 1};
  const CauseInput in{none, 50, ranks, groups};
  EXPECT_TRUE(in.SamePeers(0, 2));
  EXPECT_FALSE(in.SamePeers(0, 1));
  // With its role's peers, stage 0's rank 2 does no more work than rank 0.
  EXPECT_TRUE(FindMoreWorkRanks(in, {}, {}).empty());
  Finding f = Straggler();
  EXPECT_FALSE(MoreWorkRule().Explain(in, &f));
  // Compared with every rank, as before peers were role-true, stage 0 looked like more work.
  const CauseInput mixed{none, 50, ranks};
  EXPECT_FALSE(FindMoreWorkRanks(mixed, {}, {}).empty());
}

TEST(AddOwnCpuTime, TheRanksCpuTimeAgainstItsRolesPeers) {
  pattern::CompactJob job;
  const std::vector<pattern::CompactRank> ranks = PipelineJob(&job);
  RankMetrics m;
  // CPU seconds in windows of different lengths: rank 2 ran 0.2 CPU s per s, rank 0 (its
  // stage's peer) 0.12; ranks 1 and 3, the other stage, 0.5 (they would raise the median).
  const double run[] = {0.3, 1.25, 0.4, 1.25}, window[] = {2.5, 2.5, 2.0, 2.5};
  for (int r = 0; r < 4; ++r) {
    m[r]["proc.run_s"] = run[r];
    m[r]["window.seconds"] = window[r];
  }
  const std::vector<int> groups = {0, 1, 0, 1};
  const CauseInput in{m, 50, ranks, groups};
  Finding f = Straggler();
  AddOwnCpuTime(in, &f);
  EXPECT_NEAR(f.evidence.at("own_cpu_time_ms"), 10, 1e-9);
  EXPECT_NEAR(f.evidence.at("peers_own_cpu_time_ms"), 6, 1e-9);
  // No peer with the figure, or a finding of every rank: nothing added.
  m.erase(0);
  Finding alone = Straggler();
  AddOwnCpuTime(in, &alone);
  EXPECT_FALSE(alone.evidence.count("own_cpu_time_ms"));
  Finding all = Straggler();
  all.finding_class = FindingClass::kAll;
  AddOwnCpuTime(CauseInput{BusyHost(), 50}, &all);
  EXPECT_FALSE(all.evidence.count("own_cpu_time_ms"));
}

TEST(RoleTruePeers, ACollectivesLargerInputsAreNoMoreWork) {
  // Only the all-reduce differs (another stage's parameters, its time mostly waiting): compared
  // with every rank, as a job whose roles nothing tells apart is, no rank does more work.
  pattern::CompactJob job;
  const std::vector<pattern::CompactRank> ranks = PipelineJob(&job, {"gloo:all_reduce"});
  ASSERT_EQ(ranks[0].shapes.size(), 2u);
  const RankMetrics none;
  const CauseInput mixed{none, 50, ranks};
  for (const Finding& f : FindMoreWorkRanks(mixed, {}, {})) ADD_FAILURE() << f.summary;
}

}  // namespace
}  // namespace perftracker::diagnose
