// The timing model: how long each of a rank's functions takes per iteration, with its faults
// and its waits for slower peers (microseconds throughout). It owns the link speeds, the fault
// magnitudes and the per-job state every rank is evaluated against (stage function sets,
// per-iteration jitter, each rank's delay).
//
// Each rank has its own work ("own"): compute kernels, its collectives' transfer time (message
// size over the slowest link its group uses) and CPU-side stalls that leave the GPU idle (data
// loader, GC, CPU contention, syncs). Training is synchronous, so every rank finishes an
// iteration at the same time T; the difference is spent waiting inside collectives for the
// group's slowest member. Waits are attributed in the order groups synchronize: first the TP
// group (a TP peer of a slow GPU waits in its TP all-reduce), then the PP group (send/recv),
// then DP (reduce-scatter / all-gather), so a slow rank has short collectives and its peers
// long ones. A slow link instead lengthens the transfer of every member of every group that
// crosses it.
#ifndef PERFTRACKER_SIM_TIMING_H_
#define PERFTRACKER_SIM_TIMING_H_

#include <cstdint>
#include <vector>

#include "sim/config.h"
#include "sim/topology.h"
#include "sim/workload.h"

namespace perftracker::sim {

// Link speeds: NVLink ~8x faster than the NIC.
constexpr double kNvlinkGBps = 200;   // bus bandwidth inside a node
constexpr double kNicGBps = 25;       // 200 Gb/s per GPU across nodes
constexpr double kRankNoise = 0.025;  // lognormal sigma of a function's mean on one rank
constexpr double kIterJitter = 0.012;

// Fault magnitudes.
constexpr double kSlowGpuFactor = 1.4;
constexpr double kSlowNvlinkFactor = 4;
constexpr double kSlowNicFactor = 4;
constexpr double kSlowSwitchFactor = 3;
constexpr double kSlowLoaderUs = 80000;
constexpr double kCpuContentionFactor = 2.5;
constexpr double kCpuContentionStall = 0.2;  // GPU idle added, as a share of compute
constexpr double kGcUs = 60000;
constexpr double kSyncIdleUs = 1500;      // GPU idle each sync leaves behind
constexpr double kStepOverheadUs = 2000;  // unavoidable step overhead with the GPU idle

// The seed mixer every random stream of the simulator starts from (SplitMix64's finalizer).
uint64_t SplitMix(uint64_t x);

// The ranks one call of a collective role spans: its whole TP, DP or EP group; two for a PP
// send/recv (a stage and its neighbour); 0 for a role that is no collective.
int CollectiveGroupSize(const Layout& layout, Role role);

// What a rank's iteration looks like once faults and waits are applied.
struct RankState {
  int rank = 0;
  int stage = 0;
  double iteration_us = 0;      // T, the same on every rank (synchronous training)
  std::vector<double> call_us;  // per spec: mean duration of one call on this rank
  std::vector<double> noise;    // per spec: this rank's lognormal factor
  double compute_us = 0, comm_us = 0, memcpy_us = 0, idle_us = 0, cpu_stall_us = 0;
  std::vector<double> iter_factor;  // per iteration: shared jitter x tiny per-rank noise
};

// The job's timing. Construction evaluates every rank's fault delay once (O(workers x
// faults)); Evaluate and the per-rank queries are then const and thread-safe.
class TimingModel {
 public:
  // CONFIG and TOPO must outlive the model.
  TimingModel(const Config& config, const Topology& topo);

  // The function set of a pipeline stage.
  const std::vector<Spec>& Stage(int stage) const { return stages_[stage]; }
  // The hung rank (it writes nothing), or -1.
  int hang_rank() const { return hang_rank_; }

  RankState Evaluate(int rank) const;

  // Transfer time of one call of a collective: message over the slowest link the group uses.
  double TransferUs(int rank, const Spec& s, bool faults) const;
  // Fault multipliers for one spec on one rank.
  double Factor(int rank, const Spec& s, bool faults) const;
  // The period of the rank's intermittent faults (1: every iteration).
  int EveryOf(int rank) const;
  // Time in garbage collection per iteration (mean over the iterations) of a rank's gc faults.
  double GcUs(int rank) const;
  bool HasGc(int rank) const { return GcUs(rank) > 0; }
  // A rank's own work per iteration (no waiting), with or without its rank/node/switch
  // faults. Faults on every rank stay in both: they delay nobody relative to anyone.
  // `stall_out`, when given, gets the part of it that leaves the GPU idle.
  double Own(int rank, bool faults, double* stall_out = nullptr) const;

 private:
  // What a rank waits for in each group, and the pipeline bubble, per iteration.
  struct Waits {
    double tp = 0, pp = 0, dp = 0;
    double bubble_pp = 0, bubble_dp = 0;
    double Of(Role role) const;
  };

  bool SameGroup(int rank, int other, Role role) const;
  int GroupEnd(int rank, Role role, bool last) const;
  double Extra(int rank, Role role, bool faults) const;
  Waits WaitsOf(int rank) const;
  // Hands the rest of the iteration not covered by work and stalls to the waits, last group
  // first.
  void SpreadResidual(int rank, RankState* st) const;

  const Config& cfg_;
  const Topology& topo_;
  std::vector<std::vector<Spec>> stages_;
  std::vector<double> jitter_;  // per iteration, shared by all ranks
  double base_iteration_us_ = 0;
  double max_delay_us_ = 0;  // G: the slowest rank's delay over its fault-free self
  int hang_rank_ = -1;
  // Each rank's delay over its fault-free self: one float a rank, so waits are O(group size).
  std::vector<float> delay_;
};

}  // namespace perftracker::sim

#endif  // PERFTRACKER_SIM_TIMING_H_
