// One profiling window on the server: opened by a trigger, it collects each rank's summary until
// every expected rank reported or its deadline passed, then closes into a diagnosis. A rank that
// never reports is itself a finding ("missing_rank", diagnose/missing_ranks.h): a hung or dead
// rank is often the problem. The window lists the silent ranks; the collector says why each is
// silent (server/rank_state.h ExplainMissing) before the diagnosis.
#ifndef PERFTRACKER_SERVER_WINDOW_H_
#define PERFTRACKER_SERVER_WINDOW_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "diagnose/diagnose.h"
#include "diagnose/metric_findings.h"
#include "diagnose/window_diagnosis.h"
#include "pattern/compact_job.h"
#include "pattern/pattern.h"

namespace perftracker::server {

struct WindowSpec {
  int64_t id = 0;
  int64_t start_iteration = 0;
  int iterations = 0;
  double max_seconds = 0;
  int attempt = 0;        // the job's attempt it profiles (server/attempts.h)
  bool baseline = false;  // the attempt's baseline window: later ones are compared with it
  // Its ranks record the CPU ops' input shapes. Only windows that explain a slowdown (a
  // trigger, a user's request) do: shapes make every small op dearer, and in a clean baseline
  // window under load that tipped one rank's Adam over the peer comparison's gate (a false
  // straggler in the Lightning job at 251e9a8); a slowdown window's cause is far larger.
  bool record_shapes = false;
  // Its ranks that record their allocations (ProfileWindow.memory_ranks): a memory growth's.
  // Only they: the Python stacks around every op make their profiled iterations slower.
  std::vector<int> memory_ranks = {};
};

struct RankUpload {
  int rank = -1;
  std::string host;
  // pattern::SerializeSummary. A window releases it once parsed (the store keeps the bytes):
  // at 10,000 ranks they would otherwise sit in memory twice, raw and parsed.
  std::string summary_bytes;
  std::map<std::string, double> hardware;
  std::string nvml;
};

class Window {
 public:
  using Clock = std::chrono::steady_clock;

  // EXPECTED: ranks registered by agents when the window opened; when empty, it grows to
  // 0..world-1 once an upload names its world size.
  Window(WindowSpec spec, std::set<int> expected, Clock::time_point deadline);

  const WindowSpec& spec() const { return spec_; }
  // What the server records of a rank whose summary a window kept (rank and host filled in).
  struct Kept {
    int rank = -1;
    std::string host;
    std::vector<double> iteration_ms;
    double mean_iteration_ms = 0;
  };
  // Parses and keeps one rank's summary; a second upload for a rank, or one after the window
  // closed, is refused.
  StatusOr<Kept> AddUpload(RankUpload upload);

  // The two halves of AddUpload, so a server can parse (the expensive part) without holding the
  // lock that guards the window. Parse touches no window state.
  static StatusOr<pattern::RankSummary> Parse(const RankUpload& upload, int64_t window_id);
  // Keeps an upload parsed by Parse (in the window's compact job: a 10,000-rank window holds
  // every rank's patterns).
  StatusOr<Kept> AddParsed(RankUpload upload, pattern::RankSummary summary);

  // All expected ranks reported (and at least one did). O(1): every reported rank is expected.
  bool Complete() const;
  bool Expired(Clock::time_point now) const { return now >= deadline_; }
  bool closed() const { return closed_; }

  std::vector<int> Reported() const;
  std::vector<int> Missing() const;
  const std::map<int, RankUpload>& uploads() const { return uploads_; }

  // Each expected rank's last reported iteration when the window opened (ExplainMissing tells
  // "no iteration since the command" by it).
  void SetStepsAtOpen(std::map<int, int64_t> steps) { steps_at_open_ = std::move(steps); }
  Clock::time_point opened() const { return opened_; }
  bool declared() const { return declared_; }

  // A window closes in two steps, so a server diagnoses without holding its lock: Seal closes
  // the window (later uploads are refused) and moves out what the diagnosis needs; Diagnose
  // runs on it alone, with one missing_rank finding for the ranks that did not report (their
  // reasons unknown: the server explains them between the two).
  struct Sealed {
    WindowSpec spec;
    pattern::CompactJob job;
    diagnose::RankMetrics metrics;
    // The expected ranks that did not report, each with reason kUnknown until explained, and
    // the window's numbers for the finding.
    diagnose::MissingRanks missing;
    std::map<int, int64_t> steps_at_open;
    Clock::time_point opened;
    bool declared = false;
    // The sampled ranks' whole patterns (diagnose::InBaselineSample), for the comparison with
    // the baseline window (diagnose/since_baseline.h).
    std::vector<pattern::RankSummary> sample;

    // What diagnose::DiagnoseWindow makes the window's diagnosis of: its spec, and views of its
    // job, metrics and silent ranks (valid while this lives); its sample is moved out.
    diagnose::WindowInput DiagnosisInput();
  };
  Sealed Seal();

 private:
  WindowSpec spec_;
  std::set<int> expected_;
  bool declared_;  // agents named the ranks
  Clock::time_point deadline_;
  Clock::time_point opened_;
  std::map<int, int64_t> steps_at_open_;
  bool closed_ = false;
  std::map<int, RankUpload> uploads_;
  pattern::CompactJob job_;
  std::vector<pattern::RankSummary> sample_;  // Sealed::sample
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_WINDOW_H_
