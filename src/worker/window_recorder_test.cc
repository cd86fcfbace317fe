#include "worker/window_recorder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perftracker::worker {
namespace {

alignas(64) char g_functions[4 * 16];
const void* Key(int i) { return &g_functions[i * 16]; }

TEST(WindowRecorderTest, BeginNamesTheRootAndGcAndStartsIterationZero) {
  WindowRecorder r;
  EXPECT_EQ(r.tree(), nullptr);
  r.Start();
  r.Begin(1000, {});
  ASSERT_NE(r.tree(), nullptr);
  EXPECT_EQ(r.names().names(), (std::vector<std::string>{"", "<gc>"}));
  EXPECT_EQ(r.gc_name(), 1u);
  const uint32_t f = r.names().Add(Key(0), "a.py(3): f");
  r.tree()->Enter(f, 1100);
  r.tree()->Exit(1300);
  PythonWindow w;
  r.Finish(2000, &w);
  EXPECT_EQ(r.tree(), nullptr);
  ASSERT_EQ(w.tree.nodes().size(), 3u);  // root, <other>, f
  const CallNode& n = w.tree.nodes()[2];
  EXPECT_EQ(n.name, f);
  EXPECT_EQ(n.total_ns, 200);
  ASSERT_EQ(n.iterations.size(), 1u);
  EXPECT_EQ(n.iterations[0].iteration, 0);
  EXPECT_EQ(w.names, (std::vector<std::string>{"", "<gc>", "a.py(3): f"}));
  EXPECT_TRUE(r.names().names().empty());
}

TEST(WindowRecorderTest, FinishClosesOpenCallsAtTheEnd) {
  WindowRecorder r;
  r.Begin(0, {});
  const uint32_t f = r.names().Add(Key(0), "f");
  r.tree()->EnterInProgress(f, 0);  // the training loop, entered at the arming
  r.tree()->Enter(r.names().Add(Key(1), "g"), 100);
  PythonWindow w;
  r.Finish(500, &w);
  ASSERT_EQ(w.tree.nodes().size(), 4u);
  EXPECT_EQ(w.tree.nodes()[2].total_ns, 500);  // f: open from 0 to the end
  EXPECT_EQ(w.tree.nodes()[3].total_ns, 400);  // g
}

TEST(WindowRecorderTest, TotalsAddUpOverWindowsAndNamesStartOver) {
  WindowRecorder r;
  CallTreeLimits one_node;
  one_node.max_nodes = 3;  // root, <other> and one stack
  for (int window = 0; window < 2; ++window) {
    r.Begin(0, one_node);
    EXPECT_EQ(r.names().names().size(), 2u) << window;  // the previous window's are gone
    uint32_t id = 0;
    EXPECT_FALSE(r.names().Find(Key(0), &id));
    const uint32_t f = r.names().Add(Key(0), "f");
    const uint32_t g = r.names().Add(Key(1), "g");
    r.tree()->Enter(f, 10);
    r.tree()->Exit(20);
    r.tree()->Enter(g, 30);  // past the node cap: "<other>"
    r.tree()->Exit(40);
    r.tree()->EnterUntraced();
    r.tree()->ExitC(50);
    r.tree()->EnterGc(r.gc_name(), 60);
    r.tree()->ExitGc(70);
    PythonWindow w;
    r.Finish(100, &w);
  }
  const TracerTotals& t = r.totals();
  EXPECT_EQ(t.calls, 2u * 3);        // f, g and the collection, twice
  EXPECT_EQ(t.other_calls, 2u * 2);  // g and the collection found no room
  EXPECT_EQ(t.untraced, 2u);
  EXPECT_EQ(t.gc_spans, 2u);
  EXPECT_EQ(t.nodes, 3u);
}

TEST(WindowRecorderTest, AForkedChildLeavesTheTreeAlone) {
  WindowRecorder r;
  r.Begin(0, {});
  CallTree* parents = r.tree();
  r.AbandonAfterFork();
  EXPECT_EQ(r.tree(), nullptr);
  delete parents;  // here only: a real child never frees it
}

TEST(WindowRecorderTest, TracerLimitsAreChecked) {
  EXPECT_TRUE(CheckTracerLimits(kMinTracerNodes, 1).ok());
  EXPECT_TRUE(CheckTracerLimits(kMaxTracerNodes, kMaxTracerDepth).ok());
  EXPECT_FALSE(CheckTracerLimits(kMinTracerNodes - 1, 1).ok());
  EXPECT_FALSE(CheckTracerLimits(kMaxTracerNodes + 1, 1).ok());
  EXPECT_FALSE(CheckTracerLimits(1 << 16, 0).ok());
  EXPECT_FALSE(CheckTracerLimits(1 << 16, kMaxTracerDepth + 1).ok());
  const Status st = CheckTracerLimits(0, 0);
  EXPECT_EQ(st.message(), kTracerLimitsMessage);
}

}  // namespace
}  // namespace perftracker::worker
