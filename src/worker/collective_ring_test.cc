#include "worker/collective_ring.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace perftracker::worker {
namespace {

namespace ring = collective_ring;

CollectiveEntry AllReduce(int64_t seq, const int64_t* sizes, size_t dims) {
  CollectiveEntry e;
  e.group = "0";
  e.group_desc = "default_pg";
  e.seq = seq;
  e.op = "all_reduce";
  e.backend = "gloo";
  e.sizes = sizes;
  e.dims = dims;
  e.dtype = "Float";
  e.file = "/job/train.py";
  e.line = 145;
  e.function = "train_step";
  return e;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CollectiveRingTest, DumpsAsAFlightRecorderJsonDump) {
  ring::ResetForTest();
  const int64_t sizes[] = {2, 3};
  const uint64_t a = ring::Entered(AllReduce(7, sizes, 2), 1000);
  ring::Returned(a, true);
  CollectiveEntry barrier = AllReduce(8, nullptr, 0);
  barrier.op = "barrier";
  barrier.dtype = "";
  barrier.file = "/job/a \"quoted\"\\path.py";
  ring::Entered(barrier, 2000);
  const std::string json = ring::DumpJson();
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json;
  EXPECT_EQ(std::string_view(doc["version"].get_string().value()), "perftracker-ring/1");
  simdjson::dom::array entries = doc["entries"].get_array().value();
  ASSERT_EQ(entries.size(), 2u);
  simdjson::dom::element first = entries.at(0).value();
  EXPECT_EQ(first["collective_seq_id"].get_int64().value(), 7);
  EXPECT_EQ(std::string_view(first["profiling_name"].get_string().value()), "gloo:all_reduce");
  EXPECT_EQ(first["input_sizes"].at(0).at(1).get_int64().value(), 3);
  EXPECT_EQ(std::string_view(first["input_dtypes"].at(0).get_string().value()), "Float");
  EXPECT_EQ(std::string_view(first["state"].get_string().value()), "completed");
  EXPECT_EQ(first["frames"].at(0)["line"].get_int64().value(), 145);
  simdjson::dom::element second = entries.at(1).value();
  EXPECT_EQ(std::string_view(second["state"].get_string().value()), "scheduled");
  EXPECT_EQ(second["input_sizes"].get_array().value().size(), 0u);
  EXPECT_EQ(std::string_view(second["frames"].at(0)["filename"].get_string().value()),
            "/job/a \"quoted\"\\path.py");
}

TEST(CollectiveRingTest, APointToPointCallIsNumberedAsOneWithItsPeers) {
  ring::ResetForTest();
  CollectiveEntry send = AllReduce(3, nullptr, 0);
  send.op = "send 0->1";
  ring::Entered(send, 1000);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  const std::string json = ring::DumpJson();
  ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json;
  simdjson::dom::element e = doc["entries"].at(0).value();
  EXPECT_EQ(std::string_view(e["profiling_name"].get_string().value()), "gloo:send 0->1");
  EXPECT_TRUE(e["is_p2p"].get_bool().value());
  EXPECT_EQ(e["p2p_seq_id"].get_int64().value(), 3);
  EXPECT_EQ(e["collective_seq_id"].get_int64().value(), 0);
}

TEST(CollectiveRingTest, ANameCutToFitIsCutBetweenCharacters) {
  // Issue 40: a function name of 'é's (two bytes each) cut at 63 bytes ended in half a
  // character, and the dump was no JSON a reader takes.
  ring::ResetForTest();
  std::string name, path = "/";
  for (int i = 0; i < 40; ++i) name += "\xc3\xa9";
  for (int i = 0; i < 120; ++i) path += "\xc3\xa9";
  CollectiveEntry e = AllReduce(1, nullptr, 0);
  e.function = name;
  e.file = path + "/train.py";
  ring::Entered(e, 1000);
  const std::string json = ring::DumpJson();
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json;
  simdjson::dom::element frame = doc["entries"].at(0)["frames"].at(0).value();
  const std::string_view fn = frame["name"].get_string().value();
  EXPECT_EQ(fn, std::string_view(name).substr(0, 62));  // 31 whole characters
  const std::string_view file = frame["filename"].get_string().value();
  EXPECT_TRUE(file.ends_with("\xc3\xa9/train.py")) << file;
  EXPECT_NE(static_cast<unsigned char>(file.front()) & 0xc0, 0x80) << file;
}

TEST(CollectiveRingTest, ADumpIsNeverWrittenThroughALink) {
  // Issue 40: the dump's temporary file was opened with fopen, which follows a link planted
  // there to wherever it points.
  ring::ResetForTest();
  const std::string dir = ::testing::TempDir();
  const std::string victim = dir + "/pt_ring_victim", path = dir + "/pt_ring_rank_0.ring.json";
  {
    std::ofstream(victim) << "keep";
  }
  std::remove((path + ".tmp").c_str());
  ASSERT_EQ(symlink(victim.c_str(), (path + ".tmp").c_str()), 0);
  EXPECT_FALSE(ring::WriteDump(path).ok());
  EXPECT_EQ(ReadAll(victim), "keep");
  std::remove((path + ".tmp").c_str());
  {
    std::ofstream(path + ".tmp") << "a dump that died";
  }  // this user's: replaced
  EXPECT_TRUE(ring::WriteDump(path).ok());
  EXPECT_EQ(ReadAll(path).rfind("{\"entries\":[", 0), 0u);
  std::remove(path.c_str());
  std::remove(victim.c_str());
}

TEST(CollectiveRingTest, ADumpBesideTheCollectivesHoldsNoTornEntry) {
  // Issue 40: a dump reads the slots while the training thread fills them (the Python side
  // writes it without the GIL); an entry read as its slot was taken for a newer call mixed the
  // two. Each call here names its number in its function and its file: a dump's entries must
  // agree with themselves.
  ring::ResetForTest();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> written{0};
  std::thread writer([&] {
    for (int64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const std::string fn = "f" + std::to_string(i), file = "/job/" + std::to_string(i) + ".py";
      CollectiveEntry e = AllReduce(i, nullptr, 0);
      e.function = fn;
      e.file = file;
      ring::Entered(e, i);
      written.store(i + 1, std::memory_order_relaxed);
    }
  });
  // The dumps begin once the ring holds entries (on a loaded machine the writer may start after
  // 3,000 dumps of an empty ring: nothing to test).
  while (written.load(std::memory_order_relaxed) < 64) std::this_thread::yield();
  int torn = 0, entries = 0;
  simdjson::dom::parser parser;
  for (int k = 0; k < 3000; ++k) {
    const std::string json = ring::DumpJson();
    simdjson::dom::element doc;
    ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS);
    simdjson::dom::array got = doc["entries"].get_array().value();
    for (simdjson::dom::element e : got) {
      ++entries;
      const int64_t seq = e["collective_seq_id"].get_int64().value();
      const std::string_view fn = e["frames"].at(0)["name"].get_string().value();
      const std::string_view file = e["frames"].at(0)["filename"].get_string().value();
      const int64_t created = e["time_created_ns"].get_int64().value();
      if (fn != "f" + std::to_string(seq) || file != "/job/" + std::to_string(seq) + ".py" ||
          created != seq)
        ++torn;
    }
  }
  stop = true;
  writer.join();
  EXPECT_GT(entries, 0);
  EXPECT_EQ(torn, 0) << "of " << entries << " entries read";
}

TEST(CollectiveRingTest, KeepsTheLastEntriesOldestFirst) {
  ring::ResetForTest();
  const int64_t sizes[] = {4};
  for (int64_t seq = 1; seq <= static_cast<int64_t>(ring::kRingSize) + 10; ++seq)
    ring::Entered(AllReduce(seq, sizes, 1), seq);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  const std::string json = ring::DumpJson();
  ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS);
  simdjson::dom::array entries = doc["entries"].get_array().value();
  ASSERT_EQ(entries.size(), ring::kRingSize);
  EXPECT_EQ(entries.at(0)["collective_seq_id"].get_int64().value(), 11);
  EXPECT_EQ(entries.at(ring::kRingSize - 1)["collective_seq_id"].get_int64().value(),
            static_cast<int64_t>(ring::kRingSize) + 10);
}

// A child process that records collective #9 with PATH as its crash dump, then aborts (what gloo
// does on mismatched collectives); its wait status.
int AbortAfterOneCollective(const std::string& path) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int64_t sizes[] = {7};
    if (!ring::SetCrashPath(path).ok()) _exit(3);
    ring::Entered(AllReduce(9, sizes, 1), 5);
    abort();
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid ? status : -1;
}

TEST(CollectiveRingTest, AnAbortWritesTheRingAndStillKillsTheProcess) {
  ring::ResetForTest();
  char dir[] = "/tmp/pt_ring_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/rank_1.ring.json";
  const int status = AbortAfterOneCollective(path);
  ASSERT_TRUE(status != -1 && WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
  const std::string json = ReadAll(path);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json;
  simdjson::dom::element e = doc["entries"].at(0).value();
  EXPECT_EQ(e["collective_seq_id"].get_int64().value(), 9);
  EXPECT_EQ(std::string_view(e["state"].get_string().value()), "scheduled");
  std::remove(path.c_str());
  rmdir(dir);
}

TEST(CollectiveRingTest, AnAbortNeverWritesThroughALinkPlantedAtTheDumpPath) {
  ring::ResetForTest();
  char dir[] = "/tmp/pt_ring_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/rank_1.ring.json";
  const std::string victim = std::string(dir) + "/victim";
  {
    std::ofstream(victim) << "keep me";
  }
  ASSERT_EQ(link(victim.c_str(), path.c_str()), 0);  // a hard link: O_NOFOLLOW alone passes it
  const int status = AbortAfterOneCollective(path);
  ASSERT_TRUE(status != -1 && WIFSIGNALED(status)) << status;
  EXPECT_EQ(ReadAll(victim), "keep me");
  EXPECT_NE(ReadAll(path).find("\"collective_seq_id\":9"), std::string::npos);
  std::remove(path.c_str());
  std::remove(victim.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace perftracker::worker
