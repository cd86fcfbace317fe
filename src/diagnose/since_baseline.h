// The temporal differential: a window compared with the job's own baseline window, the same
// ranks when the job was healthy. The peer comparison finds a problem on some ranks; a problem
// on every rank (every rank throttled, a slower library path, contention on every host) leaves
// the peers alike and only shows against the job's own past. What changed on every rank since
// the baseline is a finding, with what the OS says changed with it (a CPU quota that now
// throttles, a longer run queue); a window that is slower than the baseline and where nothing
// measurable changed says so in a note, so that a slowdown window never ends with nothing to say.
// (A note, not a finding: a shared host drifts by a tenth now and then, and a finding must name
// something.)
//
// The comparison is the run diff (diagnose::Diff) of the two windows under the online names,
// on a sample of ranks (policy::kBaselineSampleRanks): a change on every rank shows on any of
// them, and a 100,000-rank job keeps no more than that of its baseline.
#ifndef PERFTRACKER_DIAGNOSE_SINCE_BASELINE_H_
#define PERFTRACKER_DIAGNOSE_SINCE_BASELINE_H_

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "diagnose/healthy_rate.h"
#include "pattern/collected.h"
#include "pattern/pattern.h"

namespace perftracker::diagnose {

// The job's baseline window as the comparison keeps it.
struct Baseline {
  int64_t window_id = 0;
  int64_t first_iteration = 0, last_iteration = 0;
  std::vector<pattern::RankSummary> ranks;  // the sampled ranks' patterns
  pattern::RankMetrics metrics;             // every rank's OS metrics of that window
};

// True when RANK is one the comparison keeps of a job of WORLD ranks: every k-th rank, so that
// the same ranks are kept in every window.
bool InBaselineSample(int rank, int world);

// What the window is compared with beside the baseline window: the job's healthy rate from its
// unprofiled iterations up to the window, and the baseline window's verdict (CheckBaseline).
struct HealthyReference {
  std::optional<HealthyRate> rate;
  BaselineCheck baseline;
  // The rate when it shows the job slowed down, else null.
  const HealthyRate* Slowdown() const { return rate && rate->slowdown_step ? &*rate : nullptr; }
};

struct SinceBaselineResult {
  std::vector<Finding> findings;
  std::string note;  // for the diagnosis' notes; empty when there is nothing to say
};

// What changed in a window (NOW: its sampled ranks' patterns, NOW_METRICS: every rank's
// metrics) since BASE, when the job runs slower than its healthy rate (policy kBaselineSlowdown),
// unprofiled where REF knows it (HealthyRate::UnprofiledRiseMs; a window only its profiler made
// slower gets a note saying so), else by its profiled iteration against the baseline's:
// functions slower or called more on every
// rank, a rank that computes more (unless EXISTING, the window's own findings, names it), the
// OS's change as their cause; with none of them, a finding of the OS's change alone, else the
// note that nothing measurable did. The rise over the healthy rate (unprofiled, what fixing it
// gives) is the cost where REF knows it.
// A spoiled baseline (REF.baseline) holds the fault itself: no function is compared with it;
// the job's slowdown from its healthy rate is a finding of its own (unless EXISTING explains it:
// an all-rank OS cause, or slow ranks costing as much), with why the baseline could not serve.
SinceBaselineResult SinceBaseline(const Baseline& base,
                                  const std::vector<pattern::RankSummary>& now,
                                  const pattern::RankMetrics& now_metrics,
                                  const std::vector<Finding>& existing,
                                  const DiagnoseOptions& options = {},
                                  const HealthyReference& ref = {});

namespace internal {

// What the OS says changed on the typical rank between the two windows.
struct OsChange {
  std::optional<Category> category;  // kCpuThrottled, kCpuContention, or none
  Cause cause = Cause::kUnknown;
  // For the finding; what did not change when category is null (empty: no OS figures).
  std::string text;
  std::map<std::string, double> evidence;
};
OsChange OsChangeSince(const pattern::RankMetrics& base, const pattern::RankMetrics& now);

// True when F, a change the comparison found, is the host's speed rather than the job's: the
// same CPU calls slower per call on every rank (or most of the job's RANKS, policy
// kAllOsRanksShare) of one host while the OS's figures (OS) show no change.
bool HostSpeedDrift(const Finding& f, const OsChange& os, size_t ranks);
// The largest per-call ratio of the CHANGES HostSpeedDrift takes (0: it takes none); kAnyDrift
// when no change concerns anything but Python functions (no op, kernel or collective changed)
// and no rank is named slow (SLOW_RANK_NAMED): then a builtin's slower calls are the host's.
inline constexpr double kAnyDrift = std::numeric_limits<double>::infinity();
double HostDriftRatio(const std::vector<Finding>& changes, const OsChange& os, size_t ranks,
                      bool slow_rank_named);
// True when F is the same drift seen in a builtin C call's own time (the C work it runs): the
// same calls slower on every rank of one host by no more than policy::kHostDriftSlack times
// DRIFT_RATIO, the largest per-call ratio of the CPU calls HostSpeedDrift took (0: none took).
bool BuiltinInHostDrift(const Finding& f, const OsChange& os, size_t ranks, double drift_ratio);
// Either of the two.
bool IsHostDrift(const Finding& f, const OsChange& os, size_t ranks, double drift_ratio);

}  // namespace internal

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_SINCE_BASELINE_H_
