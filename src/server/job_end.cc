#include "server/job_end.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "diagnose/collective_sequence.h"
#include "pattern/flight_recorder.h"

namespace perftracker::server {

std::string CollectivesDir(const std::string& report_dir) {
  return (std::filesystem::path(report_dir) / "collectives").string();
}

CollectiveDumps ReadCollectiveDumps(const std::string& dir) {
  CollectiveDumps out;
  std::error_code ec;
  if (!dir.empty() && std::filesystem::is_directory(dir, ec)) {
    auto files = pattern::FindFlightRecorderDumps({dir});
    if (files.ok() && !files->empty())
      out.logs = pattern::ReadFlightRecorderDumps(*files, &out.notes);
  }
  return out;
}

size_t AddCollectiveFindings(CollectiveDumps dumps, const std::optional<diagnose::RankExit>& first,
                             double stalled_seconds, diagnose::Diagnosis* d) {
  std::vector<pattern::CollectiveLog>& logs = dumps.logs;
  std::vector<std::string>& notes = dumps.notes;
  std::vector<diagnose::Finding> found;
  if (!logs.empty()) {
    std::vector<int> expected = d->job.ranks;
    diagnose::SequenceResult seq =
        diagnose::DiagnoseCollectiveSequence(logs, expected, stalled_seconds);
    found = std::move(seq.findings);
    for (auto& n : seq.notes) notes.push_back(std::move(n));
  }
  // The stacks' hang finding and the sequence's name the same ranks: one finding, with both.
  std::erase_if(found, [&](const diagnose::Finding& f) {
    if (f.category != diagnose::Category::kHang) return false;
    for (diagnose::Finding& h : d->findings) {
      if (h.category != diagnose::Category::kHang || h.ranks != f.ranks) continue;
      h.evidence_text["sequence"] = f.summary;
      for (const auto& [k, v] : f.evidence) h.evidence.emplace(k, v);
      return true;
    }
    return false;
  });
  if (first) {
    // The crashed rank's collective its peers' records do not hold, where its backend saw their
    // data differ (torch 1.13: rings without DDP's all-reduces) and no record comparison did.
    const bool compared = std::any_of(found.begin(), found.end(), [](const diagnose::Finding& f) {
      return f.category == diagnose::Category::kCollectiveMismatch;
    });
    if (!compared)
      if (std::optional<diagnose::Finding> m =
              diagnose::CrashOutOfStepFinding(*first, logs, d->job.ranks))
        found.push_back(std::move(*m));
    found.push_back(diagnose::RankCrashFinding(*first, logs));
    diagnose::NameGrowthBeforeOom(d->findings, &found.back());
  }
  for (auto& n : notes) d->job.notes.push_back(std::move(n));
  d->findings.insert(d->findings.begin(), std::make_move_iterator(found.begin()),
                     std::make_move_iterator(found.end()));
  return found.size();
}

size_t AddCollectiveFindings(const std::string& dir, const std::optional<diagnose::RankExit>& first,
                             double stalled_seconds, diagnose::Diagnosis* d) {
  return AddCollectiveFindings(ReadCollectiveDumps(dir), first, stalled_seconds, d);
}

}  // namespace perftracker::server
