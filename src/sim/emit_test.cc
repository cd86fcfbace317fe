// Unit tests of the simulator's output: summaries and traces built from the timing model, and
// the parallel writer (the same bytes whatever the thread count; hung ranks write nothing;
// errors stop it).
#include "sim/emit.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "temp_dir.h"

namespace perftracker::sim {
namespace {

namespace fs = std::filesystem;

using testing_support::TempDir;

Config Job(std::vector<const char*> faults = {}) {
  Config c;
  c.workers = 16;
  c.layout = ParseLayout("tp=2,pp=2", 16).value();
  c.iterations = 3;
  c.layers = 2;
  c.seed = 11;
  c.traces = true;
  for (const char* f : faults) c.faults.push_back(ParseFault(f).value());
  EXPECT_TRUE(Validate(c).ok()) << Validate(c).message();
  return c;
}

// Every file under DIR, by relative path.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out[fs::relative(e.path(), dir).string()] = ss.str();
  }
  return out;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(BuildSummary, CollectivesCarryTheirGroupsAndBusBandwidth) {
  Config c = Job();
  Topology topo(c);
  TimingModel model(c, topo);
  pattern::RankSummary s = BuildSummary(c, topo, model, 13);
  int collectives = 0;
  for (const pattern::FunctionPattern& f : s.functions) {
    if (f.fclass != pattern::FunctionClass::kCollective) continue;
    ++collectives;
    ASSERT_GT(f.coll.algbw_gbps, 0) << f.name;
    const double factor = f.coll.busbw_gbps / f.coll.algbw_gbps;
    if (f.coll.op == "all_reduce") {
      EXPECT_EQ(f.coll.group, "tp:12");
      EXPECT_EQ(f.coll.group_size, 2);
      EXPECT_DOUBLE_EQ(factor, 1.0);
    } else if (f.coll.op == "send_recv") {
      EXPECT_EQ(f.coll.group, "pp:5");
      EXPECT_EQ(f.coll.group_size, 2);
      EXPECT_DOUBLE_EQ(factor, 1.0);
    } else {
      EXPECT_EQ(f.coll.group, "dp:9");
      EXPECT_EQ(f.coll.group_size, 4);
      EXPECT_DOUBLE_EQ(factor, 0.75);
    }
  }
  EXPECT_EQ(collectives, 4);
  // Sorted by time per iteration, longest first.
  for (size_t i = 1; i < s.functions.size(); ++i) {
    EXPECT_GE(s.functions[i - 1].per_iter_us, s.functions[i].per_iter_us);
  }
}

TEST(BuildSummary, IntermittentFaultOnItsIterationsOnly) {
  Config c = Job({"slow-gpu@rank=5,size=3,every=3"});
  Topology topo(c);
  TimingModel model(c, topo);
  pattern::RankSummary s = BuildSummary(c, topo, model, 5);
  for (const pattern::FunctionPattern& f : s.functions) {
    if (f.name.rfind("ampere_", 0) != 0) continue;
    ASSERT_EQ(f.iter_us.size(), 3u);
    // Iteration 0 carries the whole fault (3x its mean share), 1 and 2 none.
    EXPECT_GT(f.iter_us[0], 1.5 * f.iter_us[1]);
    EXPECT_GT(f.iter_us[0], 1.5 * f.iter_us[2]);
  }
}

TEST(BuildTraceJson, OneStepPerIterationAndCollectiveArgs) {
  Config c = Job({"gc@rank=4"});
  Topology topo(c);
  TimingModel model(c, topo);
  std::string t = BuildTraceJson(c, topo, model, 4);
  EXPECT_EQ(Count(t, "\"ProfilerStep#"), 3u);
  EXPECT_EQ(Count(t, "\"name\": \"<gc>\""), 3u);
  EXPECT_NE(t.find("\"Process Group Ranks\": \"[0, 2, 4, 6]\""), std::string::npos);  // dp group
  EXPECT_NE(t.find("\"Collective name\": \"send\""), std::string::npos);
  EXPECT_NE(t.find("\"traceName\": \"rank-4.json\""), std::string::npos);
  EXPECT_EQ(t, BuildTraceJson(c, topo, model, 4));
}

TEST(WriteRanks, SameBytesWhateverTheThreads) {
  Config c = Job({"hang@rank=6", "slow-nic@node=1"});
  std::map<std::string, std::string> first;
  for (int threads : {1, 3, 64, 1000}) {
    c.threads = threads;
    TempDir dir{"pt-sim-emit"};
    fs::create_directories(fs::path(dir.path()) / "summaries");
    fs::create_directories(fs::path(dir.path()) / "traces");
    Simulator sim(c);
    RunStats stats;
    ASSERT_TRUE(WriteRanks(sim, dir.path(), &stats).ok());
    EXPECT_EQ(stats.ranks_written, 15);  // the hung rank writes nothing
    std::map<std::string, std::string> files = Files(dir.path());
    EXPECT_EQ(files.size(), 30u);
    EXPECT_EQ(files.count("summaries/rank-6.summary"), 0u);
    uint64_t bytes = 0;
    for (const auto& [name, content] : files) bytes += content.size();
    EXPECT_EQ(stats.bytes, bytes);
    if (first.empty()) {
      first = files;
    } else {
      EXPECT_TRUE(files == first) << threads << " threads";
    }
  }
}

TEST(WriteRanks, StopsAtAnError) {
  Config c = Job();
  TempDir dir{"pt-sim-emit"};
  // No summaries folder: the first rank fails.
  Simulator sim(c);
  RunStats stats;
  Status st = WriteRanks(sim, dir.path() + "/missing", &stats);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(stats.ranks_written, 0);
  EXPECT_FALSE(WriteRank(sim, dir.path() + "/missing", 0).ok());
}

TEST(Run, WritesTruthSummariesAndTraces) {
  Config c = Job({"slow-gpu@rank=3"});
  c.threads = 4;
  TempDir dir{"pt-sim-emit"};
  auto stats = sim::Run(c, dir.path() + "/job");
  ASSERT_TRUE(stats.ok()) << stats.status().message();
  EXPECT_EQ(stats->ranks_written, 16);
  std::map<std::string, std::string> files = Files(dir.path() + "/job");
  EXPECT_EQ(files.size(), 33u);
  EXPECT_EQ(files["truth.json"], TruthJson(c));
  c.workers = 0;
  EXPECT_FALSE(sim::Run(c, dir.path() + "/bad").ok());
  EXPECT_FALSE(fs::exists(dir.path() + "/bad"));
}

}  // namespace
}  // namespace perftracker::sim
