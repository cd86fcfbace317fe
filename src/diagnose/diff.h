// Internal to the diagnosis engine: the steps of the run diff (diagnose::Diff, diff.cc), named
// so that each can be tested alone. The diff compares the same function identities, BASE
// against TEST, by the median over ranks; the steps, in the order Diff runs them: the runs'
// setups, a rank that computes more in TEST while its peers wait for it, each function's change,
// the cap on new or gone functions, and a slowdown spread over many functions.
#ifndef PERFTRACKER_DIAGNOSE_DIFF_H_
#define PERFTRACKER_DIAGNOSE_DIFF_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "pattern/pattern.h"

namespace perftracker::diagnose::internal::diff {

// The kinds of change a diff finding's evidence_text["change"] says, where a reader of the
// findings (the comparison since the baseline window) needs to tell them apart.
inline constexpr char kChangeSameCallsSlower[] =
    "same number of calls, each call takes a different time";
inline constexpr char kChangeSpreadThinly[] = "the iteration is slower, spread over many functions";

// One function identity in one run: its pattern and exclusive time per rank.
struct Side {
  std::map<int, const pattern::FunctionPattern*> by_rank;
  std::map<int, double> self_by_rank;
};

// One function identity (FunctionPattern::Key()) in both runs.
struct KeyDiff {
  const pattern::FunctionPattern* proto = nullptr;  // the first rank's, BASE before TEST
  Side base, test;
};
using KeyDiffs = std::map<std::string, KeyDiff>;

// Every function of BASE and TEST by key. A rank with the key twice keeps the first.
KeyDiffs CollectKeys(const std::vector<pattern::RankSummary>& base,
                     const std::vector<pattern::RankSummary>& test);

// What the diff of two runs reads: the runs, their median iterations, ranks and functions.
struct DiffInput {
  DiffInput(const std::vector<pattern::RankSummary>& base,
            const std::vector<pattern::RankSummary>& test, const DiagnoseOptions& o,
            double base_iter_us, double iter_us, DiffNames names = {});

  const std::vector<pattern::RankSummary>& base;
  const std::vector<pattern::RankSummary>& test;
  const DiagnoseOptions& o;
  DiffNames names;
  double base_iter_us, iter_us;             // median iterations, us
  double iter_delta;                        // iter_us - base_iter_us
  std::vector<int> base_ranks, test_ranks;  // sorted
  std::vector<int> common;                  // in both runs
  KeyDiffs keys;
};

// The median over RANKS of M's values, 0 for a rank M lacks.
double MedianOver(const std::map<int, double>& m, const std::vector<int>& ranks);

// How much K's typical iteration (the median of its per-iteration time) on RANK changed, TEST
// minus BASE; none where a run lacks per-iteration times there or the function is absent from
// most of a run's iterations. Example: iterations {0.7, 0.7, 0.8, 11.6} ms against {0.7, 0.7,
// 0.7, 0.8} changed by 0.05 ms, though their means differ by 2.7 ms.
std::optional<double> TypicalChangeOn(const KeyDiff& k, int rank);

// Standard deviation and sample count of a function's per-iteration time over a run's ranks and
// iterations: the run's own variation.
std::pair<double, double> IterationSpread(
    const std::map<int, const pattern::FunctionPattern*>& by_rank);

// What a run ran on, as far as its traces say: the GPU model (deviceProperties), GPUs per rank's
// host, and the world size.
struct Settings {
  std::string gpu;  // the most common device name; empty without deviceProperties
  int gpus = 0;
  int world_size = 0;
  std::string backend;  // empty where the traces do not say
  std::string nccl_version;
};
Settings SettingsOf(const std::vector<pattern::RankSummary>& side);

// How the runs' setups differ. Versions and backend only where both runs' traces say.
struct SetupChange {
  Settings base, test;
  bool gpu = false, world = false, backend = false, nccl = false;
  bool any() const { return gpu || world || backend || nccl; }
};
SetupChange CompareSetups(const std::vector<pattern::RankSummary>& base,
                          const std::vector<pattern::RankSummary>& test);
// The finding that names a setup change ("hardware_change" or "configuration_change"); only for
// a change (setup.any()).
Finding SetupChangeFinding(const DiffInput& in, const SetupChange& setup);

// Each common rank against itself: the largest rise of a non-collective function's exclusive
// time, and the rise of its collectives' (its wait).
struct RankChange {
  double compute = 0;
  const pattern::FunctionPattern* fn = nullptr;  // the function that rose most
  std::string key;
  double wait = 0;
};
std::map<int, RankChange> RankChanges(const DiffInput& in);
// A rank that computes more in TEST while its peers wait longer in collectives is the cause, and
// the peers' longer collectives are its echo (the diagnosis' straggler, across runs). ECHO_KEYS
// gets the keys the finding explains (its function and every collective).
std::optional<Finding> CrossRunStraggler(const DiffInput& in, std::set<std::string>* echo_keys);

// The least time (us per iteration, of an iteration of ITER_US) a change of the program itself
// must cost to be named: a function new or gone, or called twice or half as often.
double ProgramChangeFloorUs(double iter_us);
// How much function K must change (us per iteration) to be reported, given its BASE exclusive
// time B_SELF: out of both runs' noise and worth a finding; a function that appears or
// disappears has a lower floor.
double ChangeThreshold(const DiffInput& in, const KeyDiff& k, double b_self);
// Function K's regression or improvement, when its exclusive time changed by more than
// ChangeThreshold or its call count doubled or halved; B_SELF and T_SELF are its medians.
std::optional<Finding> FunctionChangeFinding(const DiffInput& in, const SetupChange& setup,
                                             const KeyDiff& k, double b_self, double t_self);

// Very different programs would list every function: keeps the policy::kMaxNewOrGone biggest
// "new in TEST" / "gone in TEST" findings and notes how many more there are.
void CapNewOrGone(Diagnosis* d);

// A slowdown spread thinly over many functions passes no per-function threshold: the finding
// that names the iteration itself with its biggest CONTRIBUTORS (function, self-time change),
// when EXPLAINED (the regressions found) covers under half of it and the setups are the same.
std::optional<Finding> SpreadSlowdownFinding(
    const DiffInput& in, const SetupChange& setup,
    std::vector<std::pair<double, const pattern::FunctionPattern*>> contributors, double explained);

}  // namespace perftracker::diagnose::internal::diff

#endif  // PERFTRACKER_DIAGNOSE_DIFF_H_
