#include "worker/window_control.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "temp_dir.h"
#include "worker/tracer_clock.h"

namespace perftracker::worker {
namespace {

constexpr int64_t kMs = 1000000;
constexpr int64_t kS = 1000 * kMs;
constexpr WindowControl::ThreadId kTrainer = 1, kHelper = 2;

// The training thread as py/module.cc drives WindowControl: every event is a loader next()
// ("D", an iteration start once learned) or an optimizer step ("O"), half an iteration apart; an
// event's answer is the extension's EventEdge.
class Trainer {
 public:
  explicit Trainer(WindowControl* c, int64_t iteration_ns = 100 * kMs)
      : c_(c), half_(iteration_ns / 2) {}

  int Event(EventKind kind, WindowControl::ThreadId thread = kTrainer) {
    now_ += half_;
    // The armed tree is thread-local in the extension: only the armed thread passes it.
    CallTree* tree = tree_ && thread == armed_thread_ ? tree_.get() : nullptr;
    const EventDecision d = c_->OnEvent(kind, now_, thread, tree);
    if (d.action == WindowAction::kArm) {
      Arm(d.iteration, thread);
      return kArmedEdge;
    }
    if (d.action == WindowAction::kDisarm) Finish();
    if (c_->TakeEndEdge(thread)) return kEndedEdge;
    return d.torch_done ? kTorchDoneEdge : kNoEdge;
  }
  int Next(WindowControl::ThreadId thread = kTrainer) {
    return Event(EventKind::kLoaderNext, thread);
  }
  int Step(WindowControl::ThreadId thread = kTrainer) {
    return Event(EventKind::kOptimizerStep, thread);
  }
  // N whole iterations (D, O); the answers of all their events.
  std::vector<int> Iterations(int n) {
    std::vector<int> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(Next());
      out.push_back(Step());
    }
    return out;
  }
  // Enough iterations for the detector to learn "DO" (learn_repeats 10).
  void Learn() {
    Iterations(15);
    ASSERT_TRUE(c_->Snapshot().learned);
  }
  // The window ends outside an event (the profile callback at the time limit, stop_window()).
  void Finish() {
    window_ = PythonWindow();
    c_->FinishWindow(now_, &window_);
    window_.tree = std::move(*tree_);
    tree_.reset();
  }
  void Wait(int64_t ns) { now_ += ns; }

  int64_t now() const { return now_; }
  int64_t armed_at() const { return armed_at_; }
  CallTree* tree() { return tree_.get(); }
  const PythonWindow& window() const { return window_; }

 private:
  void Arm(int64_t iteration, WindowControl::ThreadId thread) {
    c_->PrepareArm(now_, iteration, thread);
    tree_ = std::make_unique<CallTree>();
    tree_->SetIteration(0);
    armed_thread_ = thread;
    armed_at_ = iteration;
    c_->CommitArm();
  }

  WindowControl* c_;
  int64_t half_;
  int64_t now_ = 0;
  std::unique_ptr<CallTree> tree_;
  WindowControl::ThreadId armed_thread_ = 0;
  int64_t armed_at_ = -1;
  PythonWindow window_;
};

WindowRequest Request(int64_t iterations, int64_t start = -1, double max_s = 20) {
  return {iterations, max_s, "/nowhere/w.json", start};
}

std::vector<News> Taken(WindowControl* c) {
  const std::deque<News> d = c->TakeNews();
  return {d.begin(), d.end()};
}

// A control installed with the defaults whose training thread has learned its iteration.
class LearnedWindowControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c.Install({});
    t.Learn();
  }
  WindowControl c;
  Trainer t{&c};
};

TEST_F(LearnedWindowControlTest, AWindowArmsAtTheFirstIterationStartAtOrAfterItsIteration) {
  const int64_t n = c.Snapshot().iterations + 5;
  ASSERT_TRUE(c.Request(Request(3, n)));
  for (int i = 0; i < 20 && !c.armed(); ++i) {
    const int next = t.Next();
    const int64_t at = c.Snapshot().iterations;
    if (at < n) {
      EXPECT_EQ(next, 0) << at;
      EXPECT_EQ(t.Step(), 0) << at;  // a step is no iteration start: never arms
    } else {
      EXPECT_EQ(next, 1);
      EXPECT_EQ(at, n);
    }
  }
  ASSERT_TRUE(c.armed());
  EXPECT_EQ(t.armed_at(), n);
}

TEST_F(LearnedWindowControlTest, AWindowForTheIterationInProgressArmsAtTheNextStart) {
  EXPECT_EQ(t.Next(), 0);  // iteration k starts
  const int64_t k = c.Snapshot().iterations;
  ASSERT_TRUE(c.Request(Request(2)));  // -1: from the iteration in progress
  EXPECT_EQ(t.Step(), 0);
  EXPECT_EQ(t.Next(), 1);
  EXPECT_EQ(t.armed_at(), k + 1);
}

TEST(WindowControlTest, ARequestBeforeLearningArmsOnceIterationsStart) {
  WindowControl c;
  c.Install({});
  Trainer t(&c);
  ASSERT_TRUE(c.Request(Request(2, 0)));
  const std::vector<int> got = t.Iterations(20);
  // One arming, on a loader next() (an even position) once the sequence was learned, and its
  // end two iterations later.
  std::vector<size_t> arms, ends;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == 1) arms.push_back(i);
    if (got[i] == 2) ends.push_back(i);
  }
  ASSERT_EQ(arms.size(), 1u);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(arms[0] % 2, 0u);
  EXPECT_GE(arms[0], 2u * 9);  // not before learn_repeats - 1 whole iterations were seen
  EXPECT_EQ(ends[0], arms[0] + 4);
}

TEST_F(LearnedWindowControlTest, TheWindowEndsAfterItsIterationCount) {
  ASSERT_TRUE(c.Request(Request(3)));
  ASSERT_EQ(t.Next(), 1);
  const int64_t n = t.armed_at();
  const uint32_t f = 7;
  for (int i = 0; i < 2; ++i) {
    // A call in each iteration: the tree counts it in the window's iteration i.
    t.tree()->Enter(f, t.now() + 1);
    t.tree()->Exit(t.now() + 2);
    EXPECT_EQ(t.Step(), 0);
    EXPECT_EQ(t.Next(), 0) << i;  // iterations n+1, n+2 start: still armed
    EXPECT_TRUE(c.armed());
  }
  EXPECT_EQ(t.Step(), 0);
  // Iteration n+3: three iterations done. The end is reported on this same event.
  EXPECT_EQ(t.Next(), 2);
  EXPECT_FALSE(c.armed());
  EXPECT_EQ(t.Step(), 0);
  EXPECT_EQ(t.Next(), 0);  // once
  const PythonWindow& w = t.window();
  EXPECT_EQ(w.path, "/nowhere/w.json");
  ASSERT_EQ(w.markers.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(w.markers[i].index, n + i);
  EXPECT_EQ(w.markers[0].end_ns, w.markers[1].start_ns);
  EXPECT_EQ(w.end_ns, w.markers[2].end_ns);  // ended at iteration n+3's start
  ASSERT_EQ(w.tree.nodes().size(), 3u);
  const std::vector<IterationCell>& cells = w.tree.nodes()[2].iterations;
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(cells[0].iteration, 0);
  EXPECT_EQ(cells[1].iteration, 1);
  EXPECT_EQ(c.windows_done(), 1u);
}

// Where each answer but 0 came, by event position (two events an iteration: D, O).
std::vector<std::pair<size_t, int>> Edges(const std::vector<int>& got) {
  std::vector<std::pair<size_t, int>> out;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != 0) out.emplace_back(i, got[i]);
  return out;
}

TEST_F(LearnedWindowControlTest, TorchProfilersPartEndsAfterItsIterations) {
  constexpr size_t k = window_defaults::kTorchProfilerIterations;
  constexpr size_t n = window_defaults::kIterations;
  static_assert(k < n);
  ASSERT_TRUE(c.Request(Request(n)));
  // Armed at the first loader next(); torch.profiler's part done at the start of iteration k
  // (k done), on the armed thread, once; the window's end at the start of iteration n.
  const std::vector<std::pair<size_t, int>> want = {{0, 1}, {2 * k, 3}, {2 * n, 2}};
  EXPECT_EQ(Edges(t.Iterations(n + 3)), want);
}

TEST_F(LearnedWindowControlTest, TorchProfilerRecordsAllOfAShortOrAMemoryWindow) {
  constexpr size_t k = window_defaults::kTorchProfilerIterations;
  // A window of k iterations ends where the part would: one edge, the end.
  ASSERT_TRUE(c.Request(Request(k)));
  const std::vector<std::pair<size_t, int>> short_window = {{0, 1}, {2 * k, 2}};
  EXPECT_EQ(Edges(t.Iterations(k + 2)), short_window);
  // A memory window's profiler places the allocations of all its iterations.
  WindowRequest memory = Request(2 * k);
  memory.sample_heap = true;
  ASSERT_TRUE(c.Request(memory));
  const std::vector<std::pair<size_t, int>> memory_window = {{0, 1}, {4 * k, 2}};
  EXPECT_EQ(Edges(t.Iterations(2 * k + 2)), memory_window);
}

TEST_F(LearnedWindowControlTest, TheWindowEndsAtItsTimeLimit) {
  ASSERT_TRUE(c.Request(Request(1000, -1, 0.5)));
  ASSERT_EQ(t.Next(), 1);
  const int64_t armed = t.now();
  EXPECT_FALSE(c.Expired(armed + kS / 2 - 1));
  EXPECT_TRUE(c.Expired(armed + kS / 2));
  // Events before the limit keep it armed; the first one past it ends it.
  EXPECT_EQ(t.Step(), 0);
  t.Wait(kS / 2 - 2 * 50 * kMs);
  EXPECT_EQ(t.Next(), 2);
  EXPECT_EQ(t.now(), armed + kS / 2);
  EXPECT_FALSE(c.armed());
}

TEST_F(LearnedWindowControlTest, AnEndOutsideAnEventIsReportedAtTheArmedThreadsNextEvent) {
  // The profile callback ends the window at its time limit (no event there): the next event of
  // the thread that armed it reports the end, once; another thread's events never do.
  ASSERT_TRUE(c.Request(Request(1000, -1, 0.5)));
  ASSERT_EQ(t.Next(), 1);
  ASSERT_TRUE(c.Expired(t.now() + kS / 2));
  t.Finish();
  EXPECT_FALSE(c.armed());
  EXPECT_EQ(t.Step(kHelper), 0);
  EXPECT_EQ(t.Next(), 2);
  EXPECT_EQ(t.Step(), 0);
}

TEST_F(LearnedWindowControlTest, OnlyTheArmedThreadEndsTheWindow) {
  ASSERT_TRUE(c.Request(Request(1)));
  ASSERT_EQ(t.Next(), 1);
  // Its iteration is done at the next start, but that start comes from another thread (whose
  // tracer is not on): the window stays until the armed thread's own event.
  EXPECT_EQ(t.Step(kHelper), 0);
  EXPECT_EQ(t.Next(kHelper), 0);
  EXPECT_TRUE(c.armed());
  EXPECT_EQ(t.Step(), 2);
  EXPECT_FALSE(c.armed());
}

TEST_F(LearnedWindowControlTest, ASecondRequestIsRefusedWhileOneIsPendingOrArmed) {
  ASSERT_TRUE(c.Request(Request(1)));
  EXPECT_FALSE(c.Request(Request(1)));  // pending
  ASSERT_EQ(t.Next(), 1);
  EXPECT_FALSE(c.Request(Request(1)));  // armed
  EXPECT_EQ(t.Step(), 0);
  EXPECT_EQ(t.Next(), 2);
  EXPECT_TRUE(c.Request(Request(1)));  // over
}

TEST(WindowControlTest, ARequestBeyondTheMostIsRefused) {
  WindowControl c;
  c.Install({});
  EXPECT_FALSE(c.Request(Request(window_defaults::kMostIterations + 1)));
  EXPECT_FALSE(c.Request(Request(1, -1, window_defaults::kMostSeconds * 2)));
  EXPECT_FALSE(c.Request(Request(1, -1, std::nan(""))));
  EXPECT_TRUE(
      c.Request(Request(window_defaults::kMostIterations, -1, window_defaults::kMostSeconds)));
}

TEST_F(LearnedWindowControlTest, StopDropsAPendingWindowAndEndsAnArmedOne) {
  ASSERT_TRUE(c.Request(Request(5)));
  c.Stop();
  for (int code : t.Iterations(3)) EXPECT_EQ(code, 0);
  EXPECT_FALSE(c.armed());

  ASSERT_TRUE(c.Request(Request(5)));  // a new request clears the stop
  ASSERT_EQ(t.Next(), 1);
  EXPECT_FALSE(c.Expired(t.now()));
  c.Stop();
  EXPECT_TRUE(c.Expired(t.now()));
  EXPECT_EQ(t.Step(), 2);  // the armed thread's next event ends it
}

TEST_F(LearnedWindowControlTest, APendingWindowArmsOnlyAfterThePreviousEndIsReported) {
  ASSERT_TRUE(c.Request(Request(1000, -1, 0.5)));
  ASSERT_EQ(t.Next(), 1);
  t.Finish();  // ended in the profile callback
  ASSERT_TRUE(c.Request(Request(2)));
  EXPECT_EQ(t.Step(), 2);  // a step: the end is reported, nothing can arm
  EXPECT_EQ(t.Next(), 1);
}

TEST_F(LearnedWindowControlTest, TheEndAndANewArmingFallOnSeparateIterationStarts) {
  ASSERT_TRUE(c.Request(Request(1000, -1, 0.5)));
  ASSERT_EQ(t.Next(), 1);
  EXPECT_EQ(t.Step(), 0);
  t.Finish();
  ASSERT_TRUE(c.Request(Request(2)));
  EXPECT_EQ(t.Next(), 2);  // an iteration start, but it reports the end first
  EXPECT_FALSE(c.armed());
  EXPECT_EQ(t.Step(), 0);
  EXPECT_EQ(t.Next(), 1);
}

TEST(WindowControlTest, AnArmedWindowAndHoldsExcludeIterationsFromTheStatistics) {
  WindowControl c;
  c.Install({});
  Trainer t(&c, 100 * kMs);
  t.Learn();
  t.Iterations(5);
  const double mean = c.Snapshot().mean_ns;
  ASSERT_GT(mean, 0);
  EXPECT_FALSE(c.Snapshot().excluded);
  ASSERT_TRUE(c.Request(Request(3)));
  ASSERT_EQ(t.Next(), 1);
  EXPECT_TRUE(c.Snapshot().excluded);
  t.Wait(kS);  // a slow iteration inside the window: not counted
  EXPECT_EQ(t.Step(), 0);
  t.Iterations(3);
  EXPECT_FALSE(c.armed());
  EXPECT_EQ(c.Snapshot().mean_ns, mean);
  EXPECT_FALSE(c.Snapshot().excluded);

  c.Hold(true);
  c.Hold(true);
  EXPECT_EQ(c.Snapshot().holds, 2);
  t.Wait(kS);
  t.Iterations(2);
  EXPECT_EQ(c.Snapshot().mean_ns, mean);
  c.Hold(false);
  EXPECT_TRUE(c.Snapshot().excluded);
  c.Hold(false);
  c.Hold(false);  // never below zero
  EXPECT_EQ(c.Snapshot().holds, 0);
  EXPECT_FALSE(c.Snapshot().excluded);
  t.Wait(kS);
  t.Iterations(2);
  EXPECT_GT(c.Snapshot().mean_ns, mean);
}

TEST_F(LearnedWindowControlTest, AHoldOutlastsTheWindow) {
  ASSERT_TRUE(c.Request(Request(1)));
  ASSERT_EQ(t.Next(), 1);
  c.Hold(true);  // Python's torch.profiler export after the window
  EXPECT_EQ(t.Step(), 0);
  EXPECT_EQ(t.Next(), 2);
  EXPECT_TRUE(c.Snapshot().excluded);
  c.Hold(false);
  EXPECT_FALSE(c.Snapshot().excluded);
}

TEST_F(LearnedWindowControlTest, TheDetectorsNewsIsQueuedInOrder) {
  std::vector<News> news = Taken(&c);
  ASSERT_FALSE(news.empty());
  EXPECT_EQ(news[0].kind, News::kLearned);
  EXPECT_EQ(news[0].text, "DO");
  t.Iterations(3);
  news = Taken(&c);
  ASSERT_EQ(news.size(), 3u);
  for (size_t i = 1; i < news.size(); ++i) {
    EXPECT_EQ(news[i].kind, News::kIter);
    EXPECT_EQ(news[i].index, news[i - 1].index + 1);
    EXPECT_EQ(news[i].a, news[i - 1].b);  // each starts where the previous ended
    EXPECT_EQ(news[i].b - news[i].a, 100 * kMs);
  }
  EXPECT_TRUE(Taken(&c).empty());
  t.Iterations(1);
  c.Install({});  // a new install forgets queued news
  EXPECT_TRUE(Taken(&c).empty());
}

// The watchdog's decision at a time the test passes: learned with iterations of ITERATION_NS,
// silent since the last event; CheckHang at silence S.
class HangTest : public ::testing::Test {
 protected:
  void Learn(int64_t iteration_ns) {
    c_.Install({});
    t_ = std::make_unique<Trainer>(&c_, iteration_ns);
    t_->Learn();
    t_->Iterations(5);
    Taken(&c_);
  }
  bool HangAfter(int64_t silence_ns) { return c_.CheckHang(t_->now() + silence_ns); }

  WindowControl c_;
  std::unique_ptr<Trainer> t_;
};

TEST_F(HangTest, ASilenceIsAHangPastTheFactorTimesTheMeanIteration) {
  Learn(1 * kS);  // 5 x 1 s is above the 2 s floor
  const auto threshold = static_cast<int64_t>(window_defaults::kHangFactor * kS);
  EXPECT_FALSE(HangAfter(threshold - 1));
  EXPECT_TRUE(HangAfter(threshold));
  EXPECT_FALSE(HangAfter(threshold + kS));  // once per silent gap
  const std::vector<News> news = Taken(&c_);
  ASSERT_EQ(news.size(), 1u);
  EXPECT_EQ(news[0].kind, News::kHang);
  EXPECT_EQ(news[0].a, t_->now() + threshold);
  EXPECT_EQ(news[0].b, kS);  // the mean iteration
  EXPECT_EQ(news[0].index, c_.Snapshot().iterations);
  EXPECT_EQ(c_.Snapshot().hangs, 1);
  t_->Iterations(2);  // the job moves again: a new gap may be a hang again
  EXPECT_TRUE(HangAfter(threshold));
}

TEST_F(HangTest, AShortIterationsSilenceIsAHangOnlyPastTheFloor) {
  Learn(10 * kMs);  // 5 x 10 ms = 50 ms: the 2 s floor decides
  const auto floor = static_cast<int64_t>(window_defaults::kHangMinSeconds * kS);
  EXPECT_FALSE(HangAfter(kS));
  EXPECT_FALSE(HangAfter(floor - 1));
  EXPECT_TRUE(HangAfter(floor));
}

TEST_F(HangTest, AnArmedWindowStretchesTheFactorButNotTheFloor) {
  Learn(1 * kS);
  ASSERT_TRUE(c_.Request(Request(1000, -1, window_defaults::kMostSeconds)));
  ASSERT_EQ(t_->Next(), 1);
  ASSERT_TRUE(c_.armed());
  t_->Wait(kS / 2);
  ASSERT_EQ(t_->Step(), 0);  // the last event before the silence
  const auto threshold = static_cast<int64_t>(kArmedHangSlack * window_defaults::kHangFactor * kS);
  EXPECT_FALSE(HangAfter(static_cast<int64_t>(window_defaults::kHangFactor * kS)));
  EXPECT_FALSE(HangAfter(threshold - 1));
  EXPECT_TRUE(HangAfter(threshold));
}

TEST_F(HangTest, AnArmedWindowOnShortIterationsKeepsTheFloor) {
  Learn(50 * kMs);  // 4 x 5 x 50 ms = 1 s, under the 2 s floor
  ASSERT_TRUE(c_.Request(Request(1000, -1, window_defaults::kMostSeconds)));
  ASSERT_EQ(t_->Next(), 1);
  const auto floor = static_cast<int64_t>(window_defaults::kHangMinSeconds * kS);
  EXPECT_FALSE(HangAfter(floor - 1));
  EXPECT_TRUE(HangAfter(floor));
}

TEST_F(HangTest, NoHangBeforeLearningOrWithoutADetector) {
  WindowControl none;
  EXPECT_FALSE(none.CheckHang(1000 * kS));
  c_.Install({});
  Trainer t(&c_);
  t.Iterations(3);  // not learned yet
  EXPECT_FALSE(c_.CheckHang(t.now() + 1000 * kS));
}

TEST(WindowControlWatchdogTest, TheWatchdogReportsAHangUnlessOff) {
  WindowControl c;
  DetectorConfig cfg;
  cfg.hang_min_s = 0;
  c.Install(cfg);
  // Iterations of 10 ms that ended a minute ago on the steady clock: silent since.
  Trainer t(&c, 10 * kMs);
  t.Wait(SteadyNowNs() - 60 * kS);
  t.Learn();
  t.Iterations(3);
  Taken(&c);
  std::atomic<bool> off{true};
  c.StartWatchdog(&off);
  std::this_thread::sleep_for(kWatchdogPeriod * 4);
  EXPECT_TRUE(Taken(&c).empty());  // the collector is off: no checks
  off = false;
  bool hang = false;
  for (int i = 0; i < 100 && !hang; ++i) {
    std::this_thread::sleep_for(kWatchdogPeriod);
    for (const News& n : Taken(&c)) hang |= n.kind == News::kHang;
  }
  EXPECT_TRUE(hang);
  c.StopWatchdog();
  c.StopWatchdog();  // twice is fine
}

TEST(WindowControlWriterTest, AFinishedWindowIsWrittenAndReported) {
  testing_support::TempDir dir("pt-window-control");
  WindowControl c;
  c.Install({});
  EXPECT_TRUE(c.WaitWriters(0));  // none
  const std::string path = dir.path() + "/rank-0.python.json";
  for (int i = 0; i < 2; ++i) {  // the second finds the file there: refused, never overwritten
    auto w = std::make_shared<PythonWindow>();
    w->path = path;
    c.StartWriter(std::move(w));
    ASSERT_TRUE(c.WaitWriters(30));
  }
  EXPECT_EQ(c.files_written(), 1u);
  EXPECT_EQ(c.write_errors(), 1u);
  const std::vector<News> news = Taken(&c);
  ASSERT_EQ(news.size(), 2u);
  EXPECT_EQ(news[0].kind, News::kWindowDone);
  EXPECT_EQ(news[0].text, path);
  EXPECT_EQ(news[1].kind, News::kWindowFailed);
  EXPECT_EQ(news[1].text, path);
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
}

TEST_F(LearnedWindowControlTest, ResetAfterForkForgetsTheWindow) {
  ASSERT_TRUE(c.Request(Request(5)));
  ASSERT_EQ(t.Next(), 1);
  t.Finish();                          // an end still to be reported
  ASSERT_TRUE(c.Request(Request(5)));  // and a request pending
  c.ResetAfterFork();
  EXPECT_FALSE(c.armed());
  EXPECT_FALSE(c.TakeEndEdge(kTrainer));
  EXPECT_EQ(t.Step(), 0);
  for (int code : t.Iterations(3)) EXPECT_EQ(code, 0);  // neither reported nor armed
  EXPECT_TRUE(c.Request(Request(5)));
}

TEST_F(LearnedWindowControlTest, AChildForkedWhileTheMutexIsBusyDoesNotDeadlock) {
  // The watchdog's check takes the mutex 20,000 times a second here: a fork catches it held in
  // some of the children. Each child resets and takes the mutex (Snapshot); one that hangs is
  // killed by its alarm and fails the test.
  ASSERT_TRUE(c.Request(Request(5)));
  ASSERT_EQ(t.Next(), 1);
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop) c.CheckHang(t.now());
  });
  int failures = 0;
  for (int i = 0; i < 20; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(5);
      c.ResetAfterFork();
      const bool ok = !c.armed() && c.Snapshot().learned && c.Request(Request(5));
      _exit(ok ? 0 : 3);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      ++failures;
      break;  // one stuck child says it (and each costs its alarm)
    }
  }
  stop = true;
  busy.join();
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace perftracker::worker
