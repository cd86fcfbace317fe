#include "diagnose/diagnose.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "diagnose/causes.h"
#include "diagnose/finding_text.h"
#include "diagnose/problem_finders.h"
#include "diagnose/rank_info.h"
#include "diagnose/trace_memory.h"
#include "diagnose/what_if.h"

namespace perftracker::diagnose {

Diagnosis Diagnose(const std::vector<pattern::RankSummary>& ranks, const DiagnoseOptions& options) {
  pattern::CompactJob job;
  for (const auto& r : ranks) job.Add(r);
  job.SortByRank();
  return Diagnose(job, options);
}

namespace {

// The ranks under the world size without a trace (offline: the files given are the job).
MissingRanks RanksWithoutTrace(const JobInfo& job) {
  std::set<int> present(job.ranks.begin(), job.ranks.end());
  MissingRanks m;
  for (int r = 0; r < job.world_size; ++r)
    if (!present.count(r)) m.ranks.push_back({r, MissingReason::kNoTrace, "", -1});
  return m;
}

// The one missing_rank finding and its note (diagnose/missing_ranks.h).
void AddMissingRanks(MissingRanks missing, Diagnosis* d) {
  std::set<int> present(d->job.ranks.begin(), d->job.ranks.end());
  // A rank that reported is not missing, whatever the caller thought.
  std::erase_if(missing.ranks, [&](const MissingRank& m) { return present.count(m.rank) > 0; });
  const int reported = static_cast<int>(present.size());
  const int listed = reported + static_cast<int>(missing.ranks.size());
  // The ranks the caller waited for, else the world size: a window of a profiled subset covers
  // its ranks, not the whole world its traces name.
  const int expected =
      std::max(missing.expected > 0 ? missing.expected : d->job.world_size, listed);
  if (missing.expected > 0) d->job.world_size = std::max(d->job.world_size, missing.expected);
  // Ranks whose job ended before the window are no problem: a note, no finding. (Moved, not
  // copied: a window of 10,000 ranks may list them all.)
  auto problems = std::stable_partition(missing.ranks.begin(), missing.ranks.end(),
                                        [](const MissingRank& m) { return IsProblem(m.reason); });
  if (problems != missing.ranks.end()) {
    MissingRanks ended;
    ended.window_id = missing.window_id;
    ended.start_iteration = missing.start_iteration;
    ended.deadline_s = missing.deadline_s;
    ended.expected = missing.expected;
    ended.ranks.assign(std::make_move_iterator(problems),
                       std::make_move_iterator(missing.ranks.end()));
    missing.ranks.erase(problems, missing.ranks.end());
    d->job.notes.push_back(MissingRankNote(ended, expected));
  }
  std::optional<Finding> f = MissingRankFinding(missing, reported, expected);
  if (!f) return;
  d->job.notes.push_back(MissingRankNote(missing, expected));
  d->findings.push_back(std::move(*f));
}

}  // namespace

Diagnosis Diagnose(const pattern::CompactJob& job, const DiagnoseOptions& options,
                   const MissingRanks* missing) {
  PhaseTimes* t = options.phases;
  Diagnosis d;
  {
    ScopedPhase p(t, "job info");
    d.job = internal::BuildJobInfo(internal::Pointers(job.ranks()), options.threads);
  }
  if (job.ranks().empty()) {
    d.job.notes.push_back("no ranks to diagnose");
    if (missing) AddMissingRanks(*missing, &d);
    return d;
  }
  {
    ScopedPhase p(t, "missing ranks");
    AddMissingRanks(missing ? *missing : RanksWithoutTrace(d.job), &d);
  }
  std::vector<std::vector<size_t>> groups;
  {
    ScopedPhase p(t, "peer groups");
    groups = internal::PeerGroups(job.ranks(), options.threads);
    d.peer_group = PeerGroupOf(groups, job.ranks().size());
  }
  {
    // Timed with AddWhatIf below: the replay of the window, one phase (issue 39: < 10 s at
    // 100,000 ranks).
    ScopedPhase p(t, "what-if replay");
    d.arrivals = CollectiveArrivals(job, d.peer_group);
    d.job.critical_path = CriticalPath(d.arrivals);
  }
  // Times its link localiser as a phase of its own, "peer comparison" the rest.
  internal::FindSubsetProblems(job, d.job, options, std::move(groups), &d.findings);
  std::map<int, std::string> hosts;
  for (const pattern::CompactRank& r : job.ranks()) hosts[r.rank] = r.host;
  {
    ScopedPhase p(t, "causes");
    // The causes a trace alone shows (input shapes); a window's OS metrics add theirs later
    // (AddMetricFindings).
    const RankMetrics no_metrics;
    const CauseInput causes{no_metrics, d.job.iteration_ms_median, job.ranks(), d.peer_group};
    for (Finding& f : d.findings) ExplainRankFinding(causes, &f);
    for (Finding& f : FindMoreWorkRanks(causes, hosts, d.findings))
      d.findings.push_back(std::move(f));
  }
  {
    ScopedPhase p(t, "all-rank rules");
    internal::FindAllRankProblems(job, d.job, options, &d.findings);
    // What the traces' own memory records show (profile_memory), where they have any.
    for (Finding& f : TraceMemoryFindings(d.job.memory, d.job.ranks.size(), hosts))
      d.findings.push_back(std::move(f));
    NameMemorySites(d.job.memory, &d.findings);
  }
  {
    ScopedPhase p(t, "what-if replay");
    AddWhatIf(d.arrivals, &d);
  }
  internal::SortFindings(&d.findings);
  return d;
}

}  // namespace perftracker::diagnose
