// Internal to the diagnosis engine: the expected-pattern rules (all-rank problems). Every rank
// shows the same pattern, so there are no healthy peers to compare with; each rule measures one
// pattern on every rank and compares it with what a healthy training step looks like. One
// function per rule, so that each can be tested alone; FindAllRankProblems (rules.cc) runs them
// in order and owns what they share (the GPU idle the earlier rules already explain).
#ifndef PERFTRACKER_DIAGNOSE_RULES_H_
#define PERFTRACKER_DIAGNOSE_RULES_H_

#include <optional>

#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "pattern/compact_job.h"

namespace perftracker::diagnose::internal::rules {

// What every rule reads.
struct RuleInput {
  const pattern::CompactJob& cj;
  const DiagnoseOptions& o;
  double iter_us = 0;  // the job's median iteration (JobInfo::iteration_ms_median), us
};

// A rule that fired: its finding, and its impact in microseconds per iteration as the rule
// measured it (the finding's impact_ms is rounded through milliseconds; the GPU-idle rule
// subtracts the exact value).
struct Fired {
  Finding finding;
  double impact_us = 0;
};

// Each returns the finding when most ranks (low bandwidth: every rank) show the pattern and its
// impact reaches MinImpactUs; nullopt otherwise. The first four explain GPU idle time.
std::optional<Fired> DataLoaderRule(const RuleInput& in);    // "data_loader"
std::optional<Fired> SyncRule(const RuleInput& in);          // "sync"
std::optional<Fired> PageableCopyRule(const RuleInput& in);  // "memcpy"
std::optional<Fired> LaunchBoundRule(const RuleInput& in);   // "launch_bound"
// "gpu_idle": the GPU idle behind CPU work less EXPLAINED_IDLE_US, what the rules above found.
std::optional<Fired> GpuIdleRule(const RuleInput& in, double explained_idle_us);
std::optional<Fired> LowBandwidthRule(const RuleInput& in);  // "low_bandwidth"

}  // namespace perftracker::diagnose::internal::rules

#endif  // PERFTRACKER_DIAGNOSE_RULES_H_
