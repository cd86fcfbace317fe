#include "server/window.h"

#include <fmt/format.h>

#include <algorithm>

#include "diagnose/link.h"
#include "pattern/summary_io.h"

namespace perftracker::server {

Window::Window(WindowSpec spec, std::set<int> expected, Clock::time_point deadline)
    : spec_(spec),
      expected_(std::move(expected)),
      declared_(!expected_.empty()),
      deadline_(deadline) {}

StatusOr<pattern::RankSummary> Window::AddUpload(RankUpload upload) {
  if (closed_) return InvalidArgument(fmt::format("window {} is closed", spec_.id));
  auto summary = pattern::ParseSummary(upload.summary_bytes,
                                       fmt::format("window {} rank {}", spec_.id, upload.rank));
  if (!summary.ok()) return summary.status();
  // The uploader's rank wins when the trace did not say (single-process jobs, old traces).
  if (upload.rank < 0) upload.rank = summary->rank;
  if (upload.rank < 0) upload.rank = 0;
  summary->rank = upload.rank;
  if (uploads_.count(upload.rank))
    return InvalidArgument(
        fmt::format("window {}: rank {} already reported", spec_.id, upload.rank));
  if (summary->host.empty()) summary->host = upload.host;
  // Ranks the agents declared define the window; only without them does a trace's world size
  // say who else should report (a job may profile a subset of a large world).
  if (!declared_)
    for (int r = 0; r < summary->world_size && r < 65536; ++r) expected_.insert(r);
  expected_.insert(upload.rank);
  summaries_[upload.rank] = *summary;
  uploads_[upload.rank] = std::move(upload);
  return *summary;
}

bool Window::Complete() const {
  if (uploads_.empty()) return false;
  return std::all_of(expected_.begin(), expected_.end(),
                     [&](int r) { return uploads_.count(r) > 0; });
}

std::vector<int> Window::Reported() const {
  std::vector<int> out;
  for (const auto& [r, u] : uploads_) out.push_back(r);
  return out;
}

std::vector<int> Window::Missing() const {
  std::vector<int> out;
  for (int r : expected_)
    if (!uploads_.count(r)) out.push_back(r);
  return out;
}

diagnose::Diagnosis Window::Close(const diagnose::DiagnoseOptions& options) {
  closed_ = true;
  std::vector<pattern::RankSummary> ranks;
  for (auto& [r, s] : summaries_) ranks.push_back(s);
  diagnose::Diagnosis diagnosis;
  if (!ranks.empty()) diagnosis = diagnose::Diagnose(ranks, options);
  diagnose::RankMetrics metrics;
  for (const auto& [r, u] : uploads_) metrics[r] = u.hardware;
  diagnose::AddMetricFindings(metrics, ranks, &diagnosis);
  std::vector<int> missing = Missing();
  if (!missing.empty()) {
    diagnose::Finding f;
    f.finding_class = diagnose::FindingClass::kSubset;
    f.cause = diagnose::Cause::kUnknown;
    f.category = "missing_rank";
    f.ranks = missing;
    f.evidence["missing_ranks"] = static_cast<double>(missing.size());
    f.evidence["reported_ranks"] = static_cast<double>(uploads_.size());
    f.evidence["deadline_s"] = spec_.max_seconds;
    f.summary = fmt::format(
        "no report from rank{} {} for window {} before its deadline: the rank may be hung, "
        "dead, or its agent unreachable",
        missing.size() == 1 ? "" : "s", diagnose::RankList(missing), spec_.id);
    f.suggestion =
        "check that the rank's process is alive and progressing (py-spy dump, NCCL debug logs) "
        "and that its node agent runs";
    // A silent rank blocks everyone in the next collective: it goes first.
    diagnosis.findings.insert(diagnosis.findings.begin(), std::move(f));
    diagnosis.job.notes.push_back(
        fmt::format("no report from rank(s) {}", diagnose::RankList(missing)));
  }
  if (diagnosis.job.world_size < static_cast<int>(expected_.size()))
    diagnosis.job.world_size = static_cast<int>(expected_.size());
  return diagnosis;
}

}  // namespace perftracker::server
