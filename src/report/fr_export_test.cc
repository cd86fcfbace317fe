#include "report/fr_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "trace/pickle.h"

namespace perftracker::report {
namespace {

using pattern::CollectiveCall;
using pattern::CollectiveLog;

CollectiveCall Call(int64_t seq, std::vector<int64_t> dims, std::string group = "0",
                    std::string desc = "default_pg") {
  CollectiveCall c;
  c.group = std::move(group);
  c.group_desc = std::move(desc);
  c.seq = seq;
  c.op = "all_reduce";
  c.backend = "gloo";
  c.sizes = {std::move(dims)};
  c.dtypes = {"Float"};
  c.state = "scheduled";
  c.frames = {{"train.py", 10, "main"}, {"train.py", 20, "step"}};  // outermost first
  return c;
}

// The desync test's shape (test_collectives, torch 2.13, gloo): ranks 0, 2, 3 dumped torch's
// Flight Recorder (seq 1..36 of DDP's all-reduce; pg_config keyed "" as gloo's is); rank 1 died
// and left its ring, one all_reduce of 7 floats at #36.
std::vector<CollectiveLog> Desync() {
  std::vector<CollectiveLog> logs;
  for (int r : {0, 2, 3}) {
    CollectiveLog log;
    log.rank = r;
    log.version = "2.10";
    log.group_ranks[""] = {0, 1, 2, 3};
    for (int64_t s = 1; s <= 36; ++s) {
      CollectiveCall c = Call(s, {199946});
      c.output_sizes = c.sizes;
      c.output_dtypes = c.dtypes;
      c.has_outputs = true;
      log.calls.push_back(c);
    }
    logs.push_back(log);
  }
  CollectiveLog ring;
  ring.rank = 1;
  ring.version = "perftracker-ring/1";
  ring.source = "rank_1.ring.json";
  ring.calls.push_back(Call(36, {7}));
  logs.push_back(ring);
  return logs;
}

TEST(GroupMembers, TheDefaultGroupHoldsEveryRankAndNamedGroupsTheirDumpsRanks) {
  std::vector<CollectiveLog> logs = Desync();
  logs[0].group_ranks["tp"] = {0, 1};
  logs[0].calls.push_back(Call(1, {4}, "tp", "tensor parallel"));
  logs[0].calls.push_back(Call(1, {4}, "pp", "undefined"));  // no dump gives its ranks
  const auto members = internal::GroupMembers(logs);
  EXPECT_EQ(members.at("0"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(members.at("tp"), (std::vector<int>{0, 1}));
  EXPECT_FALSE(members.contains("pp"));
  EXPECT_FALSE(members.contains(""));  // gloo's unnamed key is no group the entries name
}

TEST(CompleteFrom, TheFirstNumberOfTheGaplessTail) {
  EXPECT_EQ(internal::CompleteFrom({3, 4, 9, 10, 11}), 9);
  EXPECT_EQ(internal::CompleteFrom({1, 2, 3}), 1);
  EXPECT_EQ(internal::CompleteFrom({36}), 36);
  EXPECT_EQ(internal::CompleteFrom({}), -1);
}

TEST(OutputsOf, FollowFromTheOp) {
  CollectiveCall c = Call(1, {8, 16});
  EXPECT_EQ(internal::OutputsOf(c, 4), c.sizes);
  c.op = "all_gather_into_tensor";
  EXPECT_EQ(internal::OutputsOf(c, 4), (std::vector<std::vector<int64_t>>{{32, 16}}));
  c.op = "reduce_scatter_tensor";
  EXPECT_EQ(internal::OutputsOf(c, 4), (std::vector<std::vector<int64_t>>{{2, 16}}));
}

TEST(ExportFlightRecorder, WritesWhatFrTraceNeedsAlignedFromWhereEveryRankIsComplete) {
  std::vector<CollectiveLog> logs = Desync();
  logs[0].calls.push_back(Call(1, {4}, "5", "undefined"));  // a group without ranks
  auto e = ExportFlightRecorder(logs);
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_EQ(e->files.size(), 4u);
  ASSERT_EQ(e->notes.size(), 3u);
  EXPECT_NE(e->notes[0].find("group '0' (default_pg): from #36"), std::string::npos) << e->notes[0];
  EXPECT_NE(e->notes[0].find("105 earlier call(s) left out"), std::string::npos) << e->notes[0];
  EXPECT_NE(e->notes[1].find("group '5' (undefined): no dump gives its ranks"), std::string::npos)
      << e->notes[1];
  EXPECT_NE(e->notes[2].find("rank 1: the outputs of 1 call(s) follow from their op"),
            std::string::npos)
      << e->notes[2];
  for (int rank : {0, 1}) {
    auto p = trace::ParsePickle(e->files.at(rank), "rank");
    ASSERT_TRUE(p.ok()) << p.status().message();
    const trace::PickleValue root = p->root();
    EXPECT_EQ(root.get("version").str(), "2.10");  // torch's, on the ring's rank too
    const trace::PickleValue group = root.get("pg_config").get("0");
    EXPECT_EQ(group.get("desc").str(), "default_pg");
    EXPECT_EQ(group.get("ranks").str(), "[0, 1, 2, 3]");
    EXPECT_TRUE(root.get("pg_config").get("5").is_none());
    const trace::PickleValue entries = root.get("entries");
    ASSERT_EQ(entries.length(), 1u);  // #36 alone, on every rank
    const trace::PickleValue e0 = entries.at(0);
    EXPECT_EQ(e0.get("record_id").integer(-1), 0);
    EXPECT_EQ(e0.get("collective_seq_id").integer(), 36);
    EXPECT_EQ(e0.get("process_group").at(0).str(), "0");
    EXPECT_EQ(e0.get("profiling_name").str(), "gloo:all_reduce");
    const int64_t n = rank == 1 ? 7 : 199946;
    EXPECT_EQ(e0.get("input_sizes").at(0).at(0).integer(), n);
    EXPECT_EQ(e0.get("output_sizes").at(0).at(0).integer(), n);
    EXPECT_EQ(e0.get("output_dtypes").at(0).str(), "Float");
    EXPECT_EQ(e0.get("frames").at(0).get("name").str(), "step");  // innermost first
  }
}

TEST(ExportFlightRecorder, AMissingRankIsNamedAndNothingRecordedIsAnError) {
  std::vector<CollectiveLog> logs = Desync();
  logs.pop_back();  // rank 1 left nothing
  auto e = ExportFlightRecorder(logs);
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->notes.size(), 1u);
  EXPECT_NE(e->notes[0].find("rank(s) 1 left no record: run fr_trace with "
                             "--allow-incomplete-ranks"),
            std::string::npos)
      << e->notes[0];
  EXPECT_FALSE(ExportFlightRecorder({}).ok());
}

TEST(WriteFlightRecorderFolder, WritesRankFilesAndNeverOverwrites) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fr_export_test_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  auto e = ExportFlightRecorder(Desync());
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(WriteFlightRecorderFolder(*e, dir.string()).ok());
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(std::filesystem::exists(dir / ("rank_" + std::to_string(r))));
  // A second export into the same folder: refused, the first one's files kept.
  const auto size = std::filesystem::file_size(dir / "rank_0");
  const Status again = WriteFlightRecorderFolder(*e, dir.string());
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("rank_0: File exists (export into a new folder)"),
            std::string::npos)
      << again.message();
  EXPECT_EQ(std::filesystem::file_size(dir / "rank_0"), size);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace perftracker::report
