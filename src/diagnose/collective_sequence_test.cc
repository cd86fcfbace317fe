#include "diagnose/collective_sequence.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perftracker::diagnose {
namespace {

using pattern::CollectiveCall;
using pattern::CollectiveLog;

// DDP's gradient all-reduce, called from backward() at train.py:120.
CollectiveCall Ddp(int64_t seq) {
  CollectiveCall c;
  c.group = "0";
  c.group_desc = "default_pg";
  c.seq = seq;
  c.op = "all_reduce";
  c.backend = "gloo";
  c.sizes = {{33040}};
  c.dtypes = {"Float"};
  c.state = "scheduled";
  c.frames = {
      {"/job/train.py", 200, "main"},
      {"/job/train.py", 120, "train_step"},
      {"/venv/lib/python3.11/site-packages/torch/autograd/graph.py", 979, "_engine_run_backward"}};
  return c;
}

// The user's own all_reduce of 7 floats at train.py:145.
CollectiveCall Extra(int64_t seq) {
  CollectiveCall c = Ddp(seq);
  c.sizes = {{7}};
  c.frames = {{"/job/train.py", 200, "main"},
              {"/job/train.py", 145, "train_step"},
              {"/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 3245,
               "all_reduce"}};
  return c;
}

CollectiveCall Barrier(int64_t seq) {
  CollectiveCall c = Ddp(seq);
  c.op = "barrier";
  c.sizes.clear();
  c.dtypes.clear();
  c.frames = {{"/job/train.py", 210, "main"}};
  return c;
}

CollectiveLog Log(int rank, std::vector<CollectiveCall> calls, int64_t last_completed = -1) {
  CollectiveLog log;
  log.rank = rank;
  log.calls = std::move(calls);
  if (last_completed >= 0) log.progress["0"].last_completed = last_completed;
  return log;
}

TEST(CollectiveSequenceTest, AnExtraCollectiveOnOneRankIsAMismatchAtItsNumber) {
  std::vector<CollectiveLog> logs;
  for (int r = 0; r < 4; ++r) logs.push_back(Log(r, {Ddp(7), Ddp(8), r == 1 ? Extra(9) : Ddp(9)}));
  SequenceResult got = DiagnoseCollectiveSequence(logs, {0, 1, 2, 3}, 0);
  ASSERT_EQ(got.findings.size(), 1u);
  const Finding& f = got.findings[0];
  EXPECT_EQ(f.category, Category::kCollectiveMismatch);
  EXPECT_EQ(f.cause, Cause::kSoftware);
  EXPECT_EQ(f.ranks, std::vector<int>{1});
  EXPECT_EQ(f.evidence.at("collective_seq"), 9);
  EXPECT_EQ(f.summary,
            "collectives out of step: rank 1's collective #9 on group 0 (default_pg) is all_reduce "
            "of 7 Float at /job/train.py:145; ranks 0,2,3 are in all_reduce of "
            "33,040 Float in _engine_run_backward at /job/train.py:120");
  EXPECT_EQ(f.functions.front().name, "/job/train.py:145 in train_step");
}

TEST(CollectiveSequenceTest, DifferentSizesAtTheSameNumberAreAMismatch) {
  std::vector<CollectiveLog> logs;
  for (int r = 0; r < 3; ++r) {
    CollectiveCall c = Ddp(4);
    if (r == 2) c.sizes = {{33041}};
    logs.push_back(Log(r, {c}));
  }
  SequenceResult got = DiagnoseCollectiveSequence(logs, {}, 12.5);
  ASSERT_EQ(got.findings.size(), 1u);
  EXPECT_EQ(got.findings[0].ranks, std::vector<int>{2});
  EXPECT_DOUBLE_EQ(got.findings[0].impact_ms, 12500);
}

TEST(CollectiveSequenceTest, ARankThatSkippedABarrierNeverEnteredIt) {
  // Ranks 0, 1, 3 wait in barrier #10 (not completed); rank 2's last collective is #9.
  std::vector<CollectiveLog> logs;
  for (int r = 0; r < 4; ++r)
    logs.push_back(r == 2 ? Log(r, {Ddp(8), Ddp(9)}, 9) : Log(r, {Ddp(8), Ddp(9), Barrier(10)}, 9));
  SequenceResult got = DiagnoseCollectiveSequence(logs, {0, 1, 2, 3}, 30);
  ASSERT_EQ(got.findings.size(), 1u);
  const Finding& f = got.findings[0];
  EXPECT_EQ(f.category, Category::kHang);
  EXPECT_EQ(f.ranks, std::vector<int>{2});
  EXPECT_EQ(f.evidence.at("collective_seq"), 10);
  EXPECT_EQ(f.evidence_text.at("waiting_ranks"), "0,1,3");
  EXPECT_NE(f.summary.find("rank 2 never entered collective #10 on group 0 (default_pg), barrier"),
            std::string::npos)
      << f.summary;
  EXPECT_NE(f.summary.find("its last: #9, all_reduce of 33,040 Float"), std::string::npos)
      << f.summary;
}

TEST(CollectiveSequenceTest, RanksInStepOrADumpTakenInPassingSayNothing) {
  std::vector<CollectiveLog> logs;
  for (int r = 0; r < 4; ++r) logs.push_back(Log(r, {Ddp(8), Ddp(9), Barrier(10)}, 10));
  EXPECT_TRUE(DiagnoseCollectiveSequence(logs, {}, 0).findings.empty());
  // Rank 3 is one behind, but the others completed #10: nobody waits for it.
  logs[3] = Log(3, {Ddp(8), Ddp(9)}, 9);
  EXPECT_TRUE(DiagnoseCollectiveSequence(logs, {}, 0).findings.empty());
}

TEST(CollectiveSequenceTest, GroupsAreComparedApartAndMissingRingsAreANote) {
  // Group 1 (tp) is in step; group 0 has rank 1 out of step. Rank 3 sent no ring.
  std::vector<CollectiveLog> logs;
  for (int r = 0; r < 3; ++r) {
    CollectiveCall tp = Ddp(5);
    tp.group = "1";
    tp.group_desc = "tp";
    logs.push_back(Log(r, {tp, r == 1 ? Extra(9) : Ddp(9)}));
  }
  SequenceResult got = DiagnoseCollectiveSequence(logs, {0, 1, 2, 3}, 0);
  ASSERT_EQ(got.findings.size(), 1u);
  EXPECT_EQ(got.findings[0].evidence_text.at("group"), "group 0 (default_pg)");
  ASSERT_EQ(got.notes.size(), 1u);
  EXPECT_EQ(got.notes[0], "no ring of collectives from rank 3");
}

TEST(CollectiveSequenceTest, ARecordWithoutSizesAgreesOnTheOpAlone) {
  // Rank 1's number 9 comes from the worker's ring, which did not record the input's sizes.
  std::vector<CollectiveLog> logs;
  for (int r = 0; r < 3; ++r) {
    CollectiveCall c = Ddp(9);
    if (r == 1) {
      c.sizes.clear();
      c.dtypes.clear();
    }
    logs.push_back(Log(r, {c}));
  }
  EXPECT_TRUE(DiagnoseCollectiveSequence(logs, {}, 0).findings.empty());
  logs[1].calls[0].op = "broadcast";
  ASSERT_EQ(DiagnoseCollectiveSequence(logs, {}, 0).findings.size(), 1u);
}

TEST(CollectiveSequenceTest, DescribesWhatACollectiveMoves) {
  CollectiveCall c = Ddp(1);
  c.sizes = {{2, 3}, {4}};
  EXPECT_EQ(DescribeCollective(c), "all_reduce of 10 Float");
  EXPECT_EQ(DescribeCollective(Barrier(1)), "barrier");
  // Sizes from a hostile dump whose product overflows (issue 40): saturated, no wrapped count.
  c.sizes = {{int64_t{1} << 40, int64_t{1} << 40}, {3}};
  EXPECT_EQ(DescribeCollective(c), "all_reduce of more than 9,223,372,036,854,775,807 Float");
}

}  // namespace
}  // namespace perftracker::diagnose
