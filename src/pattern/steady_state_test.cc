#include "pattern/steady_state.h"

#include <gtest/gtest.h>

namespace perftracker::pattern {
namespace {

using C = IterationClass;

TEST(SteadyStateTest, WarmupStepsBeforeTheSteadyLevelAreLeftOut) {
  // The ResNet trace of the shared set (ns_resolution): steps of 35, 72, 95.7, 95.6, 95.7 ms.
  EXPECT_EQ(ClassifyIterations({35.12, 72.08, 95.70, 95.55, 95.70}),
            (std::vector<C>{C::kWarmup, C::kWarmup, C::kSteady, C::kSteady, C::kSteady}));
}

TEST(SteadyStateTest, ACutOffLastStepIsPartial) {
  // The AMD MI250 trace: a step of 9.29 ms and a last one of 49 us where the trace ends.
  EXPECT_EQ(ClassifyIterations({9.29, 0.049}), (std::vector<C>{C::kSteady, C::kPartial}));
  EXPECT_EQ(ClassifyIterations({0.2, 10.1}), (std::vector<C>{C::kPartial, C::kSteady}));
  EXPECT_EQ(
      ClassifyIterations({30, 10, 10, 10, 10, 0.05}),
      (std::vector<C>{C::kWarmup, C::kSteady, C::kSteady, C::kSteady, C::kSteady, C::kPartial}));
}

TEST(SteadyStateTest, NoisyAndShortRunsKeepEveryIteration) {
  // 15% noise (a shared CPU host): no iteration is warm-up.
  EXPECT_EQ(ClassifyIterations({46, 38, 41, 52, 40, 44, 39, 47}), std::vector<C>(8, C::kSteady));
  EXPECT_EQ(ClassifyIterations({100}), std::vector<C>(1, C::kSteady));
  EXPECT_EQ(ClassifyIterations({}), std::vector<C>{});
  // Two iterations of different length: neither is far enough below the other to be partial.
  EXPECT_EQ(ClassifyIterations({10, 6}), std::vector<C>(2, C::kSteady));
  // A slow last iteration is not warm-up (only leading iterations are) and not partial.
  EXPECT_EQ(ClassifyIterations({10, 10, 10, 30}), std::vector<C>(4, C::kSteady));
}

TEST(SteadyStateTest, WarmupNeverTakesMoreThanHalf) {
  const auto c = ClassifyIterations({200, 190, 180, 10, 10, 10});
  EXPECT_EQ(
      c, (std::vector<C>{C::kWarmup, C::kWarmup, C::kWarmup, C::kSteady, C::kSteady, C::kSteady}));
  const auto d = ClassifyIterations({200, 190, 10, 10});
  EXPECT_EQ(d, (std::vector<C>{C::kWarmup, C::kWarmup, C::kSteady, C::kSteady}));
}

}  // namespace
}  // namespace perftracker::pattern
