// Interval arithmetic on the GPU / CPU timelines: unions, intersections and the covered length
// of a window, used for the busy / idle / overlap breakdown.
#ifndef PERFTRACKER_PATTERN_INTERVALS_H_
#define PERFTRACKER_PATTERN_INTERVALS_H_

#include <algorithm>
#include <vector>

namespace perftracker::pattern {

struct Interval {
  double begin = 0;
  double end = 0;
};

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
