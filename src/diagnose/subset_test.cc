// The peer comparison's shared references and its cost: exact results with the references built
// once per row, and work that grows linearly with a group's size whatever values are missing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"
#include "diagnose/testing.h"

namespace perftracker::diagnose {
namespace {

using internal::ComparePeers;
using internal::MakePeerReference;
using internal::PeerComparison;
using internal::SortedSample;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The others of values[i], as the comparison used to collect them.
std::vector<double> Others(const std::vector<double>& v, size_t i) {
  std::vector<double> o;
  for (size_t k = 0; k < v.size(); ++k)
    if (k != i && !std::isnan(v[k])) o.push_back(v[k]);
  return o;
}

// Rows of random values with missing (NaN) entries and ties, of every size up to 40.
std::vector<std::vector<double>> RandomRows() {
  std::mt19937 rng(7);
  std::vector<std::vector<double>> rows;
  for (size_t n = 1; n <= 40; ++n) {
    for (int rep = 0; rep < 5; ++rep) {
      std::vector<double> v(n);
      for (double& x : v) {
        const int r = static_cast<int>(rng() % 20);
        x = r < 3 ? kNaN : 1000.0 * (r % 7) + (rep == 0 ? 0 : static_cast<double>(rng() % 5000));
      }
      rows.push_back(v);
    }
  }
  return rows;
}

TEST(SortedSampleTest, EveryoneButOneAsOverTheOthersThemselves) {
  SortedSample s({4, 1, kNaN, 3});
  EXPECT_EQ(s.MedianWithout(3), 2.5);
  EXPECT_EQ(s.MedianWithout(kNaN), 3);
  EXPECT_EQ(s.MinWithout(1), 3);
  EXPECT_EQ(s.MaxWithout(4), 3);
  SortedSample one({5});
  EXPECT_EQ(one.MedianWithout(5), 0);  // as Median of nothing
  EXPECT_EQ(one.MinWithout(5), std::numeric_limits<double>::infinity());
  EXPECT_EQ(one.MaxWithout(5), -std::numeric_limits<double>::infinity());
  for (const auto& v : RandomRows()) {
    SortedSample sorted(v);
    for (size_t i = 0; i < v.size(); ++i) {
      const std::vector<double> o = Others(v, i);
      EXPECT_EQ(sorted.MedianWithout(v[i]), Median(o));
      if (o.empty()) continue;
      EXPECT_EQ(sorted.MinWithout(v[i]), *std::min_element(o.begin(), o.end()));
      EXPECT_EQ(sorted.MaxWithout(v[i]), *std::max_element(o.begin(), o.end()));
    }
  }
}

// The shared reference changes no result: each rank's comparison is the same as with the
// reference built for it alone, and as among the known ranks only.
TEST(ComparePeersTest, SharedReferenceGivesTheSameComparison) {
  DiagnoseOptions o;
  for (const auto& v : RandomRows()) {
    const internal::PeerReference shared = MakePeerReference(v);
    for (size_t i = 0; i < v.size(); ++i) {
      const PeerComparison a = ComparePeers(v, i, 50000, o, &shared);
      const PeerComparison b = ComparePeers(v, i, 50000, o);
      EXPECT_EQ(a.reference, b.reference);
      EXPECT_EQ(a.excess, b.excess);
      EXPECT_EQ(a.high, b.high);
      EXPECT_EQ(a.low, b.low);
      if (std::isnan(v[i])) continue;
      // Among the known ranks only: the same as a row without the unknown ones.
      std::vector<double> known = Others(v, i);
      known.insert(known.begin(), v[i]);
      const PeerComparison c = ComparePeers(known, 0, 50000, o);
      EXPECT_EQ(a.reference, c.reference);
      EXPECT_EQ(a.high, c.high);
    }
  }
}

TEST(ComparePeersTest, UnknownRanksTakeNoPart) {
  DiagnoseOptions o;
  // Two known values among four: the two-rank rule, the other known value the reference.
  const std::vector<double> v = {10000, kNaN, 30000, kNaN};
  const PeerComparison c = ComparePeers(v, 2, 50000, o);
  EXPECT_EQ(c.reference, 10000);
  EXPECT_TRUE(c.high);
  EXPECT_FALSE(ComparePeers(v, 1, 50000, o).high);  // unknown: nothing to compare
  EXPECT_EQ(ComparePeers({kNaN, 5, kNaN}, 1, 50000, o).reference, 0);  // one known: none
}

// A job of N ranks in one role, a tenth of them without their Python tracer file (every Python
// function NaN on them), with spread between ranks and one straggler: the peer comparison's
// work at N and 4N.
struct Work {
  uint64_t elements = 0, references = 0;
  size_t findings = 0;
  int first_rank = -1;
};

Work DiagnoseOneRole(int n) {
  std::vector<pattern::RankSummary> ranks;
  const int straggler = n / 3;
  for (int r = 0; r < n; ++r) {
    const double jitter = 1.0 + 0.01 * static_cast<double>((r * 37) % 11 - 5) / 5.0;
    const double slow = r == straggler ? 1.5 : 1.0;
    std::vector<pattern::FunctionPattern> fns;
    for (int k = 0; k < 12; ++k)
      fns.push_back(
          Fn("aten::op" + std::to_string(k), FunctionClass::kCompute, slow * jitter * 4.0));
    for (int k = 0; k < 12; ++k)
      fns.push_back(Fn("model.py(" + std::to_string(k) + "): layer", FunctionClass::kPython,
                       jitter * 0.5, 1, trace::EventKind::kPythonFunction));
    auto coll = Fn("gloo:all_reduce", FunctionClass::kCollective,
                   r == straggler ? 2.0 : jitter * 2.0 + 24.0);
    coll.coll.op = "all_reduce";
    coll.coll.group = "dp";
    coll.coll.group_size = n;
    fns.push_back(coll);
    pattern::RankSummary s = Rank(r, n, std::move(fns), 80);
    if (r % 10 == 3) {
      s.missing_part = "python";
      std::erase_if(s.functions, [](const pattern::FunctionPattern& f) {
        return f.kind == trace::EventKind::kPythonFunction;
      });
    }
    ranks.push_back(std::move(s));
  }
  DiagnoseOptions o;
  o.threads = 1;  // every group on this thread, whose counters are read
  internal::PeerWork& work = internal::ThreadPeerWork();
  const internal::PeerWork before = work;
  const Diagnosis d = Diagnose(ranks, o);
  Work w;
  w.elements = work.elements - before.elements;
  w.references = work.references - before.references;
  w.findings = d.findings.size();
  if (!d.findings.empty() && !d.findings[0].ranks.empty()) w.first_rank = d.findings[0].ranks[0];
  return w;
}

TEST(PeerComparisonCostTest, LinearInTheGroupSizeWithMissingValues) {
  const int n = 400;
  const Work small = DiagnoseOneRole(n), large = DiagnoseOneRole(4 * n);
  // The straggler is found at both sizes: the counted work is the work that finds it.
  EXPECT_EQ(small.first_rank, n / 3);
  EXPECT_EQ(large.first_rank, 4 * n / 3);
  ASSERT_GT(small.elements, 0u);
  const double growth = static_cast<double>(large.elements) / static_cast<double>(small.elements);
  const double refs = static_cast<double>(large.references) / static_cast<double>(small.references);
  // Linear is 4x; one reference rebuilt per rank (the quadratic case) is 16x.
  EXPECT_LT(growth, 5.0) << small.elements << " -> " << large.elements << " elements";
  EXPECT_LT(refs, 1.5) << small.references << " -> " << large.references << " references";
  // References are built per (group, function), not per rank.
  EXPECT_LT(large.references, static_cast<uint64_t>(4 * n));
}

}  // namespace
}  // namespace perftracker::diagnose
