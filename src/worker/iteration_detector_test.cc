#include "worker/iteration_detector.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace perftracker::worker {
namespace {

constexpr int64_t kMs = 1000000;

// Feeds a letter pattern ("DO", "DDOO", ...) repeatedly; each event `step_ns` after the previous,
// so an iteration of P events lasts (P - 1) * step_ns plus the gap before the next one.
class Feeder {
 public:
  explicit Feeder(IterationDetector* d) : d_(d) {}
  // Returns the updates of the fed events that completed an iteration.
  std::vector<DetectorUpdate> Feed(const std::string& seq, int times, int64_t step_ns) {
    std::vector<DetectorUpdate> done;
    for (int t = 0; t < times; ++t) {
      for (char c : seq) {
        now_ += step_ns;
        DetectorUpdate u =
            d_->OnEvent(c == 'D' ? EventKind::kLoaderNext : EventKind::kOptimizerStep, now_);
        learned_ |= u.learned;
        relearned_ |= u.relearning;
        if (u.slowdown) slowdowns_.push_back(d_->iterations() - 1);
        if (u.iteration_done) done.push_back(u);
      }
    }
    return done;
  }
  int64_t now() const { return now_; }
  bool learned_ = false;
  bool relearned_ = false;
  std::vector<int64_t> slowdowns_;  // iteration index of each slowdown

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
  auto done = f.Feed("DO", 5, kMs);
  ASSERT_EQ(done.size(), 5u);
  EXPECT_EQ(done[0].iteration.duration_ns(), kMs);
  EXPECT_EQ(done[1].iteration.start_ns - done[0].iteration.start_ns, 2 * kMs);
  EXPECT_TRUE(done[0].iteration.clean);
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
  EXPECT_EQ(done[0].iteration.duration_ns(), 3 * kMs);
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

TEST(IterationDetectorTest, NoLearningFromOneKindOnly) {
  IterationDetector d;
  Feeder f(&d);
  f.Feed("D", 500, kMs);
  EXPECT_FALSE(d.learned());
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
  EXPECT_EQ(clean + dirty, 300);
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
  f.Feed("DO", 100, 10 * kMs);  // 10 warm-up + 50 reference iterations of 10 ms, and 40 more
  ASSERT_EQ(d.iterations(), 100);
  EXPECT_DOUBLE_EQ(d.shift().reference_ns(), 10.0 * kMs);
  // No noise: the threshold is the floor, 0.6 x 5%.
  EXPECT_NEAR(d.shift().threshold_ns(), 10.3 * kMs, 1e3);
  // From iteration 100 on, 20 ms. The median of the last 20 passes 10.3 ms with the 10th slow
  // one (iteration 109), and must stay above for 5 iterations: it fires at iteration 113.
  f.Feed("DO", 50, 20 * kMs);
  ASSERT_EQ(f.slowdowns_.size(), 1u);  // fires once, not once per slow iteration
  EXPECT_EQ(f.slowdowns_[0], 113);
}

TEST(IterationDetectorTest, SlowdownRearmsAfterRecovery) {
  DetectorConfig c;
  c.warmup_iterations = 0;
  c.reference_iterations = 10;
  IterationDetector d(c);
  Feeder f(&d);
  f.Feed("DO", 40, 10 * kMs);
  f.Feed("DO", 20, 20 * kMs);
  f.Feed("DO", 20, 10 * kMs);
  f.Feed("DO", 20, 20 * kMs);
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
  f.Feed("DO", 30, 10 * kMs);
  EXPECT_EQ(d.slowdown_count(), 0);
  EXPECT_DOUBLE_EQ(d.mean_ns(), 10.0 * kMs);
}

TEST(IterationDetectorTest, HangAfterFiveMeanIterations) {
  IterationDetector d;
  Feeder f(&d);
  f.Feed("DO", 5, 10 * kMs);
  EXPECT_FALSE(d.CheckHang(f.now() + 1000 * kMs));  // not learned yet: never a hang
  f.Feed("DO", 20, 10 * kMs);
  ASSERT_TRUE(d.learned());
  EXPECT_DOUBLE_EQ(d.mean_ns(), 10.0 * kMs);
  EXPECT_FALSE(d.CheckHang(f.now() + 49 * kMs));
  EXPECT_TRUE(d.CheckHang(f.now() + 50 * kMs));
  EXPECT_FALSE(d.CheckHang(f.now() + 60 * kMs));  // once per silent gap
  EXPECT_EQ(d.hang_count(), 1);
  f.Feed("DO", 1, 10 * kMs);
  EXPECT_TRUE(d.CheckHang(f.now() + 100 * kMs));
  EXPECT_EQ(d.hang_count(), 2);
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
  // The index went on across the relearn: 28 DO iterations before the change (30 fed, the
  // first learned, its successor skipped), then the DDOO iterations that passed while the
  // detector did not match and while it learned. A rank whose index restarted at 0 would never
  // reach the start iteration the server picks from every rank's latest.
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
