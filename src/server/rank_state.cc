#include "server/rank_state.h"

#include <algorithm>

namespace perftracker::server {

void RankState::AddStep(int64_t step, double ms) {
  Add(ms);
  if (bucket_first >= 0 && step / stride != bucket_first / stride) CloseBucket();
  if (bucket_n == 0) bucket_first = step;
  bucket_sum += ms;
  ++bucket_n;
}

void RankState::CloseBucket() {
  if (bucket_n == 0) return;
  series_steps.push_back(bucket_first);
  series_ms.push_back(static_cast<float>(bucket_sum / bucket_n));
  bucket_sum = 0;
  bucket_n = 0;
  bucket_first = -1;
  if (series_steps.size() < kMaxSeriesPoints) return;
  // Full: merge neighbours and double the stride.
  size_t j = 0;
  for (size_t i = 0; i < series_steps.size(); i += 2, ++j) {
    series_steps[j] = series_steps[i];
    series_ms[j] = i + 1 < series_ms.size() ? (series_ms[i] + series_ms[i + 1]) / 2 : series_ms[i];
  }
  series_steps.resize(j);
  series_ms.resize(j);
  stride *= 2;
}

report::RunSeries RankState::Series(int rank) const {
  report::RunSeries s;
  s.rank = rank;
  s.steps = series_steps;
  s.ms = series_ms;
  if (bucket_n > 0) {
    s.steps.push_back(bucket_first);
    s.ms.push_back(static_cast<float>(bucket_sum / bucket_n));
  }
  return s;
}

void RankState::Add(double ms) {
  if (count == 0 || ms < min_ms) min_ms = ms;
  if (count == 0 || ms > max_ms) max_ms = ms;
  last_ms = ms;
  sum_ms += ms;
  ++count;
  if (samples.size() < kMaxSamples) {
    samples.push_back(static_cast<float>(ms));
  } else {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    uint64_t j = rng % static_cast<uint64_t>(count);
    if (j < kMaxSamples) samples[j] = static_cast<float>(ms);
  }
}

diagnose::IterationStats RankState::Stats() const {
  diagnose::IterationStats s;
  s.count = count;
  if (count == 0) return s;
  s.mean_ms = sum_ms / count;
  s.min_ms = min_ms;
  s.max_ms = max_ms;
  std::vector<float> v = samples;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v.empty()
               ? 0.0
               : static_cast<double>(v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]);
  };
  s.p50_ms = at(0.5);
  s.p99_ms = at(0.99);
  return s;
}

}  // namespace perftracker::server
