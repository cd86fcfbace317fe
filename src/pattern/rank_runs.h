// A process group's member list as runs of equal steps (start, stride, length): how a summary
// stores it (summary_io.cc, version 5) and how a compact job keys it (compact_job.cc). Groups
// list their members as arithmetic progressions: a data-parallel group of 5,000 ranks 20 apart
// is one run, where the list itself is 20 KB that each of 100,000 summaries repeated.
//   {0, 20, 40, 60, 7} -> runs (0, 20, 4), (7, 0, 1)
#ifndef PERFTRACKER_PATTERN_RANK_RUNS_H_
#define PERFTRACKER_PATTERN_RANK_RUNS_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace perftracker::pattern {

struct RankRun {
  int64_t start = 0;
  int64_t stride = 0;  // 0 for a run of one
  size_t length = 0;
};

// The longest run that starts at RANKS[I] (I < RANKS.size()): every step equal to the first.
inline RankRun RankRunAt(std::span<const int> ranks, size_t i) {
  RankRun run{ranks[i], 0, 1};
  if (i + 1 >= ranks.size()) return run;
  run.stride = int64_t{ranks[i + 1]} - ranks[i];
  size_t j = i + 2;
  while (j < ranks.size() && int64_t{ranks[j]} - ranks[j - 1] == run.stride) ++j;
  run.length = j - i;
  return run;
}

// Calls FN(RankRun) for each run of RANKS in order.
template <typename Fn>
void ForEachRankRun(std::span<const int> ranks, Fn fn) {
  for (size_t i = 0; i < ranks.size();) {
    const RankRun run = RankRunAt(ranks, i);
    fn(run);
    i += run.length;
  }
}

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_RANK_RUNS_H_
