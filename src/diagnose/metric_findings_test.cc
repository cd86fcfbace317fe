#include "diagnose/metric_findings.h"

#include <gtest/gtest.h>

#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

// Rank r listens/binds on 10.0.0.1:(1000 + 10 r + k) towards peer k.
std::string End(int r, int k) { return "10.0.0.1:" + std::to_string(1000 + 10 * r + k); }

void Conn(RankMetrics* m, int from, int to, double bytes) {
  (*m)[from]["tcp.sendq." + End(from, to) + ">" + End(to, from)] = bytes;
  // The peer owns the other end (with nothing queued on its side).
  (*m)[to].try_emplace("tcp.sendq." + End(to, from) + ">" + End(from, to), 0.0);
}

pattern::CompactJob Ranks(int n) {
  pattern::CompactJob job;
  for (int r = 0; r < n; ++r) {
    pattern::RankSummary s;
    s.rank = r;
    s.host = "node-" + std::to_string(r);
    s.iteration_ms = {100, 100};
    pattern::FunctionPattern f;
    f.name = "gloo:all_reduce";
    f.fclass = pattern::FunctionClass::kCollective;
    f.top_level = true;
    f.per_iter_us = 60000;
    s.functions.push_back(f);
    job.Add(std::move(s));
  }
  return job;
}

TEST(SlowLink, TheRankAtTheEndOfEveryBackedUpConnection) {
  RankMetrics m;
  // A ring 0->1->2->3->0: rank 2's sends back up (its link), and so do rank 1's sends to it
  // (acknowledgements queue behind rank 2's traffic); 3->0 and 0->1 drain.
  Conn(&m, 2, 3, 90000);
  Conn(&m, 1, 2, 50000);
  Conn(&m, 3, 0, 800);
  Conn(&m, 0, 1, 500);
  auto f = DiagnoseSlowLink(m, Ranks(4).ranks());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks, std::vector<int>({2}));
  EXPECT_EQ(f->category, Category::kCommunication);
  EXPECT_EQ(f->cause, Cause::kHardware);
  EXPECT_EQ(f->hosts, std::vector<std::string>({"node-2"}));
  EXPECT_DOUBLE_EQ(f->impact_ms, 60);
  EXPECT_EQ(f->evidence.at("backed_up_peers"), 2);
  ASSERT_FALSE(f->functions.empty());
  EXPECT_EQ(f->functions[0].name, "gloo:all_reduce");
}

TEST(SlowLink, LoopbackQueuesAreNoLink) {
  // Ranks of one host on 127.0.0.1: the same queues mean a slow reader, not a slow link.
  RankMetrics m;
  auto end = [](int r, int k) { return "127.0.0.1:" + std::to_string(1000 + 10 * r + k); };
  auto conn = [&](int from, int to, double bytes) {
    m[from]["tcp.sendq." + end(from, to) + ">" + end(to, from)] = bytes;
    m[to].try_emplace("tcp.sendq." + end(to, from) + ">" + end(from, to), 0.0);
  };
  conn(2, 3, 90000);
  conn(1, 2, 50000);
  conn(3, 0, 800);
  EXPECT_FALSE(DiagnoseSlowLink(m, Ranks(4).ranks()).has_value());
}

TEST(SlowLink, BackpressureAroundTheRingStillNamesTheSlowRank) {
  // Measured: 4 gloo ranks, rank 2's egress capped at 100 Mbit/s. Its own sends and its
  // upstream peer's sends to it hold most, and the queues shrink around the ring; rank 3 has as
  // many backed-up peers as rank 2.
  RankMetrics m;
  Conn(&m, 2, 1, 89681);
  Conn(&m, 3, 2, 54591);
  Conn(&m, 0, 3, 18371);
  Conn(&m, 1, 0, 7552);
  auto f = DiagnoseSlowLink(m, Ranks(4).ranks());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks, std::vector<int>({2}));
  EXPECT_EQ(f->evidence.at("backed_up_peers"), 2);
}

TEST(SlowLink, BackpressureSpreadFurtherStillNamesTheSlowRank) {
  // Measured (test_online_run, 100 Mbit/s on rank 2 of 4): every connection of the ring backed
  // up; rank 2's two hold 71% of the bytes.
  RankMetrics m;
  Conn(&m, 2, 1, 66109);
  Conn(&m, 3, 2, 34647);
  Conn(&m, 1, 0, 20974);
  Conn(&m, 0, 3, 20709);
  auto f = DiagnoseSlowLink(m, Ranks(4).ranks());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks, std::vector<int>({2}));
}

TEST(SlowLink, OneBackedUpPairAndTheQueuesLeaningToOneEnd) {
  // Measured (test_online_run at d862ecf, 100 Mbit/s on rank 2 of 4): only 2->1 over the bar;
  // the smaller queues touch rank 2 more (3->2) than rank 1 (1->0).
  RankMetrics m;
  Conn(&m, 2, 1, 80315);
  Conn(&m, 3, 2, 15398);
  Conn(&m, 0, 3, 13808);
  Conn(&m, 1, 0, 10622);
  auto f = DiagnoseSlowLink(m, Ranks(4).ranks());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks, std::vector<int>({2}));
  // Leaning neither way clearly: no rank.
  RankMetrics even;
  Conn(&even, 2, 1, 80315);
  Conn(&even, 3, 2, 12000);
  Conn(&even, 1, 0, 11000);
  EXPECT_FALSE(DiagnoseSlowLink(even, Ranks(4).ranks()).has_value());
}

TEST(SlowLink, EveryLinkOfTheRingBackedUpAlikeIsNoRank) {
  RankMetrics m;
  Conn(&m, 2, 1, 50000);
  Conn(&m, 3, 2, 49000);
  Conn(&m, 1, 0, 48000);
  Conn(&m, 0, 3, 47000);
  EXPECT_FALSE(DiagnoseSlowLink(m, Ranks(4).ranks()).has_value());
}

TEST(SlowLink, OneBackedUpPairIsNoRank) {
  // Which end of a single backed-up connection is slow cannot be told.
  RankMetrics m;
  Conn(&m, 2, 1, 90000);
  Conn(&m, 1, 2, 40000);
  EXPECT_FALSE(DiagnoseSlowLink(m, Ranks(4).ranks()).has_value());
}

TEST(SlowLink, NothingBackedUpNoFinding) {
  RankMetrics m;
  Conn(&m, 0, 1, 1000);
  Conn(&m, 1, 2, 2000);
  EXPECT_FALSE(DiagnoseSlowLink(m, Ranks(3).ranks()).has_value());
  EXPECT_FALSE(DiagnoseSlowLink({}, Ranks(3).ranks()).has_value());
}

TEST(SlowLink, ADescheduledPeersQueuesAreNotASlowLink) {
  // Four ranks on two loopback cores, clean: a peer that loses its CPU for a moment leaves
  // 17-20 KiB queued on two connections of one rank (measured), far from a capped link's.
  RankMetrics m;
  Conn(&m, 2, 3, 20500);
  Conn(&m, 1, 2, 17400);
  Conn(&m, 3, 0, 800);
  EXPECT_FALSE(DiagnoseSlowLink(m, Ranks(4).ranks()).has_value());
}

TEST(SlowLink, TwoSeparateBackedUpPairsAreNotOneLink) {
  RankMetrics m;
  Conn(&m, 0, 1, 90000);
  Conn(&m, 2, 3, 90000);
  EXPECT_FALSE(DiagnoseSlowLink(m, Ranks(4).ranks()).has_value());
}

TEST(SlowLink, ReplacesTheAllRankCommunicationFindingsItExplains) {
  RankMetrics m;
  Conn(&m, 2, 3, 90000);
  Conn(&m, 1, 2, 50000);
  Diagnosis d;
  Finding low;
  low.finding_class = FindingClass::kAll;
  low.category = Category::kLowBandwidth;
  low.impact_ms = 80;
  Finding other;
  other.category = Category::kDataLoader;
  other.impact_ms = 5;
  d.findings = {low, other};
  AddMetricFindings(m, Ranks(4).ranks(), &d);
  ASSERT_EQ(d.findings.size(), 2u);
  EXPECT_EQ(d.findings[0].category, Category::kCommunication);
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>({2}));
  EXPECT_EQ(d.findings[1].category, Category::kDataLoader);
}

}  // namespace
}  // namespace perftracker::diagnose
