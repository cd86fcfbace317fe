#include "server/hang_collection.h"

#include <algorithm>
#include <utility>

#include "base/units.h"
#include "base/window_defaults.h"

namespace perftracker::server {

double HangCollection::StalledAtTrigger(double mean_ms) {
  return mean_ms > 0 ? std::max(window_defaults::kHangFactor * MsToS(mean_ms),
                                window_defaults::kHangMinSeconds)
                     : 0;
}

bool HangCollection::AddReply(diagnose::RankStacks stacks) {
  const int rank = stacks.rank;
  replies[rank] = std::move(stacks);
  expected.insert(rank);
  return std::all_of(expected.begin(), expected.end(), [&](int r) { return replies.count(r) > 0; });
}

std::vector<diagnose::RankStacks> HangCollection::Replies() const {
  std::vector<diagnose::RankStacks> out;
  for (const auto& [r, s] : replies) out.push_back(s);
  return out;
}

double HangCollection::StalledSeconds(Clock::time_point now) const {
  return stalled_seconds + std::chrono::duration<double>(now - since).count();
}

double ReportedHang::StalledSeconds(std::chrono::steady_clock::time_point now) const {
  return stalled_before + std::chrono::duration<double>(now - since).count();
}

}  // namespace perftracker::server
