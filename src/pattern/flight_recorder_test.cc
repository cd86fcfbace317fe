#include "pattern/flight_recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "base/limits.h"

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
  // Outputs as recorded (an all_gather of 2 ranks: [1] -> [2, 1]), for export-fr.
  EXPECT_TRUE(first.has_outputs);
  EXPECT_EQ(first.output_sizes, (std::vector<std::vector<int64_t>>{{2, 1}}));
  EXPECT_EQ(first.output_dtypes, std::vector<std::string>{"Long"});
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
  EXPECT_FALSE(log->calls[0].has_outputs);  // the worker's ring records inputs alone
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

// A pickle (protocol 2) written opcode by opcode.
class PickleWriter {
 public:
  PickleWriter() { b_ += "\x80\x02"; }
  PickleWriter& Dict() { return Op('}'); }
  PickleWriter& List() { return Op(']'); }
  PickleWriter& Mark() { return Op('('); }
  PickleWriter& SetItems() { return Op('u'); }
  PickleWriter& SetItem() { return Op('s'); }
  PickleWriter& Appends() { return Op('e'); }
  PickleWriter& Str(const std::string& s) {
    Op('X');
    for (int k = 0; k < 4; ++k) b_ += static_cast<char>((s.size() >> (8 * k)) & 0xff);
    b_ += s;
    return *this;
  }
  PickleWriter& Int(uint8_t v) { return Op('K').Op(static_cast<char>(v)); }
  PickleWriter& Put(uint8_t id) { return Op('q').Op(static_cast<char>(id)); }
  PickleWriter& Get(uint8_t id) { return Op('h').Op(static_cast<char>(id)); }
  std::string Stop() { return b_ + "."; }

 private:
  PickleWriter& Op(char c) {
    b_ += c;
    return *this;
  }
  std::string b_;
};

// A dump of ENTRIES references to one memoized entry whose FRAMES frames are references to one
// memoized frame with a 1,000-character file name: each entry read copies ~FRAMES KB.
std::string Amplified(int entries, int frames) {
  PickleWriter w;
  w.Dict().Str("entries").List().Mark();
  w.Dict().Mark().Str("profiling_name").Str("gloo:all_reduce").Str("collective_seq_id").Int(1);
  w.Str("frames").List().Mark();
  w.Dict().Mark().Str("filename").Str(std::string(1000, 'f')).Str("name").Str("fn");
  w.Str("line").Int(3).SetItems().Put(1);
  for (int i = 1; i < frames; ++i) w.Get(1);
  w.Appends().SetItems().Put(2);
  for (int i = 1; i < entries; ++i) w.Get(2);
  w.Appends().SetItem();
  return w.Stop();
}

TEST(FlightRecorderTest, AMemoizedValueReferredToFromEverywhereIsRefusedWhileRead) {
  // 5 KB that ask for ~1 GB: 1,000 references to an entry holding 1,000 references to a frame.
  const std::string dump = Amplified(1000, 1000);
  ASSERT_LT(dump.size(), 6000u);
  auto log = ParseFlightRecorder(dump, "fr_1", 1);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(log.status().message().find("fr_1: its entries expand to more than"), std::string::npos)
      << log.status().message();
  // A few such references are a dump like any other.
  auto small = ParseFlightRecorder(Amplified(3, 4), "fr_1", 1);
  ASSERT_TRUE(small.ok()) << small.status().message();
  ASSERT_EQ(small->calls.size(), 3u);
  ASSERT_EQ(small->calls[2].frames.size(), 4u);
  EXPECT_EQ(small->calls[2].frames[0].line, 3);
}

TEST(FlightRecorderTest, ABadDumpIsANoteAndTheOthersAreRead) {
  char tmpl[] = "/tmp/pt_fr_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  std::ifstream good(kData + "ddp2_gloo_rank_0", std::ios::binary);
  const std::string good_bytes((std::istreambuf_iterator<char>(good)), {});
  // Rank 0's dump, rank 1's hostile one, rank 2's cut short.
  const std::vector<std::string> files = {write("fr_0", good_bytes),
                                          write("fr_1", Amplified(1000, 1000)),
                                          write("fr_2", good_bytes.substr(0, 100))};
  std::vector<std::string> notes;
  std::vector<CollectiveLog> logs = ReadFlightRecorderDumps(files, &notes);
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0].rank, 0);
  ExpectTheJob(logs[0]);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("left out: " + dir + "/fr_1: its entries expand"), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[1].find("left out: " + dir + "/fr_2"), std::string::npos) << notes[1];
  // The dumps of one analysis together stay within their budget: dumps of ~60 MiB each once
  // read fit alone, and the fifth no longer does.
  std::vector<std::string> big;
  for (int r = 0; r < 5; ++r) big.push_back(write("big_" + std::to_string(r), Amplified(56, 1000)));
  notes.clear();
  logs = ReadFlightRecorderDumps(big, &notes);
  EXPECT_EQ(logs.size(), 4u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("big_4"), std::string::npos) << notes[0];
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace perftracker::pattern
