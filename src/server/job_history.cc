#include "server/job_history.h"

#include <algorithm>

#include "diagnose/policy.h"

namespace perftracker::server {

namespace policy = diagnose::policy;

void JobHistory::Add(int64_t step, double ms) {
  if (step < 0 || !(ms > 0)) return;
  if (first_step_ < 0 || step < first_step_) first_step_ = step;
  if (!old_.empty() && step <= old_.back().step) return;  // folded already: too late to count
  Acc& a = steps_[step];
  a.sum += ms;
  ++a.n;
  if (steps_.size() > kMaxSteps) FoldOldest();
}

void JobHistory::ExcludeWindow(int64_t start, int iterations) {
  if (start < 0) return;
  windows_.emplace_back(start, start + std::max(iterations, 1) - 1 +
                                   static_cast<int64_t>(policy::kHealthyAfterWindow));
  // A long run opens many windows; the oldest matter least once folded.
  if (windows_.size() > 256) windows_.erase(windows_.begin());
}

bool JobHistory::Excluded(int64_t step) const {
  if (step < first_step_ + static_cast<int64_t>(policy::kHealthyWarmupIterations)) return true;
  return std::any_of(windows_.begin(), windows_.end(),
                     [step](const auto& w) { return step >= w.first && step <= w.second; });
}

void JobHistory::FoldOldest() {
  // The oldest half into bucket means of 8 steps; the folded points halve when too many.
  constexpr size_t kBucket = 8;
  const size_t fold = steps_.size() / 2;
  auto it = steps_.begin();
  for (size_t done = 0; done < fold;) {
    double sum = 0;
    int n = 0;
    int64_t first = -1;
    for (size_t k = 0; k < kBucket && done < fold; ++k, ++done, it = steps_.erase(it)) {
      if (Excluded(it->first)) continue;
      if (first < 0) first = it->first;
      sum += it->second.sum / it->second.n;
      ++n;
    }
    if (n > 0) old_.push_back({first, sum / n});
  }
  if (old_.size() > kMaxOld) {
    std::vector<diagnose::IterationPoint> merged;
    merged.reserve(old_.size() / 2 + 1);
    for (size_t i = 0; i < old_.size(); i += 2)
      merged.push_back(i + 1 < old_.size()
                           ? diagnose::IterationPoint{old_[i].step, (old_[i].ms + old_[i + 1].ms) / 2}
                           : old_[i]);
    old_ = std::move(merged);
  }
}

std::vector<diagnose::IterationPoint> JobHistory::Points(int64_t until) const {
  std::vector<diagnose::IterationPoint> all;
  for (const auto& p : old_)
    if (until < 0 || p.step < until) all.push_back(p);
  for (const auto& [step, a] : steps_) {
    if (until >= 0 && step >= until) break;
    if (!Excluded(step)) all.push_back({step, a.sum / a.n});
  }
  if (all.size() <= kMaxPoints) return all;
  // Points averaged over equal spans of steps, so that the fit sees the whole history in at
  // most kMaxPoints, each part of the run as finely as the others (folded points are coarse).
  const int64_t first = all.front().step, span = all.back().step - first + 1;
  const int64_t width = (span + static_cast<int64_t>(kMaxPoints) - 1) / static_cast<int64_t>(kMaxPoints);
  std::vector<diagnose::IterationPoint> out;
  out.reserve(kMaxPoints);
  double sum = 0;
  int n = 0;
  int64_t bucket = -1, bucket_step = 0;
  for (const diagnose::IterationPoint& p : all) {
    const int64_t b = (p.step - first) / width;
    if (b != bucket && n > 0) {
      out.push_back({bucket_step, sum / n});
      sum = 0;
      n = 0;
    }
    if (n == 0) bucket_step = p.step;
    bucket = b;
    sum += p.ms;
    ++n;
  }
  if (n > 0) out.push_back({bucket_step, sum / n});
  return out;
}

std::vector<diagnose::IterationPoint> JobHistory::Latest(int64_t until, size_t n) const {
  std::vector<diagnose::IterationPoint> out;
  auto it = until < 0 ? steps_.end() : steps_.lower_bound(until);
  while (it != steps_.begin() && out.size() < n) {
    --it;
    if (!Excluded(it->first)) out.push_back({it->first, it->second.sum / it->second.n});
  }
  std::reverse(out.begin(), out.end());
  return out;
}

void JobHistory::Reset() {
  first_step_ = -1;
  steps_.clear();
  old_.clear();
  windows_.clear();
}

}  // namespace perftracker::server
