#include "agent/loader_stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace perftracker::agent {
namespace {

void PutU64(std::string* b, size_t at, uint64_t v) {
  for (int k = 0; k < 8; ++k) (*b)[at + k] = static_cast<char>((v >> (8 * k)) & 0xff);
}

// The bytes python/perftracker/loader.py writes (its docstring's layout).
std::string WorkerFile(uint64_t seq, uint64_t batches, uint64_t dataset_ns, uint64_t collate_ns,
                       const std::string& dataset_fn, const std::string& collate_fn) {
  std::string b(kLoaderStatsBytes, '\0');
  b.replace(0, 4, "PTLW");
  b[4] = 1;
  PutU64(&b, 8, seq);
  PutU64(&b, 16, batches);
  PutU64(&b, 24, dataset_ns);
  PutU64(&b, 32, collate_ns);
  b.replace(40, dataset_fn.size(), dataset_fn);
  b.replace(168, collate_fn.size(), collate_fn);
  return b;
}

TEST(LoaderStats, ParsesAWorkersFile) {
  auto s = ParseLoaderStats(WorkerFile(2, 3, 5000000, 1000000, "D.__getitem__ (d.py:4)", "c"));
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->sequence, 2u);
  EXPECT_EQ(s->batches, 3u);
  EXPECT_EQ(s->dataset_ns, 5000000u);
  EXPECT_EQ(s->collate_ns, 1000000u);
  EXPECT_EQ(s->dataset_fn, "D.__getitem__ (d.py:4)");
  EXPECT_EQ(s->collate_fn, "c");
}

TEST(LoaderStats, RefusesOtherBytesAndKeepsNamesPrintable) {
  EXPECT_FALSE(ParseLoaderStats("PTLW").ok());
  std::string wrong = WorkerFile(0, 0, 0, 0, "", "");
  wrong[0] = 'X';
  EXPECT_FALSE(ParseLoaderStats(wrong).ok());
  std::string v2 = WorkerFile(0, 0, 0, 0, "", "");
  v2[4] = 2;
  EXPECT_FALSE(ParseLoaderStats(v2).ok());
  // A name that fills its field has no NUL: it ends at the field, never runs into the next.
  auto s = ParseLoaderStats(WorkerFile(0, 1, 0, 0, std::string(128, 'a'), "bad\x01\n"));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dataset_fn, std::string(127, 'a'));
  EXPECT_EQ(s->collate_fn, "bad??");
}

class LoaderFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pt_loader_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(int pid, const std::string& bytes) {
    std::ofstream(dir_ / ("loader-" + std::to_string(pid)), std::ios::binary) << bytes;
  }
  std::filesystem::path dir_;
};

TEST_F(LoaderFiles, ReadsAConsistentCopyAndRefusesAFileBeingWritten) {
  Write(4242, WorkerFile(6, 3, 10, 20, "D", "c"));
  auto s = ReadLoaderStats(dir_.string(), 4242);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->batches, 3u);
  // A worker that never finishes its write (odd sequence): no reading, an error.
  Write(4243, WorkerFile(7, 3, 10, 20, "D", "c"));
  EXPECT_FALSE(ReadLoaderStats(dir_.string(), 4243).ok());
  EXPECT_FALSE(ReadLoaderStats(dir_.string(), 4244).ok());  // none
  Write(4245, "short");
  EXPECT_FALSE(ReadLoaderStats(dir_.string(), 4245).ok());
}

TEST_F(LoaderFiles, RemovesTheFilesOfWorkersThatAreGone) {
  Write(getpid(), WorkerFile(0, 0, 0, 0, "", ""));
  // A pid above the kernel's pid_max is never a live process.
  Write(99999999, WorkerFile(0, 0, 0, 0, "", ""));
  RemoveStaleLoaderStats(dir_.string());
  EXPECT_TRUE(std::filesystem::exists(dir_ / ("loader-" + std::to_string(getpid()))));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "loader-99999999"));
}

TEST(LoaderStats, MetricsAreTheWindowsDifferenceWithTheBusiestWorkersNames) {
  std::map<int, LoaderStats> begin, end;
  begin[10] = {0, 5, 500'000'000, 1'000'000, "D.__getitem__", "collate"};
  end[10] = {0, 9, 1'300'000'000, 2'000'000, "D.__getitem__", "collate"};
  // Started within the window: counted whole.
  end[11] = {0, 2, 100'000'000, 400'000'000, "D2.__getitem__", "slow_collate"};
  std::map<std::string, double> m;
  AddLoaderMetrics(begin, end, &m);
  EXPECT_EQ(m["loader.workers"], 2);
  EXPECT_EQ(m["loader.batches"], 6);
  EXPECT_DOUBLE_EQ(m["loader.dataset_s"], 0.9);
  EXPECT_DOUBLE_EQ(m["loader.collate_s"], 0.401);
  EXPECT_EQ(m.count("loader.dataset_fn=D.__getitem__"), 1u);  // worker 10: 801 ms
  EXPECT_EQ(m.count("loader.collate_fn=collate"), 1u);
  std::map<std::string, double> none;
  AddLoaderMetrics(begin, {}, &none);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace perftracker::agent
