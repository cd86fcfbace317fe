#include "diagnose/hang.h"

#include <gtest/gtest.h>

namespace perftracker::diagnose {
namespace {

RankStacks Rank(int rank, std::vector<StackFrame> frames, bool in_collective = false) {
  RankStacks r;
  r.rank = rank;
  r.host = "node-0";
  ThreadStack t;
  t.name = "MainThread";
  t.main = true;
  t.frames = std::move(frames);
  r.threads.push_back(std::move(t));
  if (in_collective) {
    r.last_collective.op = "all_reduce";
    r.last_collective.count = 12;
    r.last_collective.in_progress = true;
  }
  return r;
}

const StackFrame kMain{"/job/train.py", 200, "main"};
const StackFrame kStep{"/job/train.py", 150, "train_step"};
const StackFrame kBackward{"/usr/lib/python3/dist-packages/torch/_tensor.py", 487, "backward"};
const StackFrame kEngine{"/usr/lib/python3/dist-packages/torch/autograd/__init__.py", 197,
                         "backward"};
const StackFrame kHang{"/job/train.py", 120, "hang_forever"};

TEST(Hang, NamesTheRankOutsideCommunication) {
  std::vector<RankStacks> replies = {
      Rank(0, {kMain, kStep, kBackward, kEngine}), Rank(1, {kMain, kStep, kBackward, kEngine}),
      Rank(2, {kMain, kStep, kHang}), Rank(3, {kMain, kStep, kBackward, kEngine})};
  Diagnosis d = DiagnoseHang(replies, {0, 1, 2, 3}, 12.5);
  ASSERT_EQ(d.findings.size(), 1u);
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.category, Category::kHang);
  EXPECT_EQ(f.ranks, std::vector<int>({2}));
  ASSERT_EQ(f.functions.size(), 1u);
  EXPECT_EQ(f.functions[0].name, "/job/train.py:120 in hang_forever");
  EXPECT_EQ(f.functions[0].stack.size(), 3u);
  EXPECT_EQ(f.evidence_text.at("rank_2_at"), "/job/train.py:120");
  EXPECT_EQ(f.evidence_text.at("others_wait_at"), "/job/train.py:150");
  EXPECT_NE(f.summary.find("rank 2 at /job/train.py:120"), std::string::npos) << f.summary;
  EXPECT_EQ(f.hosts, std::vector<std::string>({"node-0"}));
}

TEST(Hang, ExplicitCollectiveInProgressCountsAsWaiting) {
  StackFrame user_allreduce{"/job/train.py", 160, "train_step"};
  std::vector<RankStacks> replies = {Rank(0, {kMain, user_allreduce}, true),
                                     Rank(1, {kMain, kHang}),
                                     Rank(2, {kMain, user_allreduce}, true)};
  Diagnosis d = DiagnoseHang(replies, {0, 1, 2}, 3);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>({1}));
}

TEST(Hang, MajorityVoteWhenNobodyIsInCommunication) {
  StackFrame spin{"/job/train.py", 90, "load"};
  std::vector<RankStacks> replies = {Rank(0, {kMain, kStep}), Rank(1, {kMain, kStep}),
                                     Rank(2, {kMain, spin})};
  Diagnosis d = DiagnoseHang(replies, {0, 1, 2}, 3);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>({2}));
}

TEST(Hang, SilentRanksAreNamed) {
  std::vector<RankStacks> replies = {Rank(0, {kMain, kStep, kBackward}),
                                     Rank(1, {kMain, kStep, kBackward})};
  Diagnosis d = DiagnoseHang(replies, {0, 1, 2}, 3);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>({2}));
  EXPECT_NE(d.findings[0].summary.find("sent no stacks"), std::string::npos);
  EXPECT_EQ(d.job.world_size, 3);
}

TEST(Hang, EveryRankAtTheSamePlaceIsAnAllRankFinding) {
  std::vector<RankStacks> replies = {Rank(0, {kMain, kStep, kBackward}),
                                     Rank(1, {kMain, kStep, kBackward})};
  Diagnosis d = DiagnoseHang(replies, {0, 1}, 3);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].finding_class, FindingClass::kAll);
  EXPECT_EQ(d.findings[0].ranks, std::vector<int>({0, 1}));
}

TEST(Hang, ResumedHangIsAStraggler) {
  std::vector<RankStacks> replies = {
      Rank(0, {kMain, kStep, kBackward, kEngine}), Rank(1, {kMain, kStep, kBackward, kEngine}),
      Rank(2, {kMain, kStep, kHang}), Rank(3, {kMain, kStep, kBackward, kEngine})};
  Diagnosis d = SlowNotHung(DiagnoseHang(replies, {0, 1, 2, 3}, 9.5), 14.0, 41);
  ASSERT_EQ(d.findings.size(), 1u);
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.category, Category::kStraggler);
  EXPECT_EQ(f.ranks, std::vector<int>({2}));
  EXPECT_EQ(f.evidence.at("stalled_seconds"), 14.0);
  EXPECT_EQ(f.evidence.at("resumed_at_iteration"), 41);
  EXPECT_NE(f.summary.find("rank 2 was slow, not hung"), std::string::npos) << f.summary;
  EXPECT_NE(f.summary.find("rank 2 at /job/train.py:120"), std::string::npos) << f.summary;
  EXPECT_EQ(f.summary.find("hang ("), std::string::npos) << f.summary;
  ASSERT_EQ(d.job.notes.size(), 1u);
  EXPECT_NE(d.job.notes[0].find("slow, not hung"), std::string::npos);
}

TEST(Hang, ResumedAllRankHangIsAStall) {
  std::vector<RankStacks> replies = {Rank(0, {kMain, kStep}), Rank(1, {kMain, kStep})};
  Diagnosis d = SlowNotHung(DiagnoseHang(replies, {0, 1}, 7), 8, 10);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].category, Category::kStall);
  EXPECT_EQ(d.findings[0].finding_class, FindingClass::kAll);
  EXPECT_NE(d.findings[0].summary.find("not a hang"), std::string::npos);
}

TEST(Hang, NoRanksNoFinding) { EXPECT_TRUE(DiagnoseHang({}, {}, 1).findings.empty()); }

}  // namespace
}  // namespace perftracker::diagnose
