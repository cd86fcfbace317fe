#include "server/window.h"

#include <fmt/format.h>

#include "diagnose/metric_findings.h"
#include "diagnose/since_baseline.h"
#include "pattern/summary_io.h"

namespace perftracker::server {

Window::Window(WindowSpec spec, std::set<int> expected, Clock::time_point deadline)
    : spec_(spec),
      expected_(std::move(expected)),
      declared_(!expected_.empty()),
      deadline_(deadline),
      opened_(Clock::now()) {}

StatusOr<pattern::RankSummary> Window::Parse(const RankUpload& upload, int64_t window_id) {
  return pattern::ParseSummary(upload.summary_bytes,
                               fmt::format("window {} rank {}", window_id, upload.rank));
}

StatusOr<Window::Kept> Window::AddUpload(RankUpload upload) {
  if (closed_) return InvalidArgument(fmt::format("window {} is closed", spec_.id));
  auto summary = Parse(upload, spec_.id);
  if (!summary.ok()) return summary.status();
  return AddParsed(std::move(upload), *std::move(summary));
}

StatusOr<Window::Kept> Window::AddParsed(RankUpload upload, pattern::RankSummary summary) {
  if (closed_) return InvalidArgument(fmt::format("window {} is closed", spec_.id));
  // The uploader's rank wins when the trace did not say (single-process jobs, old traces).
  if (upload.rank < 0) upload.rank = summary.rank;
  if (upload.rank < 0) upload.rank = 0;
  summary.rank = upload.rank;
  if (uploads_.count(upload.rank))
    return InvalidArgument(
        fmt::format("window {}: rank {} already reported", spec_.id, upload.rank));
  if (summary.host.empty()) summary.host = upload.host;
  // Ranks the agents declared define the window; only without them does a trace's world size
  // say who else should report (a job may profile a subset of a large world).
  if (!declared_)
    for (int r = 0; r < summary.world_size && r < 65536; ++r) expected_.insert(r);
  expected_.insert(upload.rank);
  int rank = upload.rank;
  std::string().swap(upload.summary_bytes);  // parsed; the store keeps the bytes
  uploads_[rank] = std::move(upload);
  Kept kept{rank, summary.host, summary.iteration_ms, summary.MeanIterationMs()};
  if (diagnose::InBaselineSample(rank, summary.world_size)) sample_.push_back(summary);
  job_.Add(std::move(summary));
  return kept;
}

bool Window::Complete() const {
  // Every reported rank is in expected_ (AddParsed inserts it), so equal sizes mean every
  // expected rank reported. Checking each expected rank instead made a 10,000-rank window
  // quadratic: it ran on every upload.
  return !uploads_.empty() && uploads_.size() == expected_.size();
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

Window::Sealed Window::Seal() {
  closed_ = true;
  Sealed sealed;
  sealed.spec = spec_;
  // The window is closed for good: its patterns move out.
  job_.SortByRank();
  sealed.job = std::move(job_);
  job_ = pattern::CompactJob();
  for (const auto& [r, u] : uploads_) sealed.metrics[r] = u.hardware;
  for (int r : Missing())
    sealed.missing.ranks.push_back({r, diagnose::MissingReason::kUnknown, "", -1});
  sealed.missing.window_id = spec_.id;
  sealed.missing.start_iteration = spec_.start_iteration;
  sealed.missing.deadline_s = spec_.max_seconds;
  sealed.missing.expected = static_cast<int>(expected_.size());
  sealed.steps_at_open = std::move(steps_at_open_);
  sealed.opened = opened_;
  sealed.declared = declared_;
  sealed.sample = std::move(sample_);
  sample_.clear();
  return sealed;
}

diagnose::WindowInput Window::Sealed::DiagnosisInput() {
  diagnose::WindowInput in;
  in.id = spec.id;
  in.start_iteration = spec.start_iteration;
  in.iterations = spec.iterations;
  in.attempt = spec.attempt;
  in.baseline = spec.baseline;
  in.job = &job;
  in.metrics = &metrics;
  in.missing = &missing;
  in.sample = std::move(sample);
  in.memory_ranks = spec.memory_ranks;
  return in;
}

}  // namespace perftracker::server
