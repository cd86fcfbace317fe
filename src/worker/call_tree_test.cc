#include "worker/call_tree.h"

#include <gtest/gtest.h>

#include "worker/window_file.h"

namespace perftracker::worker {
namespace {

// Names: 1 = main, 2 = step, 3 = leaf, 4 = <gc>.
constexpr uint32_t kMain = 1, kStep = 2, kLeaf = 3, kGc = 4;

const CallNode* Find(const CallTree& t, std::initializer_list<uint32_t> path) {
  uint32_t at = CallTree::kRoot;
  for (uint32_t name : path) {
    bool found = false;
    for (uint32_t i = 2; i < t.nodes().size(); ++i) {
      if (t.nodes()[i].parent == at && t.nodes()[i].name == name) {
        at = i;
        found = true;
        break;
      }
    }
    if (!found) return nullptr;
  }
  return &t.nodes()[at];
}

TEST(CallTreeTest, CountsInclusiveAndSelfTimePerStackPath) {
  CallTree t;
  t.SetIteration(0);
  t.Enter(kMain, 0);
  for (int i = 0; i < 3; ++i) {  // main -> step -> leaf x2, three times
    t.Enter(kStep, 100 + i * 1000);
    t.Enter(kLeaf, 110 + i * 1000);
    t.Exit(160 + i * 1000);  // 50 ns
    t.Enter(kLeaf, 200 + i * 1000);
    t.Exit(230 + i * 1000);  // 30 ns
    t.Exit(300 + i * 1000);  // step: 200 ns, self 120
    if (i == 1) t.SetIteration(1);
  }
  t.Enter(kLeaf, 5000);  // leaf called straight from main: another identity
  t.Exit(5010);
  t.Exit(6000);

  const CallNode* leaf = Find(t, {kMain, kStep, kLeaf});
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(leaf->count, 6u);
  EXPECT_EQ(leaf->total_ns, 3 * 80);
  EXPECT_EQ(leaf->self_ns, 3 * 80);
  EXPECT_EQ(leaf->min_ns, 30);
  EXPECT_EQ(leaf->max_ns, 50);
  const CallNode* step = Find(t, {kMain, kStep});
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->count, 3u);
  EXPECT_EQ(step->total_ns, 600);
  EXPECT_EQ(step->self_ns, 3 * 120);
  // Iterations by the start of each call: two steps in iteration 0, one in iteration 1.
  ASSERT_EQ(step->iterations.size(), 2u);
  EXPECT_EQ(step->iterations[0].iteration, 0);
  EXPECT_EQ(step->iterations[0].calls, 2u);
  EXPECT_EQ(step->iterations[1].calls, 1u);
  EXPECT_EQ(step->iterations[1].inclusive_ns, 200);
  const CallNode* direct = Find(t, {kMain, kLeaf});
  ASSERT_NE(direct, nullptr);
  EXPECT_EQ(direct->count, 1u);
  const CallNode* main = Find(t, {kMain});
  EXPECT_EQ(main->self_ns, 6000 - 600 - 10);
  EXPECT_EQ(t.stats().calls, 6u + 3u + 1u + 1u);
}

TEST(CallTreeTest, GcIsAChildOfTheRunningStackAndLeavesItsSelfTime) {
  CallTree t;
  t.Enter(kStep, 0);
  t.Enter(kLeaf, 10);
  t.EnterGc(kGc, 20);
  t.Exit(25);  // a return while a collection is open belongs to no call of it: ignored
  t.ExitGc(70);
  t.Exit(100);
  t.Exit(120);
  const CallNode* gc = Find(t, {kStep, kLeaf, kGc});
  ASSERT_NE(gc, nullptr);
  EXPECT_TRUE(gc->gc);
  EXPECT_EQ(gc->total_ns, 50);
  const CallNode* leaf = Find(t, {kStep, kLeaf});
  EXPECT_EQ(leaf->total_ns, 90);
  EXPECT_EQ(leaf->self_ns, 40);
  EXPECT_EQ(t.stats().gc_collections, 1u);
}

TEST(CallTreeTest, CapsKeepTotalsExactInTheOtherNode) {
  CallTreeLimits limits;
  limits.max_nodes = 4;  // root, other, and two more
  limits.max_depth = 3;
  CallTree t(limits);
  for (uint32_t name = 10; name < 20; ++name) {  // ten functions, room for two
    t.Enter(name, 0);
    t.Exit(5);
  }
  EXPECT_EQ(t.nodes().size(), 4u);
  EXPECT_EQ(t.nodes()[CallTree::kOther].count, 8u);
  // Depth: the fourth level goes to "<other>", and so does everything below it.
  t.Enter(10, 0);
  t.Enter(11, 1);
  t.Enter(12, 2);
  t.Enter(13, 3);
  t.Enter(14, 4);
  for (int i = 0; i < 5; ++i) t.Exit(10);
  EXPECT_EQ(t.stats().calls, 15u);
  uint64_t sum = 0;
  for (const CallNode& n : t.nodes()) sum += n.count;
  EXPECT_EQ(sum, 15u);
}

TEST(CallTreeTest, UntracedCallsAndUnmatchedReturnsKeepTheStackBalanced) {
  CallTree t;
  t.Exit(1);  // returns of a call that began before the window
  t.Enter(kStep, 10);
  t.EnterUntraced();  // a C call the tracer cannot name
  t.Enter(kLeaf, 20);
  t.Exit(30);
  t.Exit(40);  // the untraced call
  t.Exit(50);
  EXPECT_EQ(t.depth(), 0u);
  EXPECT_EQ(t.stats().unmatched_returns, 1u);
  EXPECT_EQ(t.stats().untraced_calls, 1u);
  // The leaf's time is a child's time for step, across the untraced call.
  EXPECT_EQ(Find(t, {kStep})->self_ns, 40 - 10);
  EXPECT_NE(Find(t, {kStep, kLeaf}), nullptr);
}

TEST(CallTreeTest, AMutedCallRecordsNothingUnderItAndLeavesItsTimeToItsParent) {
  CallTree t;
  t.Enter(kStep, 10);
  t.EnterC(kLeaf, 20);  // the program's call of an op (a builtin)
  t.EnterMuted();       // the collector's code run for the op
  EXPECT_TRUE(t.muted());
  const uint32_t op_node = t.current_node();  // where what the op makes is placed
  t.Enter(kStep, 22);                         // Python inside it: counted, not recorded
  t.EnterC(kLeaf, 23);
  t.EnterUntraced();
  t.EnterGc(kLeaf, 24);
  t.ExitGc(25);
  t.Exit(26);
  t.ExitC(27);
  t.Exit(28);
  EXPECT_TRUE(t.muted());
  t.Exit(29);  // the muted call returns
  EXPECT_FALSE(t.muted());
  t.ExitC(40);
  t.Exit(50);
  EXPECT_EQ(t.depth(), 0u);
  const CallNode* leaf = Find(t, {kStep, kLeaf});
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(op_node, static_cast<uint32_t>(leaf - t.nodes().data()));
  EXPECT_EQ(leaf->self_ns, 40 - 20);  // the muted call's time is the op's
  EXPECT_EQ(Find(t, {kStep, kLeaf, kStep}), nullptr);
  EXPECT_EQ(t.nodes().size(), 4u);  // root, other, step, leaf
  EXPECT_EQ(t.stats().untraced_calls, 0u);
}

TEST(CallTreeTest, AMutedCallOpenAtTheWindowsEndClosesWithIt) {
  CallTree t;
  t.Enter(kStep, 10);
  t.EnterMuted();
  t.Enter(kLeaf, 12);
  t.CloseAll(30);
  EXPECT_FALSE(t.muted());
  EXPECT_EQ(t.depth(), 0u);
  EXPECT_EQ(Find(t, {kStep})->total_ns, 20);
}

TEST(CallTreeTest, CallsInProgressAtTheStartKeepTheStackRight) {
  // At arming the Python frames main -> step are in progress, and so are C calls between and
  // above them that cannot be listed (a builtin next() under step, the arming call itself).
  CallTree t;
  t.EnterInProgress(kMain, 0);
  t.EnterInProgress(kStep, 0);
  t.ExitC(5);  // the arming C call returns: ignored
  t.Enter(kLeaf, 10);
  t.Exit(20);
  t.ExitC(25);         // the builtin next() under step returns: ignored
  t.Exit(30);          // step returns
  t.Enter(kStep, 40);  // the next iteration's step: the same identity
  t.Enter(kLeaf, 50);
  t.Exit(60);
  t.Exit(70);
  EXPECT_EQ(t.depth(), 1u);
  EXPECT_EQ(Find(t, {kMain, kStep})->count, 2u);
  EXPECT_EQ(Find(t, {kMain, kStep, kLeaf})->count, 2u);
  EXPECT_EQ(t.stats().unmatched_returns, 2u);
}

TEST(CallTreeTest, LongCallsKeepTimedRecordsUpToTheCap) {
  CallTreeLimits limits;
  limits.long_call_ns = 100;
  limits.max_long_calls = 2;
  CallTree t(limits);
  for (int i = 0; i < 4; ++i) {
    t.Enter(kStep, i * 1000);
    t.Exit(i * 1000 + (i == 0 ? 50 : 500));
  }
  ASSERT_EQ(t.long_calls().size(), 2u);
  EXPECT_EQ(t.long_calls()[0].start_ns, 1000);
  EXPECT_EQ(t.stats().long_calls_dropped, 1u);
}

TEST(CallTreeTest, CloseAllEndsOpenCallsAtTheWindowEnd) {
  CallTree t;
  t.Enter(kMain, 0);
  t.Enter(kStep, 10);
  t.CloseAll(100);
  EXPECT_EQ(t.depth(), 0u);
  EXPECT_EQ(Find(t, {kMain})->total_ns, 100);
  EXPECT_EQ(Find(t, {kMain, kStep})->total_ns, 90);
}

TEST(WindowFileTest, JsonHoldsEveryNodeAndIteration) {
  PythonWindow w;
  w.pid = 7;
  w.tid = 8;
  w.start_ns = 100;
  w.end_ns = 900;
  w.names = {"", "<gc>", "a.py(1): \"step\""};
  w.markers = {{3, 100, 500}, {4, 500, 900}};
  w.tree.SetIteration(0);
  w.tree.Enter(2, 100);
  w.tree.Exit(300);
  const std::string json = PythonWindowJson(w);
  EXPECT_NE(json.find("\"schema\":\"perftracker.python_window/1\""), std::string::npos);
  EXPECT_NE(json.find("[[3,100,500],[4,500,900]]"), std::string::npos);
  EXPECT_NE(json.find("\"a.py(1): \\\"step\\\"\""), std::string::npos);
  EXPECT_NE(json.find("[0,2,0,1,200,200,200,200,40000,"), std::string::npos) << json;
  EXPECT_NE(json.find("[[0,1,200,200]]"), std::string::npos) << json;
}

TEST(CallTreeTest, ResyncClosesTheCallsAnotherTracerTookAndKeepsTheRealStack) {
  // main -> step (in progress) -> arm() -> start() -> <builtin install>: there another profile
  // function took the thread; it saw start() and install return, and arm() call chain(). The
  // real stack is main, step, arm, chain: the tree keeps main, step, arm, closes start and the
  // builtin, enters chain, and the returns that follow balance.
  constexpr uint32_t kArm = 5, kStart = 6, kInstall = 7, kChain = 8;
  CallTree t;
  t.SetIteration(0);
  t.EnterInProgress(kMain, 0);
  t.EnterInProgress(kStep, 0);
  t.Enter(kArm, 10);
  t.Enter(kStart, 20);
  t.EnterC(kInstall, 30);
  t.Resync({kMain, kStep, kArm, kChain}, 100);
  EXPECT_EQ(t.depth(), 4u);
  EXPECT_EQ(Find(t, {kMain, kStep, kArm, kStart, kInstall})->count, 1u);
  EXPECT_EQ(Find(t, {kMain, kStep, kArm, kStart})->total_ns, 80);
  EXPECT_EQ(t.current_node(), Find(t, {kMain, kStep, kArm, kChain}) - t.nodes().data());
  t.Exit(110);  // chain returns
  t.Exit(120);  // arm
  EXPECT_EQ(Find(t, {kMain, kStep, kArm})->total_ns, 110);
  EXPECT_EQ(t.current_node(), Find(t, {kMain, kStep}) - t.nodes().data());
  // A stack that shares nothing past main: all else closes.
  t.Enter(kLeaf, 130);
  t.Resync({kMain, kGc}, 140);
  EXPECT_EQ(t.depth(), 2u);
  EXPECT_EQ(Find(t, {kMain, kStep, kLeaf})->count, 1u);
}

}  // namespace
}  // namespace perftracker::worker
