#include "diagnose/rank_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/parallel_for.h"
#include "base/units.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"
#include "diagnose/trace_memory.h"
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

JobInfo BuildJobInfo(const std::vector<const pattern::RankSummary*>& ranks, size_t threads) {
  // What each rank says alone (its medians sort, its notes format) in parallel, one slot each;
  // then the job's view of them in rank order, on this thread: the result does not depend on
  // scheduling. (One thread took 40% of a 100,000-rank diagnosis here.)
  struct PerRank {
    double median = 0;
    double mean = 0;
    std::vector<std::string> notes;   // this rank's own, in order
    std::vector<std::string> steady;  // its notes of left-out iterations
  };
  std::vector<PerRank> per(ranks.size());
  ParallelFor(ranks.size(), threads, [&](size_t i) {
    const pattern::RankSummary& r = *ranks[i];
    PerRank& p = per[i];
    p.median = r.MedianIterationMs();
    p.mean = r.MeanIterationMs();
    if (r.rank < 0)
      p.notes.push_back(fmt::format("{}: no rank known; compared as an extra rank", r.source));
    if (r.whole_window)
      p.notes.push_back(fmt::format(
          "rank {}: no ProfilerStep or optimizer markers; the window is one iteration", r.rank));
    if (!r.missing_part.empty())
      p.notes.push_back(
          fmt::format("rank {}: no {} data ({}); compared with its peers only on what it has",
                      r.rank, r.missing_part, r.missing_why));
    p.steady = pattern::SteadyStateNotes(r);
    if (r.read_stats.malformed_events > 0)
      p.notes.push_back(fmt::format(
          "rank {}: {} malformed event{} skipped in {} (the first at byte {}: expected {})", r.rank,
          r.read_stats.malformed_events, r.read_stats.malformed_events == 1 ? "" : "s", r.source,
          r.read_stats.first_bad_byte,
          r.read_stats.first_bad.empty() ? "another shape" : r.read_stats.first_bad));
  });
  JobInfo job;
  std::vector<double> iters, medians;
  iters.reserve(ranks.size());
  medians.reserve(ranks.size());
  // Notes of left-out iterations: enough to see what happened without one line per rank.
  constexpr int kMaxSteadyStateNoteRanks = 8;
  int steady_notes = 0;
  std::unordered_set<int> seen;
  seen.reserve(ranks.size());
  int max_rank = -1;
  job.ranks.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    const pattern::RankSummary& r = *ranks[i];
    PerRank& p = per[i];
    job.ranks.push_back(r.rank);
    job.world_size = std::max(job.world_size, r.world_size);
    max_rank = std::max(max_rank, r.rank);
    if (r.rank >= 0 && !seen.insert(r.rank).second)
      job.notes.push_back(fmt::format("rank {} appears more than once ({})", r.rank, r.source));
    // The order the notes had when they were made here: a rank's own, its left-out
    // iterations', then its malformed events'.
    const bool malformed = r.read_stats.malformed_events > 0;
    const size_t own = p.notes.size() - (malformed ? 1 : 0);
    for (size_t k = 0; k < own; ++k) job.notes.push_back(std::move(p.notes[k]));
    iters.push_back(static_cast<double>(r.iteration_ms.size()));
    medians.push_back(p.median);
    // Ranks come sorted: each goes in at the end.
    job.iteration_ms_per_rank.insert_or_assign(job.iteration_ms_per_rank.end(), r.rank, p.mean);
    // Partial and warm-up iterations, GPU work from before the profiler: a line per rank, and
    // one for the rest when many ranks say the same.
    for (std::string& line : p.steady)
      if (++steady_notes <= kMaxSteadyStateNoteRanks)
        job.notes.push_back(fmt::format("rank {}: {}", r.rank, line));
    if (malformed) job.notes.push_back(std::move(p.notes.back()));
  }
  if (steady_notes > kMaxSteadyStateNoteRanks)
    job.notes.push_back(fmt::format("{} more notes of left-out iterations or early GPU work",
                                    steady_notes - kMaxSteadyStateNoteRanks));
  std::sort(job.ranks.begin(), job.ranks.end());
  job.world_size = std::max({job.world_size, max_rank + 1, static_cast<int>(seen.size())});
  job.iterations = static_cast<int>(std::lround(Median(iters)));
  job.iteration_ms_median = Median(medians);
  job.memory = TraceMemoryOf(ranks);
  return job;
}

}  // namespace perftracker::diagnose::internal
