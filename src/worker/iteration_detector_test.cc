#include "worker/iteration_detector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace perftracker::worker {
namespace {

constexpr int64_t kMs = 1000000;

// Feeds a letter pattern ("DO", "DDOO", "O", "M", ...) repeatedly; each event `step_ns` after the
// previous, so an iteration of P events lasts P * step_ns (from its start to the next start).
class Feeder {
 public:
  explicit Feeder(IterationDetector* d) : d_(d) {}
  // Returns the updates of the fed events that completed an iteration.
  std::vector<DetectorUpdate> Feed(const std::string& seq, int times, int64_t step_ns) {
    std::vector<DetectorUpdate> done;
    for (int t = 0; t < times; ++t) {
      for (char c : seq) {
        now_ += step_ns;
        const EventKind k = c == 'D'   ? EventKind::kLoaderNext
                            : c == 'O' ? EventKind::kOptimizerStep
                                       : EventKind::kMarker;
        DetectorUpdate u = d_->OnEvent(k, now_);
        learned_ |= u.learned;
        relearned_ |= u.relearning;
        if (u.slowdown) slowdowns_.push_back(u.iteration.index);
        if (u.iteration_done) done.push_back(u);
        if (u.started) started_.push_back(u.started_index);
      }
    }
    return done;
  }
  int64_t now() const { return now_; }
  bool learned_ = false;
  bool relearned_ = false;
  std::vector<int64_t> slowdowns_;  // iteration index of each slowdown
  std::vector<int64_t> started_;    // the number of each iteration that started

 private:
  IterationDetector* d_;
  int64_t now_ = 0;
};

TEST(DetectorConfigTest, Validates) {
  EXPECT_TRUE(DetectorConfig{}.Validate().ok());
  DetectorConfig c;
  c.window = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.hang_factor = 0.5;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.learn_repeats = 1;
  EXPECT_FALSE(c.Validate().ok());
}

TEST(IterationDetectorTest, LearnsLoaderOptimizerAfterTenRepeats) {
  IterationDetector d;
  Feeder f(&d);
  f.Feed("DO", 9, kMs);
  EXPECT_FALSE(d.learned());
  f.Feed("DO", 1, kMs);
  EXPECT_TRUE(d.learned());
  EXPECT_EQ(d.PatternString(), "DO");
  // The first start after learning opens an iteration; each later one completes the previous.
  auto done = f.Feed("DO", 5, kMs);
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(done[0].iteration.duration_ns(), 2 * kMs);  // from one next() to the next
  EXPECT_EQ(done[1].iteration.start_ns - done[0].iteration.start_ns, 2 * kMs);
  EXPECT_TRUE(done[0].iteration.clean);
  // Numbered by the steps before it: 10 steps went by before the first start after learning.
  EXPECT_EQ(done[0].iteration.index, 10);
  EXPECT_EQ(done[3].iteration.index, 13);
  EXPECT_EQ(d.iterations(), 14);
}

TEST(IterationDetectorTest, LearnsRotatedStart) {
  // The stream starts with an optimizer step (the detector was installed mid-iteration).
  IterationDetector d;
  Feeder f(&d);
  f.Feed("O", 1, kMs);
  f.Feed("DDOO", 12, kMs);
  ASSERT_TRUE(d.learned());
  EXPECT_EQ(d.PatternString(), "DDOO");
  auto done = f.Feed("DDOO", 3, kMs);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].iteration.duration_ns(), 4 * kMs);
}

TEST(IterationDetectorTest, LearnsPipelinePattern) {
  IterationDetector d;
  Feeder f(&d);
  f.Feed("DOODOO", 10, kMs);  // period 3 (D O O) repeats 20 times
  ASSERT_TRUE(d.learned());
  EXPECT_EQ(d.PatternString(), "DOO");

  IterationDetector d2;
  Feeder f2(&d2);
  f2.Feed("DDDOOO", 12, kMs);  // 1F1B-like: three micro-batches, then three steps
  ASSERT_TRUE(d2.learned());
  EXPECT_EQ(d2.PatternString(), "DDDOOO");

  IterationDetector d3;
  Feeder f3(&d3);
  f3.Feed("DODOO", 12, kMs);  // interleaved: still one iteration of five events
  ASSERT_TRUE(d3.learned());
  EXPECT_EQ(d3.pattern().size(), 5u);
  auto done = f3.Feed("DODOO", 4, kMs);
  EXPECT_EQ(done.size(), 4u);
}

TEST(IterationDetectorTest, LearnsStepsOnlyPipelineStage) {
  // A pipeline stage that receives activations: no DataLoader, one optimizer step per iteration.
  IterationDetector d;
  Feeder f(&d);
  f.Feed("O", 9, 10 * kMs);
  EXPECT_FALSE(d.learned());
  f.Feed("O", 1, 10 * kMs);
  ASSERT_TRUE(d.learned());
  EXPECT_EQ(d.PatternString(), "O");
  auto done = f.Feed("O", 5, 10 * kMs);
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(done[0].iteration.duration_ns(), 10 * kMs);
  EXPECT_EQ(done[0].iteration.index, 11);  // began at the 11th step
  EXPECT_TRUE(done[0].iteration.clean);
}

TEST(IterationDetectorTest, RolesNumberTheSameStepAlike) {
  // Stage 0 reads data (D O), stage 1 only steps (O): the iteration that begins after step k is
  // number k on both, although they learned at different events.
  IterationDetector s0, s1;
  std::vector<int64_t> n0, n1;
  for (int k = 1; k <= 40; ++k) {
    const int64_t t = k * 10 * kMs;
    DetectorUpdate u = s0.OnEvent(EventKind::kLoaderNext, t);
    if (u.started) n0.push_back(u.started_index);
    s0.OnEvent(EventKind::kOptimizerStep, t + 8 * kMs);
    u = s1.OnEvent(EventKind::kOptimizerStep, t + 8 * kMs);
    if (u.started) n1.push_back(u.started_index);
  }
  ASSERT_TRUE(s0.learned() && s1.learned());
  ASSERT_FALSE(n0.empty());
  ASSERT_FALSE(n1.empty());
  // s0's start at step k's next() follows k-1 steps; s1's start is step k itself.
  EXPECT_EQ(n0.back(), 39);
  EXPECT_EQ(n1.back(), 40);
  // The window that starts at number 30 opens right after step 30 on both: s0 at its next
  // next(), s1 at the step.
  EXPECT_NE(std::find(n0.begin(), n0.end(), 30), n0.end());
  EXPECT_NE(std::find(n1.begin(), n1.end(), 30), n1.end());
}

TEST(IterationDetectorTest, LoaderOnlyNeedsTheWholeHistory) {
  // Gradient accumulation gives long runs of batches before a step: batches alone are an
  // iteration (an evaluation loop) only once the whole history holds nothing else.
  IterationDetector d;
  Feeder f(&d);
  f.Feed("D", 500, kMs);
  EXPECT_FALSE(d.learned());
  f.Feed("D", 140, kMs);
  ASSERT_TRUE(d.learned());
  EXPECT_EQ(d.PatternString(), "D");

  IterationDetector acc;
  Feeder fa(&acc);
  fa.Feed("DDDDDDDDDDDDDDDDO", 12, kMs);  // 16 micro-batches per step
  ASSERT_TRUE(acc.learned());
  EXPECT_EQ(acc.pattern().size(), 17u);
}

TEST(IterationDetectorTest, MarkersTakeOver) {
  // A loop that calls perftracker.step(): markers alone delimit iterations from then on, whatever
  // else the loop does (here an evaluation DataLoader whose batch count varies).
  IterationDetector d;
  Feeder f(&d);
  f.Feed("DO", 15, kMs);
  ASSERT_EQ(d.PatternString(), "DO");
  for (int i = 0; i < 20; ++i) f.Feed(i % 2 ? "DDDM" : "DDM", 1, kMs);
  ASSERT_TRUE(d.learned());
  EXPECT_EQ(d.PatternString(), "M");
  EXPECT_EQ(d.relearn_count(), 1);
  const int64_t unmatched = d.unmatched();  // from the "DO" phase, before the first marker
  auto done = f.Feed("DDM", 3, kMs);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[1].iteration.duration_ns(), 3 * kMs);
  EXPECT_TRUE(done[1].iteration.clean);  // loader events are not unmatched: they do not count
  EXPECT_EQ(d.unmatched(), unmatched);
}

TEST(IterationDetectorTest, WorkAfterTheStepBelongsToTheIteration) {
  // 10 ms of training (next() to step()), then 90 ms of logging and evaluation before the next
  // next(): the iteration is 100 ms, and a silence of 90 ms after each step is no hang (without
  // the floor: the factor is what is checked).
  DetectorConfig c;
  c.hang_min_s = 0;
  IterationDetector d(c);
  int64_t t = 0;
  for (int i = 0; i < 30; ++i) {
    d.OnEvent(EventKind::kLoaderNext, t);
    d.OnEvent(EventKind::kOptimizerStep, t + 10 * kMs);
    EXPECT_FALSE(d.CheckHang(t + 99 * kMs)) << i;
    t += 100 * kMs;
  }
  EXPECT_DOUBLE_EQ(d.mean_ns(), 100.0 * kMs);
  EXPECT_EQ(d.hang_count(), 0);
}

TEST(IterationDetectorTest, NoiseBeforeAndDuringTracking) {
  IterationDetector d;
  Feeder f(&d);
  f.Feed("DDODOOD", 1, kMs);  // warm-up noise
  f.Feed("DO", 10, kMs);
  ASSERT_TRUE(d.learned());
  EXPECT_EQ(d.PatternString(), "DO");
  // An extra loader next (an evaluation batch) every 10 iterations: iterations keep coming, the
  // noisy ones are marked, and sporadic noise never triggers re-learning.
  int clean = 0, dirty = 0;
  for (int i = 0; i < 300; ++i) {
    for (const auto& u : f.Feed(i % 10 == 0 ? "DDO" : "DO", 1, kMs)) {
      (u.iteration.clean ? clean : dirty)++;
    }
  }
  EXPECT_EQ(clean + dirty, 299);  // the first start after learning only opens an iteration
  EXPECT_EQ(dirty, 30);
  EXPECT_EQ(d.unmatched(), 30);
  EXPECT_FALSE(f.relearned_);
  EXPECT_EQ(d.relearn_count(), 0);
}

TEST(IterationDetectorTest, NoSlowdownOnStableRunWithJitter) {
  IterationDetector d;
  Feeder f(&d);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> jitter(-kMs / 50, kMs / 50);  // +-2%
  for (int i = 0; i < 1000; ++i) {
    f.Feed("D", 1, kMs / 10);
    f.Feed("O", 1, 10 * kMs + jitter(rng));
  }
  EXPECT_TRUE(d.learned());
  EXPECT_GT(d.iterations(), 900);
  EXPECT_TRUE(f.slowdowns_.empty());
  EXPECT_EQ(d.slowdown_count(), 0);
}

TEST(IterationDetectorTest, SlowdownFiresAtTheRightIteration) {
  DetectorConfig c;  // defaults: warm-up 10, reference 50, 5%
  IterationDetector d(c);
  Feeder f(&d);
  f.Feed("DO", 10, 10 * kMs);  // learned on the 10th repeat
  ASSERT_TRUE(d.learned());
  // 99 iterations of 20 ms (next() to next()), numbered 10 to 108: 10 warm-up, 50 reference, 39
  // more.
  f.Feed("DO", 100, 10 * kMs);
  ASSERT_EQ(d.iterations(), 109);
  EXPECT_DOUBLE_EQ(d.shift().reference_ns(), 20.0 * kMs);
  // No noise: the threshold is the floor, 0.6 x 5%.
  EXPECT_NEAR(d.shift().threshold_ns(), 20.6 * kMs, 1e3);
  // From iteration 109 on, slower (109 half, then 40 ms). The median of the last 20 passes the
  // threshold with the 10th slow one (iteration 118), and must stay above for 5 iterations and
  // 2 s (kSlowdownSustainSeconds): 50 iterations of 40 ms, 118 to 167: it fires at 167.
  f.Feed("DO", 100, 20 * kMs);
  ASSERT_EQ(f.slowdowns_.size(), 1u);  // fires once, not once per slow iteration
  EXPECT_EQ(f.slowdowns_[0], 167);
}

TEST(IterationDetectorTest, SlowdownRearmsAfterRecovery) {
  DetectorConfig c;
  c.warmup_iterations = 0;
  c.reference_iterations = 10;
  IterationDetector d(c);
  Feeder f(&d);
  // Slow phases of 100 iterations of 40 ms: 4 s, beyond the 2 s a slowdown must last; the
  // recovery between them outlasts the long median (80 iterations) too.
  f.Feed("DO", 40, 10 * kMs);
  f.Feed("DO", 100, 20 * kMs);
  f.Feed("DO", 100, 10 * kMs);
  f.Feed("DO", 100, 20 * kMs);
  EXPECT_EQ(d.slowdown_count(), 2);
}

TEST(IterationDetectorTest, WindowIterationsDoNotFeedTheTrigger) {
  DetectorConfig c;
  IterationDetector d(c);
  Feeder f(&d);
  f.Feed("DO", 80, 10 * kMs);
  d.SetExcluded(true);  // a traced window: slower by the tracer's own cost
  f.Feed("DO", 30, 20 * kMs);
  d.SetExcluded(false);
  f.Feed("DO", 60, 10 * kMs);  // the first is half slow; the last 50 (the mean's) are 20 ms
  EXPECT_EQ(d.slowdown_count(), 0);
  EXPECT_DOUBLE_EQ(d.mean_ns(), 20.0 * kMs);
}

TEST(IterationDetectorTest, HangAfterFiveMeanIterations) {
  DetectorConfig c;
  c.hang_min_s = 0;  // the factor alone
  IterationDetector d(c);
  Feeder f(&d);
  f.Feed("DO", 5, 10 * kMs);
  EXPECT_FALSE(d.CheckHang(f.now() + 1000 * kMs));  // not learned yet: never a hang
  f.Feed("DO", 20, 10 * kMs);
  ASSERT_TRUE(d.learned());
  EXPECT_DOUBLE_EQ(d.mean_ns(), 20.0 * kMs);  // next() to next()
  EXPECT_FALSE(d.CheckHang(f.now() + 99 * kMs));
  EXPECT_TRUE(d.CheckHang(f.now() + 100 * kMs));
  EXPECT_FALSE(d.CheckHang(f.now() + 110 * kMs));  // once per silent gap
  EXPECT_EQ(d.hang_count(), 1);
  f.Feed("DO", 1, 10 * kMs);
  EXPECT_TRUE(d.CheckHang(f.now() + 200 * kMs));
  EXPECT_EQ(d.hang_count(), 2);
}

// The H200's 10 ms steps had 50 ms hiccups every ~75 iterations: no hang below the floor.
TEST(IterationDetectorTest, AHangLastsTheFloorAtLeast) {
  IterationDetector fast;  // the defaults: 5x the mean, 2 s at least
  Feeder f(&fast);
  f.Feed("DO", 25, 10 * kMs);
  ASSERT_TRUE(fast.learned());
  EXPECT_FALSE(fast.CheckHang(f.now() + 100 * kMs));  // 5x the 20 ms mean: a hiccup
  EXPECT_FALSE(fast.CheckHang(f.now() + 1999 * kMs));
  EXPECT_TRUE(fast.CheckHang(f.now() + 2000 * kMs));
  // A slow step: the factor, not the floor.
  IterationDetector slow;
  Feeder g(&slow);
  g.Feed("DO", 25, 500 * kMs);
  EXPECT_FALSE(slow.CheckHang(g.now() + 4999 * kMs));
  EXPECT_TRUE(slow.CheckHang(g.now() + 5000 * kMs));
  DetectorConfig bad;
  bad.hang_min_s = -1;
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(IterationDetectorTest, RelearnsAfterPatternChange) {
  IterationDetector d;
  Feeder f(&d);
  f.Feed("DO", 30, kMs);
  ASSERT_EQ(d.PatternString(), "DO");
  // Gradient accumulation switched on: D D O O. Two unmatched events per repeat (the second D
  // and the second O), no clean iteration any more: after 200 unmatched events the detector
  // starts over and learns DDOO.
  f.Feed("DDOO", 99, kMs);
  EXPECT_EQ(d.unmatched(), 198);
  EXPECT_FALSE(f.relearned_);
  f.Feed("DDOO", 1, kMs);
  EXPECT_TRUE(f.relearned_);
  EXPECT_EQ(d.relearn_count(), 1);
  f.Feed("DDOO", 11, kMs);
  ASSERT_TRUE(d.learned());
  EXPECT_EQ(d.PatternString(), "DDOO");
  auto done = f.Feed("DDOO", 3, kMs);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_TRUE(done[0].iteration.clean);
  // The number went on across the relearn (it counts steps, and never goes back): a rank whose
  // number restarted at 0 would never reach the start iteration the server picks from every
  // rank's latest.
  EXPECT_GT(done[0].iteration.index, 28 + 11);
  EXPECT_EQ(done[1].iteration.index, done[0].iteration.index + 1);
}

TEST(IterationDetectorTest, ConfigurableNumbers) {
  DetectorConfig c;
  c.learn_repeats = 3;
  c.relearn_after = 5;
  IterationDetector d(c);
  Feeder f(&d);
  f.Feed("DO", 3, kMs);
  EXPECT_TRUE(d.learned());
  f.Feed("DDO", 5, kMs);
  EXPECT_EQ(d.relearn_count(), 1);
}

}  // namespace
}  // namespace perftracker::worker
