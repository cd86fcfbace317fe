#include "base/quantile_sketch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace perftracker {
namespace {

// Every quantile the server reports and a few more, in the sketch's definition: the value of
// order floor(q x n) of the sorted values.
void ExpectWithinAccuracy(const std::string& what, std::vector<double> values) {
  QuantileSketch s;
  for (double v : values) s.Add(v);
  std::sort(values.begin(), values.end());
  for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0}) {
    const double exact =
        values[std::min(values.size() - 1, static_cast<size_t>(q * values.size()))];
    // The bound itself, and a hair for the rounding of log() at a bucket's edge.
    EXPECT_NEAR(s.Quantile(q), exact, exact * QuantileSketch::kRelativeAccuracy * (1 + 1e-9))
        << what << " q=" << q;
  }
  EXPECT_EQ(s.count(), values.size());
}

TEST(QuantileSketchTest, QuantilesWithinOnePercentOfExact) {
  std::mt19937_64 rng(7);
  std::vector<double> uniform, lognormal, bimodal, constant(10000, 123.456);
  std::uniform_real_distribution<double> u(50, 150);
  std::lognormal_distribution<double> ln(std::log(100.0), 0.5);
  std::normal_distribution<double> fast(100, 3), slow(400, 10);
  std::bernoulli_distribution straggle(0.05);
  for (int i = 0; i < 100000; ++i) {
    uniform.push_back(u(rng));
    lognormal.push_back(ln(rng));
    bimodal.push_back(straggle(rng) ? slow(rng) : fast(rng));
  }
  ExpectWithinAccuracy("uniform", uniform);
  ExpectWithinAccuracy("lognormal", lognormal);
  ExpectWithinAccuracy("bimodal", bimodal);
  ExpectWithinAccuracy("constant", constant);
  // Six decades, microseconds to seconds of milliseconds.
  std::vector<double> wide;
  std::uniform_real_distribution<double> exponent(-3, 3);
  for (int i = 0; i < 100000; ++i) wide.push_back(std::pow(10, exponent(rng)));
  ExpectWithinAccuracy("log-uniform over six decades", wide);
}

TEST(QuantileSketchTest, SizeIsFixedHoweverManyAdds) {
  QuantileSketch few, many;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(50, 150);
  for (int i = 0; i < 1000; ++i) few.Add(u(rng));
  for (int i = 0; i < 5000000; ++i) many.Add(u(rng));
  // 50 to 150 is ln(3) / ln(1.01 / 0.99) = 55 buckets, after a thousand adds or five million.
  EXPECT_GE(few.buckets(), 54u);
  EXPECT_LE(many.buckets(), 56u);
  EXPECT_LE(many.bytes(), sizeof(QuantileSketch) + 56 * sizeof(uint64_t));
  // Counts, not copies: a million of one value is one bucket.
  QuantileSketch weighted;
  weighted.Add(42, 1000000);
  weighted.Add(42, 1000000);
  EXPECT_EQ(weighted.buckets(), 1u);
  EXPECT_EQ(weighted.count(), 2000000u);
  EXPECT_NEAR(weighted.Quantile(0.5), 42, 0.42);
}

TEST(QuantileSketchTest, AWiderSpreadFoldsItsLowestBuckets) {
  QuantileSketch s;
  // 1e-8 to 1e12: 20 decades, more than the bound spans.
  for (int e = -8; e <= 12; ++e)
    for (int i = 0; i < 100; ++i) s.Add(std::pow(10, e) * (1 + i / 100.0));
  EXPECT_EQ(s.buckets(), static_cast<size_t>(QuantileSketch::kMaxBuckets));
  EXPECT_LE(s.bytes(), sizeof(QuantileSketch) + QuantileSketch::kMaxBuckets * sizeof(uint64_t));
  EXPECT_EQ(s.count(), 2100u);
  // The high quantiles keep their accuracy; the lowest are read as the lowest bucket kept.
  EXPECT_NEAR(s.Quantile(1), 1.99e12, 1.99e12 * 0.01);
  EXPECT_NEAR(s.Quantile(0.96), 1.16e12, 1.16e12 * 0.01);  // order 2016: the 17th of 1e12
  EXPECT_GT(s.Quantile(0), 1e-8);
}

TEST(QuantileSketchTest, MergeEqualsAddingBoth) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> a_dist(std::log(10.0), 1), b_dist(std::log(1000.0), 2);
  QuantileSketch a, b, both;
  for (int i = 0; i < 50000; ++i) {
    const double x = a_dist(rng), y = b_dist(rng);
    a.Add(x);
    b.Add(y);
    both.Add(x);
    both.Add(y);
  }
  b.Add(0);  // a zero, counted apart
  both.Add(0);
  b.Add(1e-12);  // far below: folded
  both.Add(1e-12);
  b.Add(1e15);
  both.Add(1e15);
  QuantileSketch merged = a;
  merged.Merge(b);
  EXPECT_EQ(merged, both);
  QuantileSketch other_way = b;
  other_way.Merge(a);
  EXPECT_EQ(other_way, both);
  for (double q : {0.0, 0.5, 0.99, 1.0}) EXPECT_EQ(merged.Quantile(q), both.Quantile(q));
  QuantileSketch empty;
  empty.Merge(QuantileSketch());
  EXPECT_EQ(empty, QuantileSketch());
}

TEST(QuantileSketchTest, ZerosNegativesAndEmpty) {
  QuantileSketch s;
  EXPECT_EQ(s.Quantile(0.5), 0);
  EXPECT_EQ(s.count(), 0u);
  s.Add(0);
  s.Add(-5);
  s.Add(std::nan(""));
  s.Add(10);
  EXPECT_EQ(s.count(), 4u);
  EXPECT_EQ(s.Quantile(0.5), 0);  // three of four are counted as 0
  EXPECT_NEAR(s.Quantile(1), 10, 0.1);
  s.Add(INFINITY);  // counted with the largest value that has a bucket, not lost
  EXPECT_EQ(s.count(), 5u);
  EXPECT_GT(s.Quantile(1), 1e299);
}

}  // namespace
}  // namespace perftracker
