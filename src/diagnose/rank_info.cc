#include "diagnose/rank_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "base/units.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"
#include "pattern/steady_state.h"

namespace perftracker::diagnose::internal {

bool IsWaitClass(pattern::FunctionClass c) {
  using pattern::FunctionClass;
  return c == FunctionClass::kCollective || c == FunctionClass::kSync ||
         c == FunctionClass::kLaunch;
}

bool HasSelfTimes(const pattern::RankSummary& r) {
  for (const auto& f : r.functions)
    if (f.self_per_iter_us > 0) return true;
  return false;
}

double SelfUs(const pattern::FunctionPattern& f, bool has_self) {
  return has_self ? f.self_per_iter_us : f.per_iter_us;
}

std::vector<std::string> HostsOf(const std::vector<const pattern::RankSummary*>& ranks) {
  std::set<std::string> hosts;
  for (const auto* r : ranks)
    if (!r->host.empty()) hosts.insert(r->host);
  return {hosts.begin(), hosts.end()};
}

double IterationUs(const pattern::RankSummary& r) { return MsToUs(r.MeanIterationMs()); }

JobInfo BuildJobInfo(const std::vector<const pattern::RankSummary*>& ranks) {
  JobInfo job;
  std::vector<double> iters, medians;
  // Notes of left-out iterations: enough to see what happened without one line per rank.
  constexpr int kMaxSteadyStateNoteRanks = 8;
  int steady_notes = 0;
  std::set<int> seen;
  int max_rank = -1;
  for (const pattern::RankSummary* rp : ranks) {
    const pattern::RankSummary& r = *rp;
    job.ranks.push_back(r.rank);
    job.world_size = std::max(job.world_size, r.world_size);
    max_rank = std::max(max_rank, r.rank);
    if (r.rank >= 0 && !seen.insert(r.rank).second)
      job.notes.push_back(fmt::format("rank {} appears more than once ({})", r.rank, r.source));
    if (r.rank < 0)
      job.notes.push_back(fmt::format("{}: no rank known; compared as an extra rank", r.source));
    iters.push_back(static_cast<double>(r.iteration_ms.size()));
    medians.push_back(r.MedianIterationMs());
    job.iteration_ms_per_rank[r.rank] = r.MeanIterationMs();
    if (r.whole_window)
      job.notes.push_back(fmt::format(
          "rank {}: no ProfilerStep or optimizer markers; the window is one iteration", r.rank));
    if (!r.missing_part.empty())
      job.notes.push_back(
          fmt::format("rank {}: no {} data ({}); compared with its peers only on what it has",
                      r.rank, r.missing_part, r.missing_why));
    // Partial and warm-up iterations, GPU work from before the profiler: a line per rank, and
    // one for the rest when many ranks say the same.
    for (const std::string& line : pattern::SteadyStateNotes(r)) {
      if (++steady_notes <= kMaxSteadyStateNoteRanks) {
        job.notes.push_back(fmt::format("rank {}: {}", r.rank, line));
      }
    }
    if (r.read_stats.malformed_events > 0)
      job.notes.push_back(fmt::format(
          "rank {}: {} malformed event{} skipped in {} (the first at byte {}: expected {})", r.rank,
          r.read_stats.malformed_events, r.read_stats.malformed_events == 1 ? "" : "s", r.source,
          r.read_stats.first_bad_byte,
          r.read_stats.first_bad.empty() ? "another shape" : r.read_stats.first_bad));
  }
  if (steady_notes > kMaxSteadyStateNoteRanks)
    job.notes.push_back(fmt::format("{} more notes of left-out iterations or early GPU work",
                                    steady_notes - kMaxSteadyStateNoteRanks));
  std::sort(job.ranks.begin(), job.ranks.end());
  job.world_size = std::max({job.world_size, max_rank + 1, static_cast<int>(seen.size())});
  job.iterations = static_cast<int>(std::lround(Median(iters)));
  job.iteration_ms_median = Median(medians);
  return job;
}

}  // namespace perftracker::diagnose::internal
