// Interval arithmetic on the GPU / CPU timelines: unions, intersections and the covered length
// of a window, used for the busy / idle / overlap breakdown.
#ifndef PERFTRACKER_PATTERN_INTERVALS_H_
#define PERFTRACKER_PATTERN_INTERVALS_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace perftracker::pattern {

struct Interval {
  double begin = 0;
  double end = 0;
};

// Sorts V by LESS where V is made of a few sorted runs (a trace lists a thread's events in one
// run per flush of the profiler's buffers): merges the runs pairwise, O(n log runs), instead of
// sorting from scratch; with many runs, sorts everything. Runs [1 3 5 | 2 4 | 0] -> [0 1 2 3 4 5].
template <typename T, typename Less>
void SortRuns(std::vector<T>* v, Less less) {
  std::vector<size_t> runs = {0};  // run starts, then the end
  for (size_t i = 1; i < v->size(); ++i) {
    if (less((*v)[i], (*v)[i - 1])) runs.push_back(i);
  }
  runs.push_back(v->size());
  if (runs.size() - 1 > 64) {
    std::sort(v->begin(), v->end(), less);
    return;
  }
  const auto at = [&](size_t k) { return v->begin() + static_cast<std::ptrdiff_t>(k); };
  while (runs.size() > 2) {
    std::vector<size_t> merged;
    size_t r = 0;
    for (; r + 2 < runs.size(); r += 2) {
      std::inplace_merge(at(runs[r]), at(runs[r + 1]), at(runs[r + 2]), less);
      merged.push_back(runs[r]);
    }
    if (r + 1 < runs.size()) merged.push_back(runs[r]);  // an odd run out
    merged.push_back(v->size());
    runs.swap(merged);
  }
}

// Sorts and merges in place: the result is sorted and disjoint.
inline void MergeIntervals(std::vector<Interval>* v) {
  std::sort(v->begin(), v->end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  size_t out = 0;
  for (const Interval& iv : *v) {
    if (!(iv.end > iv.begin)) continue;
    if (out > 0 && iv.begin <= (*v)[out - 1].end) {
      (*v)[out - 1].end = std::max((*v)[out - 1].end, iv.end);
    } else {
      (*v)[out++] = iv;
    }
  }
  v->resize(out);
}

// Intersection of two sorted disjoint lists.
inline std::vector<Interval> IntersectIntervals(const std::vector<Interval>& a,
                                                const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].begin, b[j].begin);
    const double hi = std::min(a[i].end, b[j].end);
    if (hi > lo) out.push_back({lo, hi});
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

// Length of a sorted disjoint list inside [lo, hi).
inline double CoveredIn(const std::vector<Interval>& merged, double lo, double hi) {
  auto it = std::upper_bound(merged.begin(), merged.end(), lo,
                             [](double t, const Interval& iv) { return t < iv.end; });
  double total = 0;
  for (; it != merged.end() && it->begin < hi; ++it) {
    total += std::max(0.0, std::min(it->end, hi) - std::max(it->begin, lo));
  }
  return total;
}

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_INTERVALS_H_
