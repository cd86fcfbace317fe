#include "agent/worker_message.h"

#include <gtest/gtest.h>

#include <string>

namespace perftracker::agent {
namespace {

using T = WorkerMessageType;

WorkerMessage Parse(const std::string& line) {
  simdjson::dom::parser parser;
  WorkerMessage m;
  ParseWorkerMessage(line, parser, &m);
  return m;
}

TEST(WorkerMessage, IdentityAndHello) {
  WorkerMessage m =
      Parse(R"({"type":"hello","v":1,"clock_offset_ns":42,"pid":7,"rank":3,"local_rank":1,)"
            R"("world_size":8,"host":"n1","attempt":2})");
  EXPECT_EQ(m.type, T::kHello);
  EXPECT_EQ(m.attempt, 2);
  EXPECT_EQ(m.version, 1);
  EXPECT_EQ(m.clock_offset_ns, 42);
  EXPECT_EQ(m.pid, 7);
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.local_rank, 1);
  EXPECT_EQ(m.world_size, 8);
  EXPECT_EQ(m.host, "n1");
}

TEST(WorkerMessage, ImpossibleIdentityIsUnknown) {
  WorkerMessage m = Parse(
      R"({"type":"hello","pid":-4,"rank":2000000000,"local_rank":-1,"world_size":0,"host":null,)"
      R"("attempt":-1})");
  EXPECT_EQ(m.type, T::kHello);
  EXPECT_FALSE(m.attempt);
  EXPECT_FALSE(Parse(R"({"type":"hello","attempt":1e12})").attempt);
  EXPECT_FALSE(m.pid);
  EXPECT_FALSE(m.rank);
  EXPECT_FALSE(m.local_rank);
  EXPECT_FALSE(m.world_size);
  EXPECT_FALSE(m.host);
}

TEST(WorkerMessage, IterationsSkipBadItemsAndAreBounded) {
  WorkerMessage m = Parse(R"({"type":"iterations","items":[[1,100,300,true],[2,"x",5],[3,400],)"
                          R"([4,500,900.5,false]]})");
  EXPECT_EQ(m.type, T::kIterations);
  ASSERT_EQ(m.items.size(), 2u);
  EXPECT_EQ(m.items[0].index, 1);
  EXPECT_EQ(m.items[1].end_ns, 900.5);
  EXPECT_EQ(m.skipped_items, 2u);
  std::string many = R"({"type":"iterations","items":[)";
  for (size_t i = 0; i < WorkerMessageLimits::kMaxItems + 5; ++i)
    many += (i ? ",[" : "[") + std::to_string(i) + ",1,2]";
  m = Parse(many + "]}");
  EXPECT_EQ(m.items.size(), WorkerMessageLimits::kMaxItems);
  EXPECT_EQ(m.skipped_items, 5u);
  EXPECT_EQ(Parse(R"({"type":"iterations"})").type, T::kMalformed);
}

TEST(WorkerMessage, IterationsCarryTheCudaAllocatorsFiguresWhenWellFormed) {
  WorkerMessage m =
      Parse(R"({"type":"iterations","items":[[1,100,300,true]],"cuda":[1048576,4194304,2097152]})");
  EXPECT_EQ(m.type, T::kIterations);
  ASSERT_TRUE(m.cuda.has_value());
  EXPECT_EQ(m.cuda->allocated, 1048576);
  EXPECT_EQ(m.cuda->reserved, 4194304);
  EXPECT_EQ(m.cuda->peak_allocated, 2097152);
  EXPECT_FALSE(Parse(R"({"type":"iterations","items":[]})").cuda);
  // Not three non-negative numbers of at most limits::kMaxMemoryBytes: dropped, the items kept.
  for (const char* bad : {R"([1,2])", R"([1,2,3,4])", R"([1,-2,3])", R"([1,"2",3])",
                          R"([1,2,1e300])", R"({"allocated":1})", R"(7)"}) {
    m = Parse(std::string(R"({"type":"iterations","items":[[1,100,300]],"cuda":)") + bad + "}");
    EXPECT_EQ(m.type, T::kIterations) << bad;
    EXPECT_EQ(m.items.size(), 1u) << bad;
    EXPECT_FALSE(m.cuda) << bad;
  }
}

TEST(WorkerMessage, TriggersTracesAndUnknownKinds) {
  WorkerMessage m = Parse(R"({"type":"trigger","kind":"slowdown","iteration":9,"mean_ns":2e6})");
  EXPECT_EQ(m.type, T::kTrigger);
  EXPECT_EQ(m.iteration, 9);
  EXPECT_EQ(m.mean_ns, 2e6);
  EXPECT_EQ(Parse(R"({"type":"trigger","kind":"reboot"})").type, T::kUnknown);
  m = Parse(R"({"type":"python_trace","path":"/t/rank-0.python.json","window":3,"torch":false})");
  EXPECT_EQ(m.type, T::kPythonTrace);
  EXPECT_EQ(m.window, 3);
  EXPECT_EQ(m.torch, false);
  EXPECT_EQ(Parse(R"({"type":"python_trace","path":null,"error":"disk full"})").type,
            T::kMalformed);
  m = Parse(R"({"type":"torch_trace","path":null,"error":"export failed"})");
  EXPECT_EQ(m.type, T::kTorchTrace);
  EXPECT_EQ(m.error, "export failed");
  EXPECT_EQ(Parse(R"({"type":"torch_trace"})").type, T::kMalformed);
  EXPECT_EQ(Parse(R"({"type":"teleport"})").type, T::kUnknown);
  EXPECT_EQ(Parse(R"([1,2])").type, T::kMalformed);
  EXPECT_EQ(Parse(R"({"type":5})").type, T::kMalformed);
  EXPECT_EQ(Parse("not json").type, T::kMalformed);
}

TEST(WorkerMessage, LongStringsAreCut) {
  const std::string path(100000, 'p');
  WorkerMessage m = Parse(R"({"type":"python_trace","path":")" + path + R"("})");
  EXPECT_EQ(m.path.size(), WorkerMessageLimits::kMaxString);
}

TEST(WorkerMessage, StacksKeepTheInnermostFrames) {
  std::string frames;
  for (size_t i = 0; i < WorkerMessageLimits::kMaxFrames + 10; ++i)
    frames += (i ? "," : "") + std::string(R"({"file":"f.py","line":)") + std::to_string(i) +
              R"(,"function":"g"})";
  WorkerMessage m = Parse(R"({"type":"stacks","request_id":5,"iteration":12,"threads":[)"
                          R"({"tid":1,"name":"MainThread","main":true,"frames":[)" +
                          frames +
                          R"(]}],"last_collective":{"op":"all_reduce","count":3,)"
                          R"("file":"t.py","line":9,"in_progress":true,"seconds":1.5}})");
  ASSERT_EQ(m.type, T::kStacks);
  EXPECT_EQ(m.request_id, 5);
  EXPECT_EQ(m.stacks.iteration, 12);
  ASSERT_EQ(m.stacks.threads.size(), 1u);
  const auto& f = m.stacks.threads[0].frames;
  ASSERT_EQ(f.size(), WorkerMessageLimits::kMaxFrames);
  EXPECT_EQ(f.back().line, static_cast<int>(WorkerMessageLimits::kMaxFrames + 9));
  EXPECT_TRUE(m.stacks.threads[0].main);
  EXPECT_EQ(m.stacks.last_collective.op, "all_reduce");
  EXPECT_TRUE(m.stacks.last_collective.in_progress);
  EXPECT_EQ(Parse(R"({"type":"stacks"})").type, T::kMalformed);
}

TEST(WorkerMessage, AReusedMessageStartsClean) {
  simdjson::dom::parser parser;
  WorkerMessage m;
  ParseWorkerMessage(R"({"type":"iterations","items":[[1,2,3]],"rank":4})", parser, &m);
  ParseWorkerMessage(R"({"type":"relearn"})", parser, &m);
  EXPECT_EQ(m.type, T::kRelearn);
  EXPECT_TRUE(m.items.empty());
  EXPECT_FALSE(m.rank);
}

}  // namespace
}  // namespace perftracker::agent
