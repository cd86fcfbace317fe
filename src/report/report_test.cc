#include "report/report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "diagnose/diagnose.h"
#include "diagnose/testing.h"

namespace perftracker::report {
namespace {

using diagnose::testing::Fn;
using diagnose::testing::Rank;
using pattern::FunctionClass;

diagnose::Diagnosis StragglerJob() {
  std::vector<pattern::RankSummary> ranks;
  for (int r = 0; r < 4; ++r) {
    bool slow = r == 2;
    ranks.push_back(Rank(r, 4,
                         {Fn("aten::mm", FunctionClass::kCompute, slow ? 30 : 10, slow ? 21 : 7,
                             trace::EventKind::kCpuOp, "train.py(40): step;model.py(7): forward"),
                          Fn("aten::addmm", FunctionClass::kCompute, 8, 4),
                          Fn("gloo:all_reduce", FunctionClass::kCollective, slow ? 1 : 21)},
                         40, r < 2 ? "node-a" : "node-b"));
  }
  ranks[3].whole_window = true;
  return diagnose::Diagnose(ranks);
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("pt_report_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

int Shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

const char* kPython = "/usr/bin/python3";

TEST(ReportTest, JsonHasTheSchemaInOrder) {
  std::string json = RenderJson(StragglerJob());
  const char* keys[] = {"\"schema\": \"perftracker.diagnosis/1\"",
                        "\"job\"",
                        "\"world_size\": 4",
                        "\"ranks\"",
                        "\"iterations\": 20",
                        "\"iteration_ms\"",
                        "\"median\": 40",
                        "\"per_rank\"",
                        "\"0\": 40",
                        "\"notes\"",
                        "\"findings\"",
                        "\"class\": \"subset\"",
                        "\"cause\"",
                        "\"category\": \"straggler\"",
                        "\"ranks\"",
                        "\"hosts\"",
                        "\"functions\"",
                        "\"name\": \"aten::mm\"",
                        "\"kind\": \"cpu_op\"",
                        "\"stack\"",
                        "\"train.py(40): step\"",
                        "\"impact\"",
                        "\"ms_per_iteration\"",
                        "\"fraction_of_iteration\"",
                        "\"evidence\"",
                        "\"summary\"",
                        "\"suggestion\""};
  size_t pos = 0;
  for (const char* k : keys) {
    size_t at = json.find(k, pos);
    ASSERT_NE(at, std::string::npos) << k << " after " << pos << " in\n" << json;
    pos = at;
  }
}

TEST(ReportTest, JsonParsesAndPassesTheAcceptanceChecker) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << "no python3";
  std::string path = TempPath("straggler.json");
  ASSERT_TRUE(WriteJsonFile(StragglerJob(), path).ok());
  std::string check = std::string(PT_SOURCE_DIR) + "/../shared/tools/check_diagnosis.py";
  std::string py =
      std::string(kPython) + " -c \"import json,sys; d=json.load(open(sys.argv[1]));" +
      " assert list(d)==['schema','job','findings'];" +
      " assert list(d['job'])==['world_size','ranks','iterations','iteration_ms',"
      "'slack_ms_per_rank','notes'], list(d['job']);" +
      " assert d['job']['slack_ms_per_rank']=={'0':20,'1':20,'2':0,'3':20};" +
      " f=d['findings'][0];" +
      " assert "
      "list(f)==['class','cause','category','confidence','ranks','hosts','functions','impact',"
      "'evidence','summary','suggestion'], list(f);" +
      " assert list(f['impact'])==['ms_per_iteration','fraction_of_iteration',"
      "'what_if_ms_per_iteration','what_if_iteration_ms'], list(f['impact']);" +
      " assert abs(f['impact']['what_if_ms_per_iteration']-20)<0.01, f['impact'];" +
      " assert f['functions'][0]['stack']==['train.py(40): step','model.py(7): forward'];" +
      " assert isinstance(f['evidence']['reasoning'], str)\" " + path;
  EXPECT_EQ(Shell(py), 0);
  if (std::filesystem::exists(check)) {
    EXPECT_EQ(Shell(std::string(kPython) + " " + check + " " + path +
                    " 'rank=2,category~straggler,function~mm|forward' >/dev/null"),
              0);
    EXPECT_NE(Shell(std::string(kPython) + " " + check + " " + path + " clean >/dev/null"), 0);
  }
  std::remove(path.c_str());
}

TEST(ReportTest, EmptyDiagnosisIsValidJsonAndClean) {
  diagnose::Diagnosis d;
  std::string json = RenderJson(d);
  EXPECT_NE(json.find("\"findings\": []"), std::string::npos) << json;
  EXPECT_NE(json.find("\"per_rank\": {}"), std::string::npos) << json;
  if (!std::filesystem::exists(kPython)) return;
  std::string path = TempPath("empty.json");
  ASSERT_TRUE(WriteJsonFile(d, path).ok());
  std::string check = std::string(PT_SOURCE_DIR) + "/../shared/tools/check_diagnosis.py";
  if (std::filesystem::exists(check)) {
    EXPECT_EQ(Shell(std::string(kPython) + " " + check + " " + path + " clean >/dev/null"), 0);
  }
  std::remove(path.c_str());
}

TEST(ReportTest, WriteToABadPathIsAnError) {
  Status st = WriteJsonFile(StragglerJob(), "/nonexistent-dir/x/diagnosis.json");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir/x/diagnosis.json"), std::string::npos);
}

TEST(ReportTest, TextNamesJobRanksAndFindings) {
  std::string text = RenderText(StragglerJob());
  EXPECT_NE(text.find("job: 4 ranks (world size 4), 20 iterations, median iteration 40.00 ms"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("1. straggler (subset, software cause, confidence 0.9)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ranks: 2   hosts: node-b"), std::string::npos) << text;
  EXPECT_NE(text.find("- aten::mm [cpu_op]"), std::string::npos) << text;
  EXPECT_NE(text.find("at train.py(40): step > model.py(7): forward"), std::string::npos) << text;
  EXPECT_NE(text.find("note: rank 3: no ProfilerStep"), std::string::npos) << text;
  EXPECT_NE(text.find("suggestion: "), std::string::npos) << text;
  // Who the others wait for, and what fixing the finding gives (diagnose/what_if.h).
  EXPECT_NE(text.find("the others wait at the collectives for: rank 2 (20.0 ms)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("what if fixed: saves 20.00 ms/iter (the iteration 40.0 -> 20.0 ms)"),
            std::string::npos)
      << text;
  // Without per-iteration times, no critical path; with them, who was last in each iteration.
  EXPECT_EQ(text.find("the critical path"), std::string::npos) << text;
  diagnose::Diagnosis d = StragglerJob();
  d.job.critical_path = {{0, {{0, 2, 20}}}, {1, {{0, 2, 19}}}, {2, {{0, 0, 1}}}};
  text = RenderText(d);
  EXPECT_NE(text.find("last to arrive at the collectives (the critical path), per iteration: "
                      "rank 2 in 2, rank 0 in 1 of 3 iterations"),
            std::string::npos)
      << text;
}

TEST(ReportTest, TextSummarizesLargeJobs) {
  diagnose::Diagnosis d;
  d.job.world_size = 64;
  for (int r = 0; r < 64; ++r) {
    d.job.ranks.push_back(r);
    d.job.iteration_ms_per_rank[r] = r == 17 ? 90 : 50 + r * 0.01;
  }
  std::string text = RenderText(d);
  EXPECT_NE(text.find("max 90.0 (rank 17)"), std::string::npos) << text;
  EXPECT_NE(text.find("slowest: rank 17 90.0,"), std::string::npos) << text;
  EXPECT_NE(text.find("no findings"), std::string::npos) << text;
  EXPECT_LT(std::count(text.begin(), text.end(), '\n'), 10);
}

}  // namespace
}  // namespace perftracker::report
