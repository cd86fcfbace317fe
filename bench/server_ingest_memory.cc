// bench/server_ingest --rank-state: the server's per-rank iteration statistics (RankState,
// server/rank_state.h) at 100,000 ranks x 1,000,000 iterations, in this process, without a
// server: its peak RSS (getrusage) and the percentiles against the exact ones.
// Each rank gets 1,000 distinct iteration times (a lognormal around its own median; every 10th
// rank bimodal, 5% of its steps 3x slower) through RankState::AddStep, the call the server makes
// for each iteration of an agent's report, at steps 0, 1000, 2000, ... so that its chart series
// spans 1,000,000 steps as in the real run; then each of those times 999 times more as a count
// into the sketch (QuantileSketch::Add(v, n)) and into the rank's count and sum, so each rank
// holds 1,000,000 iterations. 10^11 single adds would take hours here; the sketch's memory does
// not depend on the count (base/quantile_sketch_test.cc: SizeIsFixedHoweverManyAdds).
#include "server_ingest_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "server/rank_state.h"

namespace perftracker::bench {
namespace {

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // kB on Linux
}

// Rank R's 1,000 distinct iteration times, in ms.
std::vector<double> RankTimes(int r, int distinct) {
  std::mt19937_64 rng(static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ull + 1);
  const double median = 80 + r % 41;  // 80-120 ms
  std::lognormal_distribution<double> ln(std::log(median), 0.1);
  std::bernoulli_distribution slow(r % 10 == 0 ? 0.05 : 0);
  std::vector<double> v(static_cast<size_t>(distinct));
  for (double& x : v) x = ln(rng) * (slow(rng) ? 3 : 1);
  return v;
}

}  // namespace

int RankStateMemory(int ranks, int64_t iterations) {
  constexpr int kDistinct = 1000;
  const int64_t repeat = std::max<int64_t>(iterations / kDistinct, 1);
  const auto t0 = std::chrono::steady_clock::now();
  const double rss0 = PeakRssMb();
  std::printf(
      "rank-state: %d ranks x %lld iterations (%d distinct times a rank through AddStep, each "
      "then counted %lld times more in one weighted add)\n",
      ranks, static_cast<long long>(kDistinct * repeat), kDistinct,
      static_cast<long long>(repeat - 1));
  std::map<int, server::RankState> state;  // as the server holds them
  for (int r = 0; r < ranks; ++r) {
    server::RankState& rs = state[r];
    rs.host = fmt::format("node-{}", r / 8);
    const std::vector<double> v = RankTimes(r, kDistinct);
    for (int i = 0; i < kDistinct; ++i) rs.AddStep(static_cast<int64_t>(i) * repeat, v[i]);
    for (double x : v) {
      rs.times.Add(x, static_cast<uint64_t>(repeat - 1));
      rs.count += repeat - 1;
      rs.sum_ms += x * static_cast<double>(repeat - 1);
    }
  }
  const double fed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t sketch_bytes = 0, sketch_max = 0;
  for (const auto& [r, rs] : state) {
    sketch_bytes += rs.times.bytes();
    sketch_max = std::max(sketch_max, rs.times.bytes());
  }
  // Every rank's p50 and p99 against the exact ones: the value of order floor(q x n) of its
  // times, each of its distinct times REPEAT times over.
  double worst = 0;
  int worst_rank = -1;
  std::vector<int> shown = {0, 1, 10, ranks / 2, ranks - 1};
  for (const auto& [r, rs] : state) {
    std::vector<double> v = RankTimes(r, kDistinct);
    std::sort(v.begin(), v.end());
    const diagnose::IterationStats s = rs.Stats();
    const int64_t n = kDistinct * repeat;
    const double p50 = v[static_cast<size_t>(n / 2 / repeat)];
    const double p99 = v[static_cast<size_t>(static_cast<int64_t>(0.99 * n) / repeat)];
    const double err = std::max(std::abs(s.p50_ms - p50) / p50, std::abs(s.p99_ms - p99) / p99);
    if (err > worst) {
      worst = err;
      worst_rank = r;
    }
    if (std::find(shown.begin(), shown.end(), r) != shown.end())
      std::printf(
          "  rank %6d: %lld iterations; p50 %.3f ms (exact %.3f, %+.3f%%), p99 %.3f ms (exact "
          "%.3f, %+.3f%%)\n",
          r, static_cast<long long>(s.count), s.p50_ms, p50, (s.p50_ms / p50 - 1) * 100, s.p99_ms,
          p99, (s.p99_ms / p99 - 1) * 100);
  }
  const double peak = PeakRssMb();
  std::printf(
      "rank-state: fed in %.1f s; sketches %.0f bytes a rank on average (%zu at most); series %zu "
      "points a rank\n",
      fed_s, static_cast<double>(sketch_bytes) / ranks, sketch_max,
      state.begin()->second.series_steps.size());
  std::printf(
      "rank-state: peak RSS %.0f MB (%.0f MB before the ranks; %.1f KB a rank); worst p50/p99 "
      "error %.3f%% (rank %d) over all %d ranks; done in %.1f s\n",
      peak, rss0, (peak - rss0) * 1024 / ranks, worst * 100, worst_rank, ranks,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  // The bars: under 2 GB, every percentile within the sketch's 1% (and a hair for rounding).
  const bool ok = peak < 2048 && worst <= QuantileSketch::kRelativeAccuracy * (1 + 1e-9);
  std::printf("rank-state: %s\n", ok ? "ok (under 2 GB, within 1%)" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace perftracker::bench
