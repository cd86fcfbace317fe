// Internal to the diagnosis engine: what the diagnosis reads of ranks beside their functions.
// Which function classes are waiting, self times where a summary has them, hosts, the mean
// iteration, and the job's description (JobInfo) built from the ranks' summaries.
#ifndef PERFTRACKER_DIAGNOSE_RANK_INFO_H_
#define PERFTRACKER_DIAGNOSE_RANK_INFO_H_

#include <string>
#include <vector>

#include "diagnose/diagnose.h"
#include "pattern/compact_job.h"
#include "pattern/pattern.h"

namespace perftracker::diagnose::internal {

// Functions whose time is mostly waiting for someone else (peers, the GPU, a full launch queue):
// they grow on the victims of a slowdown, not on its cause.
bool IsWaitClass(pattern::FunctionClass c);

// True when the summary carries exclusive times (older summaries leave self_per_iter_us 0).
bool HasSelfTimes(const pattern::RankSummary& r);
double SelfUs(const pattern::FunctionPattern& f, bool has_self);
inline double SelfUs(const pattern::CompactFunction& f, bool has_self) {
  return has_self ? f.self_per_iter_us : f.per_iter_us;
}

std::vector<std::string> HostsOf(const std::vector<const pattern::RankSummary*>& ranks);
double IterationUs(const pattern::RankSummary& r);  // mean iteration, microseconds

// THREADS: what each rank says alone is computed on this many threads (0: every core); the
// result does not depend on it.
JobInfo BuildJobInfo(const std::vector<const pattern::RankSummary*>& ranks, size_t threads = 0);
// The summaries of RANKS (RankSummary or CompactRank), for what needs only their metadata.
template <typename R>
std::vector<const pattern::RankSummary*> Pointers(const std::vector<R>& ranks) {
  std::vector<const pattern::RankSummary*> out;
  out.reserve(ranks.size());
  for (const auto& r : ranks) out.push_back(&r);
  return out;
}

}  // namespace perftracker::diagnose::internal

#endif  // PERFTRACKER_DIAGNOSE_RANK_INFO_H_
