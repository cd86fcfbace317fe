#include "report/diagnosis_reader.h"

#include <gtest/gtest.h>

#include <map>

#include "diagnose/diagnose.h"
#include "diagnose/testing.h"
#include "report/report.h"

namespace perftracker::report {
namespace {

using diagnose::testing::Fn;
using diagnose::testing::Rank;
using pattern::FunctionClass;

TEST(DiagnosisReaderTest, WhatRenderJsonWritesReadsBackTheSame) {
  std::vector<pattern::RankSummary> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(Rank(r, 4,
                         {Fn("aten::mm", FunctionClass::kCompute, r == 1 ? 30 : 10, 7,
                             trace::EventKind::kCpuOp, "train.py(40): step;model.py(7): forward"),
                          Fn("gloo:all_reduce", FunctionClass::kCollective, r == 1 ? 1 : 21)},
                         40, r < 2 ? "node-a" : "node-b"));
  diagnose::Diagnosis d = diagnose::Diagnose(ranks);
  ASSERT_FALSE(d.findings.empty());
  d.job.notes.push_back("a note with \"quotes\"");
  d.job.run_iterations[0] = {100, 40, 39, 60, 30, 70};
  diagnose::AttemptInfo a;
  a.attempt = 0;
  a.ranks = {0, 1};
  a.pids = {{0, 100}, {1, 101}};
  a.hosts = {"vm"};
  a.last_iteration = 59;
  a.ends = {{1, 101, false, 59}, {0, 100, true, 58}};
  a.summary = "attempt 0 (restart count 0): ranks 0,1";
  d.job.attempts = {a, a};
  d.job.attempts[1].attempt = 1;
  d.job.attempts[1].restart_count = 1;
  d.job.attempts[1].ends.clear();
  d.findings[0].evidence_text["reasoning"] = "because";
  diagnose::RankMemoryUse m;
  m.rank = 1;
  m.device = "cuda:0";
  m.peak_allocated_bytes = 3e9;
  m.peak_reserved_bytes = 4e9;
  m.iteration_end_bytes = {1e9, 1.5e9};
  m.iteration_peak_bytes = {2e9, 3e9};
  m.iteration_numbers = {10, 11};
  m.iterations = 2;
  m.bytes_per_iteration = 5e8;
  m.failed_allocations = 1;
  d.job.memory = {m};
  m.device = "host";
  m.peak_reserved_bytes = -1;
  d.job.memory.push_back(m);
  d.job.critical_path = {{0, {{0, 1, 20.5}}}, {1, {{0, 1, 18}, {1, 3, 0.25}}}};
  const std::string json = RenderJson(d);
  auto back = ParseDiagnosisJson(json, "d.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(RenderJson(*back), json);
  EXPECT_EQ(back->findings[0].ranks, std::vector<int>{1});
  EXPECT_EQ(back->findings[0].functions[0].stack.size(), 2u);
  // The replay's figures (diagnose/what_if.h) and each rank's slack come back.
  EXPECT_NEAR(back->findings[0].what_if_ms, 20, 0.01);
  EXPECT_NEAR(back->findings[0].what_if_iteration_ms, 20, 0.01);
  EXPECT_EQ(back->job.slack_ms_per_rank,
            (std::map<int, double>{{0, 20}, {1, 0}, {2, 20}, {3, 20}}));
  // Each iteration's critical ranks too (diagnose/what_if.h CriticalPath).
  ASSERT_EQ(back->job.critical_path.size(), 2u);
  ASSERT_EQ(back->job.critical_path[1].ranks.size(), 2u);
  EXPECT_EQ(back->job.critical_path[1].iteration, 1);
  EXPECT_EQ(back->job.critical_path[1].ranks[1].group, 1);
  EXPECT_EQ(back->job.critical_path[1].ranks[1].rank, 3);
  EXPECT_DOUBLE_EQ(back->job.critical_path[1].ranks[1].lead_ms, 0.25);
  ASSERT_EQ(back->job.attempts.size(), 2u);
  EXPECT_EQ(back->job.attempts[0].ends[0].pid, 101);
  EXPECT_FALSE(back->job.attempts[0].ends[0].clean);
  EXPECT_TRUE(back->job.attempts[0].ends[1].clean);
  EXPECT_EQ(back->job.attempts[1].restart_count, 1);
  ASSERT_EQ(back->job.memory.size(), 2u);
  EXPECT_EQ(back->job.memory[0].iteration_numbers, (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(back->job.memory[1].peak_reserved_bytes, -1);
  // The text report's memory table holds the traces' records, not an online run's samples.
  EXPECT_NE(RenderText(*back).find("rank    1 cuda:0   peak"), std::string::npos);
  EXPECT_EQ(RenderText(*back).find("rank    1 host"), std::string::npos);
  // The text report lists them when there was a restart.
  EXPECT_NE(RenderText(*back).find("attempt 0 (restart count 0): ranks 0,1\n"), std::string::npos);
}

TEST(DiagnosisReaderTest, AbsentKeysAreDefaults) {
  auto d = ParseDiagnosisJson(
      R"({"schema": "perftracker.diagnosis/1", "job": {},
          "findings": [{"category": "gc", "ranks": [3]}, 7]})",
      "min.json");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->job.world_size, 0);
  EXPECT_TRUE(d->job.run_iterations.empty());
  ASSERT_EQ(d->findings.size(), 1u);
  EXPECT_EQ(d->findings[0].category, diagnose::Category::kGc);
  EXPECT_EQ(d->findings[0].ranks, std::vector<int>{3});
  EXPECT_EQ(d->findings[0].cause, diagnose::Cause::kUnknown);
  EXPECT_TRUE(d->job.notes.empty());
  d = ParseDiagnosisJson(R"({"schema": "perftracker.diagnosis/1"})", "bare.json");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->findings.empty());
}

// A newer writer's category (or none) is no category of this version: the finding is left out,
// counted and named in a note, and the others are read.
TEST(DiagnosisReaderTest, FindingsOfUnknownCategoriesAreLeftOutAndSaid) {
  auto d = ParseDiagnosisJson(
      R"({"schema": "perftracker.diagnosis/1", "findings": [{"category": "warp_drive"},
          {"category": "hang", "ranks": [1]}, {"ranks": [2]}, {"category": "warp_drive"}]})",
      "new.json");
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->findings.size(), 1u);
  EXPECT_EQ(d->findings[0].category, diagnose::Category::kHang);
  ASSERT_EQ(d->job.notes.size(), 1u);
  EXPECT_EQ(d->job.notes[0],
            "new.json: 3 finding(s) of categories this version does not know were left out ((no "
            "category), warp_drive)");
}

TEST(DiagnosisReaderTest, OtherDocumentsAreOneLineErrors) {
  auto r = ParseDiagnosisJson("{\"schema\": \"perftracker.breakdown/1\"}", "x.json");
  EXPECT_EQ(r.status().message(),
            "x.json: not a perftracker diagnosis (schema \"perftracker.diagnosis/1\" expected)");
  r = ParseDiagnosisJson("{\"schema\": ", "y.json");
  EXPECT_EQ(r.status().message().rfind("y.json: not JSON: ", 0), 0u);
  r = ReadDiagnosisFile("/nonexistent/d.json");
  EXPECT_EQ(r.status().message(), "/nonexistent/d.json: cannot read: No such file or directory");
}

}  // namespace
}  // namespace perftracker::report
