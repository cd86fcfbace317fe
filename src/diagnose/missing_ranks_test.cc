#include "diagnose/missing_ranks.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "diagnose/diagnose.h"
#include "diagnose/testing.h"

namespace perftracker::diagnose {
namespace {

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

MissingRanks Window(std::vector<MissingRank> ranks) {
  MissingRanks m;
  m.ranks = std::move(ranks);
  m.window_id = 1;
  m.start_iteration = 40;
  m.deadline_s = 20;
  return m;
}

std::vector<pattern::RankSummary> Ranks(std::initializer_list<int> ranks, int world) {
  std::vector<pattern::RankSummary> out;
  for (int r : ranks)
    out.push_back(Rank(r, world, {Fn("aten::mm", FunctionClass::kCompute, 10, 4)}, 20));
  return out;
}

TEST(MissingRanksTest, TheTableNamesEveryReasonOnceAndRoundTrips) {
  std::set<std::string> names;
  for (const MissingReasonInfo& row : kMissingReasons) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    EXPECT_EQ(&Describe(row.reason), &row);
    EXPECT_EQ(MissingReasonNamed(row.name), row.reason);
    EXPECT_NE(std::string(row.words), "");
    EXPECT_NE(std::string(row.how), "");
    EXPECT_NE(std::string(row.suggestion), "");
  }
  EXPECT_EQ(names.size(), 7u);
  EXPECT_FALSE(MissingReasonNamed("nope").has_value());
}

TEST(MissingRanksTest, NothingMissingIsNoFinding) {
  EXPECT_FALSE(MissingRankFinding(MissingRanks{}, 4, 4).has_value());
}

// One row per reason: each says its words, its evidence and its suggestion.
TEST(MissingRanksTest, EachReasonAlone) {
  struct Case {
    MissingReason reason;
    const char* detail;
    const char* summary;
  };
  const Case cases[] = {
      {MissingReason::kRankDead, "process exited at iteration 57",
       "rank 3 did not report for window 1: dead (process exited at iteration 57). The "
       "diagnosis covers 3 of 4 ranks."},
      {MissingReason::kAgentGone, "its agent on node-b silent for 42 s",
       "rank 3 did not report for window 1: agent gone (its agent on node-b silent for 42 s)."},
      {MissingReason::kCommandNotDelivered, "its agent did not confirm the command",
       "rank 3 did not report for window 1: command not delivered (its agent did not confirm "
       "the command)."},
      {MissingReason::kNoIterationSinceCommand, "last iteration 12",
       "rank 3 did not report for window 1: no iteration since the command (last iteration "
       "12)."},
      {MissingReason::kNoTrace, "", "rank 3 did not report for window 1: no trace or summary."},
      {MissingReason::kUnknown, "", "rank 3 did not report for window 1: reason unknown."},
  };
  for (const Case& c : cases) {
    const MissingReasonInfo& info = Describe(c.reason);
    auto f = MissingRankFinding(Window({{3, c.reason, c.detail, 12}}), 3, 4);
    ASSERT_TRUE(f.has_value()) << info.name;
    EXPECT_EQ(f->category, Category::kMissingRank);
    EXPECT_EQ(f->ranks, std::vector<int>{3});
    EXPECT_TRUE(Has(f->summary, c.summary)) << f->summary;
    EXPECT_EQ(f->suggestion, info.suggestion);
    EXPECT_EQ(f->evidence.at(std::string("missing_") + info.name), 1);
    EXPECT_EQ(f->evidence_text.at(std::string("reason_") + info.name), "3");
    EXPECT_TRUE(Has(f->evidence_text.at("reasoning"), info.how));
    EXPECT_EQ(f->evidence_text.count("rank_3"), c.detail[0] ? 1u : 0u);  // only with a detail
    if (c.detail[0]) {
      EXPECT_EQ(f->evidence_text.at("rank_3"), std::string(info.name) + ": " + c.detail);
    }
    EXPECT_EQ(f->evidence.at("rank_3_last_iteration"), 12);
    EXPECT_EQ(f->evidence.at("missing_ranks"), 1);
    EXPECT_EQ(f->evidence.at("reported_ranks"), 3);
    EXPECT_EQ(f->evidence.at("deadline_s"), 20);
    EXPECT_EQ(f->evidence.at("window"), 1);
    EXPECT_EQ(f->confidence, 1.0);
  }
}

// Two reasons: one finding, the ranks grouped by reason, the most definite first, with a
// suggestion for each.
TEST(MissingRanksTest, RanksAreGroupedByReason) {
  MissingRanks m = Window({{3, MissingReason::kNoIterationSinceCommand, "last iteration 12", 12},
                           {1, MissingReason::kRankDead, "process exited at iteration 57", 57},
                           {5, MissingReason::kNoIterationSinceCommand, "last iteration 12", 12},
                           {6, MissingReason::kNoIterationSinceCommand, "", -1}});
  auto f = MissingRankFinding(m, 4, 8);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks, (std::vector<int>{1, 3, 5, 6}));
  EXPECT_EQ(f->summary,
            "ranks 1,3,5,6 did not report for window 1: rank 1 dead (process exited at iteration "
            "57); ranks 3,5,6 no iteration since the command (3: last iteration 12, 5: last "
            "iteration 12). The diagnosis covers 4 of 8 ranks.");
  EXPECT_EQ(f->evidence.at("missing_rank_dead"), 1);
  EXPECT_EQ(f->evidence.at("missing_no_iteration_since_command"), 3);
  EXPECT_EQ(f->evidence_text.at("reason_no_iteration_since_command"), "3,5,6");
  EXPECT_FALSE(f->evidence.count("rank_6_last_iteration"));
  EXPECT_TRUE(Has(f->suggestion, "Dead (rank 1): "));
  EXPECT_TRUE(Has(f->suggestion, " No iteration since the command (ranks 3,5,6): "));
  EXPECT_LT(f->suggestion.find("Dead"), f->suggestion.find("No iteration"));
  EXPECT_EQ(MissingRankNote(m, 8),
            "ranks 1,3,5,6 of 8 missing from window 1: 1 dead, 3,5,6 no iteration since the "
            "command");
}

// The same detail for every rank of a reason is said once; many details are cut.
TEST(MissingRanksTest, SharedAndManyDetails) {
  MissingRanks shared = Window({{2, MissingReason::kAgentGone, "agent on node-b silent 40 s", -1},
                                {3, MissingReason::kAgentGone, "agent on node-b silent 40 s", -1}});
  EXPECT_TRUE(Has(MissingRankFinding(shared, 2, 4)->summary,
                  "ranks 2,3 did not report for window 1: agent gone (agent on node-b silent "
                  "40 s)."));
  MissingRanks many;
  for (int r = 10; r < 60; ++r)
    many.ranks.push_back({r, MissingReason::kRankDead, "exit " + std::to_string(r), r});
  auto f = MissingRankFinding(many, 10, 60);
  EXPECT_TRUE(Has(f->summary,
                  "ranks 10-59 missing: dead (10: exit 10, 11: exit 11, 12: exit 12, "
                  "...)"))
      << f->summary;
  // Per-rank evidence for the lowest few only; the counts cover every rank.
  EXPECT_TRUE(f->evidence_text.count("rank_25"));
  EXPECT_FALSE(f->evidence_text.count("rank_26"));
  EXPECT_EQ(f->evidence.at("missing_rank_dead"), 50);
}

// Offline: ranks under the world size without a trace, one finding, first.
TEST(MissingRanksTest, OfflineRanksWithoutATraceAreOneFindingFirst) {
  Diagnosis d = Diagnose(Ranks({0, 1, 3}, 5));
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].category, Category::kMissingRank);
  EXPECT_EQ(d.findings[0].ranks, (std::vector<int>{2, 4}));
  EXPECT_EQ(d.findings[0].summary,
            "ranks 2,4 missing: no trace or summary. The diagnosis covers 3 of 5 ranks.");
  int missing_findings = 0;
  for (const Finding& f : d.findings) missing_findings += f.category == Category::kMissingRank;
  EXPECT_EQ(missing_findings, 1);
}

// Online: the caller's ranks and reasons replace the world-size rule, so the ranks the traces'
// world size names but the window did not wait for (a profiled subset) are not missing, and a
// window never gets a second finding for the same ranks.
TEST(MissingRanksTest, TheCallersRanksAreTheOnlyOnes) {
  pattern::CompactJob job;
  for (auto& r : Ranks({0, 2}, 8)) job.Add(r);
  job.SortByRank();
  MissingRanks m = Window({{1, MissingReason::kRankDead, "process exited at iteration 57", 57},
                           {3, MissingReason::kNoIterationSinceCommand, "last iteration 12", 12},
                           {2, MissingReason::kUnknown, "", -1}});  // reported after all
  m.expected = 4;
  Diagnosis d = Diagnose(job, {}, &m);
  int missing_findings = 0;
  for (const Finding& f : d.findings) missing_findings += f.category == Category::kMissingRank;
  EXPECT_EQ(missing_findings, 1);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(d.findings[0].summary,
            "ranks 1,3 did not report for window 1: rank 1 dead (process exited at iteration 57); "
            "rank 3 no iteration since the command (last iteration 12). The diagnosis covers 2 "
            "of 4 ranks.");
  // No silent rank: no finding, even though the world size says 8.
  MissingRanks none;
  d = Diagnose(job, {}, &none);
  for (const Finding& f : d.findings) EXPECT_NE(f.category, Category::kMissingRank);
}

// Nobody reported: the finding still comes, with the expected count as the world size.
TEST(MissingRanksTest, AWindowWithNoReportAtAll) {
  MissingRanks m =
      Window({{0, MissingReason::kAgentGone, "", -1}, {1, MissingReason::kAgentGone, "", -1}});
  m.expected = 2;
  Diagnosis d = Diagnose(pattern::CompactJob(), {}, &m);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.job.world_size, 2);
  EXPECT_EQ(d.findings[0].summary,
            "ranks 0,1 did not report for window 1: agent gone. The diagnosis covers 0 of 2 "
            "ranks.");
}

// A window opened in the job's last iterations: its ranks exited normally before its first
// iteration. No problem: a note says so, and no finding; a rank that died beside them still is one.
TEST(MissingRanksTest, RanksWhoseJobEndedBeforeTheWindowAreANoteNotAFinding) {
  MissingRanks m =
      Window({{0, MissingReason::kEndedBeforeWindow, "a normal exit at iteration 38", 38},
              {1, MissingReason::kEndedBeforeWindow, "a normal exit at iteration 38", 38}});
  m.expected = 2;
  Diagnosis d = Diagnose(pattern::CompactJob(), {}, &m);
  EXPECT_TRUE(d.findings.empty());
  ASSERT_FALSE(d.job.notes.empty());
  EXPECT_TRUE(
      Has(d.job.notes.back(), "ranks 0,1 of 2 missing from window 1: ended before the window"))
      << d.job.notes.back();
  m.ranks.push_back({2, MissingReason::kRankDead, "killed", 30});
  m.expected = 3;
  d = Diagnose(pattern::CompactJob(), {}, &m);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>{2});
}

}  // namespace
}  // namespace perftracker::diagnose
