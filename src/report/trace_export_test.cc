#include "report/trace_export.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>

namespace perftracker::report {
namespace {

namespace fs = std::filesystem;

class TraceExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pt_export_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  // A Kineto trace of RANK with ProfilerStep#5 at STEP_TS and one op 10 us into it.
  static std::string Kineto(int rank, double step_ts, const std::string& op) {
    return "{\"distributedInfo\": {\"rank\": " + std::to_string(rank) +
           ", \"world_size\": 2}, \"traceEvents\": ["
           "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#5\", \"ts\": " +
           std::to_string(step_ts) +
           ", \"dur\": 100, \"pid\": 7, \"tid\": 7},"
           "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"" +
           op + "\", \"ts\": " + std::to_string(step_ts + 10) +
           ", \"dur\": 20, \"pid\": 7, \"tid\": 7}]}";
  }
  fs::path dir_;
};

TEST_F(TraceExportTest, ARanksFilesShareItsFirstFilesClockAndFindingsMarkTheCulprit) {
  const std::string a = Write("rank-0.json", Kineto(0, 1000, "aten::mm"));
  const std::string b = Write("rank-0.json.torch.json", Kineto(0, 50, "aten::addmm"));
  const std::string c = Write("rank-1.json", Kineto(1, 1003, "aten::mm"));
  diagnose::Diagnosis d;
  diagnose::Finding f;
  f.category = diagnose::Category::kStraggler;
  f.ranks = {1};
  f.summary = "rank 1 \"is\" slow";
  f.what_if_ms = 0.04;  // the replay: the 100 us iterations would be 60 us without it
  d.findings.push_back(f);
  const std::string out = (dir_ / "out.json").string();
  auto st = ExportTrace({a, b, c}, out, {.diagnosis = &d});
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->ranks, 2);
  EXPECT_EQ(st->files, 3);
  EXPECT_EQ(st->events, 6u);
  EXPECT_TRUE(st->notes.empty());
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  ASSERT_EQ(parser.load(out).get(root), simdjson::SUCCESS);
  std::map<int64_t, std::string> procs;
  double addmm_ts = -1;
  int iteration_marks = 0, finding_marks = 0, replay_tracks = 0, replayed = 0;
  for (simdjson::dom::element e : root["traceEvents"].get_array()) {
    std::string_view ph = e["ph"].get_string().value(), name = e["name"].get_string().value();
    const int64_t pid = e["pid"].get_int64().value();
    if (ph == "M" && name == "process_name")
      procs[pid] = std::string(e["args"]["name"].get_string().value());
    if (ph == "X" && name == "aten::addmm") {
      addmm_ts = e["ts"].get_double().value();
      EXPECT_EQ(pid, 0);
      // The second file's threads are tracks of their own.
      EXPECT_NE(e["tid"].get_int64().value(), 7);
    }
    if (ph == "i" && name == "iteration 5") ++iteration_marks;
    if (ph == "M" && name == "thread_name" &&
        e["args"]["name"].get_string().value().find("what if straggler on rank 1 were fixed") == 0)
      ++replay_tracks;
    if (ph == "X" && name == "iteration 5 (replayed)") {
      ++replayed;
      EXPECT_NEAR(e["dur"].get_double().value(), 60, 1e-3);
    }
    if (ph == "i" && name.rfind("finding: straggler", 0) == 0) {
      ++finding_marks;
      EXPECT_EQ(pid, 1);
      EXPECT_EQ(e["args"]["summary"].get_string().value(), "rank 1 \"is\" slow");
    }
  }
  EXPECT_EQ(procs, (std::map<int64_t, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  EXPECT_DOUBLE_EQ(addmm_ts, 1010);  // its step 5 at rank 0's step 5
  EXPECT_EQ(iteration_marks, 2);
  EXPECT_EQ(finding_marks, 1);
  // Each rank's iterations as the replay predicts them, on a track of their own.
  EXPECT_EQ(replay_tracks, 2);
  EXPECT_EQ(replayed, 2);
}

TEST_F(TraceExportTest, ABadInputLeavesNoHalfWrittenOutput) {
  const std::string a = Write("rank-0.json", Kineto(0, 1000, "aten::mm"));
  const std::string bad = Write("rank-1.json", "{\"traceEvents\": [");
  const std::string out = (dir_ / "out.json.gz").string();
  auto st = ExportTrace({a, bad}, out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("rank-1.json"), std::string::npos);
  EXPECT_FALSE(fs::exists(out));
}

// The Python tracer's window file goes through the one reader (pattern/python_window.h): its
// iterations and its calls of 1 ms or more on the tracer's thread; a malformed one is refused
// with the reader's one line, naming the file.
TEST_F(TraceExportTest, APythonWindowFileIsItsIterationsAndLongCalls) {
  const std::string window =
      Write("rank-3.python.json",
            "{\"schema\":\"perftracker.python_window/1\",\"pid\":9,\"tid\":9,\"start_ns\":0,"
            "\"end_ns\":5000000,\"iterations\":[[7,1000000,3000000]],"
            "\"names\":[\"\",\"<other>\",\"train.py(3): step\"],"
            "\"nodes\":[[0,0,0,0,0,0,0,0,0,0,[],[]],[0,1,0,0,0,0,0,0,0,0,[],[]],"
            "[0,2,0,1,1500000,1500000,1500000,1500000,2.25e12,82,[1],[[0,1,1500000,1500000]]]],"
            "\"long_calls\":[[2,1200000,2700000]],\"stats\":{\"calls\":1}}");
  const std::string out = (dir_ / "window.json").string();
  auto st = ExportTrace({window}, out);
  ASSERT_TRUE(st.ok()) << st.status().message();
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"iteration 7\""), std::string::npos) << text;
  EXPECT_NE(text.find("train.py(3): step"), std::string::npos) << text;
  EXPECT_NE(text.find("\"dur\":1500.000"), std::string::npos) << text;

  const std::string bad = Write("rank-4.python.json",
                                "{\"schema\":\"perftracker.python_window/1\",\"start_ns\":0,"
                                "\"end_ns\":1,\"iterations\":[],\"names\":[],\"nodes\":[],"
                                "\"long_calls\":[[5,0,1]]}");
  auto refused = ExportTrace({bad}, (dir_ / "bad.json").string());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rank-4.python.json: bad Python window file: long "
                                            "call 0"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace perftracker::report
