#include "base/python_window_format.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace perftracker::python_window {
namespace {

TEST(PythonWindowFormat, EveryDurationFallsInTheBucketWhoseEdgesHoldIt) {
  EXPECT_EQ(HistogramBucket(0), 0);
  EXPECT_EQ(HistogramBucket(3), 3);
  EXPECT_EQ(HistogramBucket(5), 9);
  EXPECT_EQ(HistogramLowerEdge(9), 5);
  EXPECT_EQ(HistogramLowerEdge(13), 10);
  EXPECT_EQ(HistogramBucket(1024), 40);  // four steps per octave
  EXPECT_EQ(HistogramBucket(1279), 40);
  EXPECT_EQ(HistogramBucket(1280), 41);
  EXPECT_EQ(HistogramBucket(2047), 43);
  for (int64_t v : {int64_t{4}, int64_t{7}, int64_t{8}, int64_t{100}, int64_t{1000},
                    int64_t{123456}, int64_t{1} << 40, (int64_t{1} << 62) + 12345}) {
    const int b = HistogramBucket(v);
    EXPECT_LE(HistogramLowerEdge(b), static_cast<double>(v)) << v;
    EXPECT_GT(HistogramLowerEdge(b + 1), static_cast<double>(v)) << v;
    EXPECT_LT(b, static_cast<int>(kMaxHistogramEnd));
  }
  EXPECT_LE(HistogramBucket(INT64_MAX), kMaxHistogramOffset);
}

TEST(PythonWindowFormat, RecognisesTheFileByItsFirstBytes) {
  EXPECT_TRUE(LooksLikePythonWindow("{\"schema\":\"perftracker.python_window/1\",\"pid\":1"));
  EXPECT_TRUE(LooksLikePythonWindow("\n {\"schema\":\"perftracker.python_window/2\""));
  EXPECT_FALSE(LooksLikePythonWindow("{\"traceEvents\":[]}"));
  EXPECT_FALSE(LooksLikePythonWindow("{\"schema\":\"perftracker.summary/1\"}"));
  EXPECT_FALSE(LooksLikePythonWindow(""));
}

}  // namespace
}  // namespace perftracker::python_window
