#include "pattern/flight_recorder.h"

#include <gtest/gtest.h>

#include <string>

namespace perftracker::pattern {
namespace {

const std::string kData = std::string(PT_SOURCE_DIR) + "/tests/data/flight_recorder/";

// The ten collectives of tests/data/flight_recorder/README.md, in the order both ranks made them.
void ExpectTheJob(const CollectiveLog& log) {
  ASSERT_EQ(log.calls.size(), 10u);
  EXPECT_EQ(log.version, "2.10");
  const CollectiveCall& first = log.calls.front();
  EXPECT_EQ(first.backend, "gloo");
  EXPECT_EQ(first.op, "all_gather");
  EXPECT_EQ(first.seq, 1);
  EXPECT_EQ(first.group, "0");
  EXPECT_EQ(first.group_desc, "default_pg");
  EXPECT_FALSE(first.p2p);
  const CollectiveCall& reduce = log.calls[8];
  EXPECT_EQ(reduce.op, "all_reduce");
  EXPECT_EQ(reduce.seq, 9);
  ASSERT_EQ(reduce.sizes.size(), 1u);
  EXPECT_EQ(reduce.sizes[0], std::vector<int64_t>{7});
  EXPECT_EQ(reduce.dtypes, std::vector<std::string>{"Float"});
  EXPECT_EQ(log.calls.back().op, "barrier");
  EXPECT_EQ(log.calls.back().seq, 10);
  EXPECT_EQ(log.progress.at("0").last_enqueued, 10);
  EXPECT_EQ(log.progress.at("0").last_completed, 10);
  ASSERT_EQ(log.group_ranks.size(), 1u);
  EXPECT_EQ(log.group_ranks.begin()->second, (std::vector<int>{0, 1}));
}

TEST(FlightRecorderTest, ReadsThePickleTorchWrites) {
  int skipped = -1;
  auto log = ReadFlightRecorderFile(kData + "ddp2_gloo_rank_0", &skipped);
  ASSERT_TRUE(log.ok()) << log.status().message();
  EXPECT_EQ(log->rank, 0);
  EXPECT_EQ(skipped, 0);
  ExpectTheJob(*log);
  // The stack, outermost first: torch's all_reduce innermost, called at line 8 of the script.
  const std::vector<StackFrame>& frames = log->calls[8].frames;
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(frames.back().function, "all_reduce");
  EXPECT_EQ(frames[frames.size() - 3].file, "/tmp/fr/fr.py");
  EXPECT_EQ(frames[frames.size() - 3].line, 8);
}

TEST(FlightRecorderTest, ReadsTheJsonTorchWrites) {
  auto log = ReadFlightRecorderFile(kData + "ddp2_gloo_rank_1.json");
  ASSERT_TRUE(log.ok()) << log.status().message();
  EXPECT_EQ(log->rank, 1);
  ExpectTheJob(*log);
}

TEST(FlightRecorderTest, KnowsADumpByItsFirstBytes) {
  EXPECT_TRUE(LooksLikeFlightRecorder("\x80\x02}q\x00"));
  EXPECT_TRUE(LooksLikeFlightRecorder("{\"comm_lib_version\":\"\",\"entries\":[]"));
  EXPECT_TRUE(LooksLikeFlightRecorder(" {\n  \"entries\": []"));
  EXPECT_FALSE(LooksLikeFlightRecorder("{\"schemaVersion\": 1, \"traceEvents\": []"));
  EXPECT_FALSE(LooksLikeFlightRecorder("\x1f\x8b"));
  EXPECT_FALSE(LooksLikeFlightRecorder(""));
}

TEST(FlightRecorderTest, RankFromTheName) {
  EXPECT_EQ(FlightRecorderRank("/tmp/nccl_trace_rank_12"), 12);
  EXPECT_EQ(FlightRecorderRank("dumps/fr_3.json"), 3);
  EXPECT_EQ(FlightRecorderRank("dumps/rank-2.pkl"), 2);
  EXPECT_EQ(FlightRecorderRank("dumps/trace"), -1);
}

TEST(FlightRecorderTest, BadDumpsAreOneLineErrors) {
  for (const std::string& bad :
       {std::string("{\"entries\": 3}"), std::string("[1, 2]"), std::string("\x80\x02K\x01."),
        std::string("{\"entries\": ["), std::string("\x80\x02}q\x00X\x07\x00\x00\x00", 10)}) {
    auto log = ParseFlightRecorder(bad, "fr_0", 0);
    ASSERT_FALSE(log.ok()) << bad;
    EXPECT_EQ(log.status().message().rfind("fr_0", 0), 0u) << log.status().message();
    EXPECT_EQ(log.status().message().find('\n'), std::string::npos);
  }
  // An entry without its name or number is skipped and counted, not fatal.
  int skipped = 0;
  auto log = ParseFlightRecorder(
      R"({"entries": [{"profiling_name": "nccl:all_reduce", "collective_seq_id": 4,
          "process_group": ["1", "tp"], "input_sizes": [[2, 3]], "input_dtypes": ["BFloat16"]},
         {"collective_seq_id": 5}, 7]})",
      "fr_0", 0, &skipped);
  ASSERT_TRUE(log.ok()) << log.status().message();
  EXPECT_EQ(skipped, 2);
  ASSERT_EQ(log->calls.size(), 1u);
  EXPECT_EQ(log->calls[0].group, "1");
  EXPECT_EQ(log->calls[0].sizes[0], (std::vector<int64_t>{2, 3}));
}

TEST(FlightRecorderTest, ARanksTorchDumpAndRingMerge) {
  // torch's dump has #1-#2 (DDP's all-reduces among them); the worker's ring has the user's #2
  // and the #3 the rank crashed in, which torch's dump never got to write.
  auto fr = ParseFlightRecorder(
      R"({"entries": [{"profiling_name": "gloo:all_reduce", "collective_seq_id": 1,
          "process_group": ["0", "default_pg"], "time_created_ns": 10},
         {"profiling_name": "gloo:all_reduce", "collective_seq_id": 2,
          "process_group": ["0", "default_pg"], "time_created_ns": 20}]})",
      "rank_1.fr", 1);
  auto ring = ParseFlightRecorder(
      R"({"version": "perftracker-ring/1", "entries": [
         {"profiling_name": "gloo:all_reduce", "collective_seq_id": 2,
          "process_group": ["0", "default_pg"], "time_created_ns": 21},
         {"profiling_name": "gloo:broadcast", "collective_seq_id": 3,
          "process_group": ["0", "default_pg"], "time_created_ns": 30}]})",
      "rank_1.ring.json", 1);
  ASSERT_TRUE(fr.ok() && ring.ok());
  MergeCollectiveLog(std::move(*ring), &*fr);
  ASSERT_EQ(fr->calls.size(), 3u);
  EXPECT_EQ(fr->calls[1].created_ns, 20);  // torch's own #2 kept
  EXPECT_EQ(fr->calls[2].op, "broadcast");
  EXPECT_EQ(fr->source, "rank_1.fr, rank_1.ring.json");
}

}  // namespace
}  // namespace perftracker::pattern
