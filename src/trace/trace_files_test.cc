#include "trace/trace_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

namespace perftracker::trace {
namespace {

TEST(TraceFilesTest, BaseName) {
  EXPECT_EQ(internal::BaseName("/job/traces/rank-3.json"), "rank-3.json");
  EXPECT_EQ(internal::BaseName("rank-3.json"), "rank-3.json");
  EXPECT_EQ(internal::BaseName("/job/"), "");
}

TEST(TraceFilesTest, IsTraceFileName) {
  EXPECT_TRUE(internal::IsTraceFileName("rank3.pt.trace.json.gz"));
  EXPECT_TRUE(internal::IsTraceFileName("a.json"));
  EXPECT_FALSE(internal::IsTraceFileName(".json"));  // nothing before the suffix
  EXPECT_FALSE(internal::IsTraceFileName("a.json.bak"));
  EXPECT_FALSE(internal::IsTraceFileName("a.JSON"));
  EXPECT_FALSE(internal::IsTraceFileName("notes.txt"));
}

TEST(TraceFilesTest, RankFromFileName) {
  EXPECT_EQ(RankFromFileName("/job/traces/rank-3.json"), 3);
  EXPECT_EQ(RankFromFileName("Rank_05.json"), 5);
  EXPECT_EQ(RankFromFileName("worker.rank.11.json.gz"), 11);
  EXPECT_EQ(RankFromFileName("rank1-rank2.json"), 2);  // the last one named
  EXPECT_EQ(RankFromFileName("rank.json"), -1);
  EXPECT_EQ(RankFromFileName("rank--1.json"), -1);                  // one separator at most
  EXPECT_EQ(RankFromFileName("/rank4/trace.json"), -1);             // folders do not count
  EXPECT_EQ(RankFromFileName("rank123456789012.json"), 123456789);  // digits capped
}

class TraceFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/trace_files_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void Touch(const std::string& name) { std::ofstream(dir_ + "/" + name) << "{}"; }
  std::string dir_;
};

TEST_F(TraceFolderTest, ListsTraceFilesSortedAndOnce) {
  Touch("b.json.gz");
  Touch("a.json");
  Touch("notes.txt");
  ASSERT_EQ(mkdir((dir_ + "/c.json").c_str(), 0755), 0);  // a folder, not a trace
  Touch("c.json/inner.json");                             // not recursed into
  auto got = ExpandTracePaths({dir_ + "/", dir_ + "/a.json", dir_ + "/notes.txt"});
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got,
            (std::vector<std::string>{dir_ + "/a.json", dir_ + "/b.json.gz", dir_ + "/notes.txt"}));
}

TEST_F(TraceFolderTest, Errors) {
  Touch("notes.txt");
  auto empty = ExpandTracePaths({dir_});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(empty.status().message(), dir_ + ": folder holds no trace files (*.json, *.json.gz)");
  auto missing = ExpandTracePaths({dir_ + "/nope.json"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), dir_ + "/nope.json: No such file or directory");
}

}  // namespace
}  // namespace perftracker::trace
