#include "diagnose/diagnose.h"

#include <fmt/format.h>

#include <set>

#include "diagnose/analysis.h"

namespace perftracker::diagnose {

Diagnosis Diagnose(const std::vector<pattern::RankSummary>& ranks, const DiagnoseOptions& options) {
  pattern::CompactJob job;
  for (const auto& r : ranks) job.Add(r);
  job.SortByRank();
  return Diagnose(job, options);
}

Diagnosis Diagnose(const pattern::CompactJob& job, const DiagnoseOptions& options) {
  Diagnosis d;
  d.job = internal::BuildJobInfo(internal::Pointers(job.ranks()));
  if (job.ranks().empty()) {
    d.job.notes.push_back("no ranks to diagnose");
    return d;
  }
  std::set<int> present(d.job.ranks.begin(), d.job.ranks.end());
  std::vector<int> missing;
  for (int r = 0; r < d.job.world_size; ++r)
    if (!present.count(r)) missing.push_back(r);
  if (!missing.empty()) {
    std::string list = RankList(missing);
    d.job.notes.push_back(fmt::format("rank{} {} of {} missing: no trace or summary",
                                      missing.size() > 1 ? "s" : "", list, d.job.world_size));
    Finding f;
    f.finding_class = FindingClass::kSubset;
    f.cause = Cause::kUnknown;
    f.category = "missing_rank";
    f.ranks = missing;
    f.evidence["ranks_missing"] = static_cast<double>(missing.size());
    f.evidence["world_size"] = d.job.world_size;
    f.evidence_text["reasoning"] =
        "the world size names more ranks than there are traces; a rank that crashed, hung or "
        "was not profiled writes none, and its problems cannot be seen";
    f.summary = fmt::format("rank{} {} missing: the diagnosis covers {} of {} ranks",
                            missing.size() > 1 ? "s" : "", list, present.size(), d.job.world_size);
    f.suggestion =
        "Collect every rank's trace (check the profiler output folder of the missing ranks and "
        "whether those processes crashed or hung).";
    d.findings.push_back(std::move(f));
  }
  internal::FindSubsetProblems(job, d.job, options, &d.findings);
  internal::FindAllRankProblems(job, d.job, options, &d.findings);
  internal::SortFindings(&d.findings);
  return d;
}

}  // namespace perftracker::diagnose
