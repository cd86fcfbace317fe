// The median of a sample, shared by the worker's trigger, the steady-state classifier and the
// diagnosis. NaN marks a value that is missing (a rank without a part): it takes no part. An
// empty sample's median is 0.
//   Median({3, 1, 2}) == 2; Median({1, 2, 3, 10}) == 2.5; Median({1, NaN, 3}) == 2
#ifndef PERFTRACKER_BASE_MEDIAN_H_
#define PERFTRACKER_BASE_MEDIAN_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace perftracker {

// The median absolute deviation times this estimates the standard deviation of normally
// distributed values (1 / the normal's 75th percentile); the robust spread everywhere here.
inline constexpr double kMadToSigma = 1.4826;

// The median of *V, reordering it (and dropping its NaNs) in place: for a caller that reuses
// one buffer, with no allocation (the worker's trigger, once an iteration on the training thread).
inline double MedianInPlace(std::vector<double>* v) {
  std::erase_if(*v, [](double x) { return std::isnan(x); });
  if (v->empty()) return 0;
  const size_t mid = v->size() / 2;
  std::nth_element(v->begin(), v->begin() + static_cast<std::ptrdiff_t>(mid), v->end());
  const double hi = (*v)[mid];
  if (v->size() % 2 == 1) return hi;
  return (*std::max_element(v->begin(), v->begin() + static_cast<std::ptrdiff_t>(mid)) + hi) / 2;
}

inline double Median(std::vector<double> v) { return MedianInPlace(&v); }

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_MEDIAN_H_
