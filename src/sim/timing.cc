#include "sim/timing.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "pattern/names.h"

namespace perftracker::sim {

using trace::EventKind;

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int CollectiveGroupSize(const Layout& layout, Role role) {
  switch (role) {
    case Role::kCollTp:
      return layout.tp;
    case Role::kCollPp:
      return 2;
    case Role::kCollDp:
      return layout.dp;
    case Role::kCollEp:
      return layout.ep;
    default:
      return 0;
  }
}

TimingModel::TimingModel(const Config& c, const Topology& t) : cfg_(c), topo_(t) {
  for (int s = 0; s < c.layout.pp; ++s) stages_.push_back(StageSpecs(c, s));
  std::mt19937_64 rng(SplitMix(c.seed ^ 0x5157a11ULL));
  std::normal_distribution<double> z(0, 1);
  for (int i = 0; i < c.iterations; ++i) {
    jitter_.push_back(std::clamp(1 + kIterJitter * z(rng), 0.95, 1.05));
  }
  for (const Fault& f : c.faults) {
    if (f.kind == FaultKind::kHang) hang_rank_ = f.index;
  }
  // The fault-free iteration: the busiest rank plus a pipeline bubble; then the slowest
  // rank's delay. One pass over all ranks, O(workers x faults).
  double busiest = 0;
  delay_.resize(c.workers);
  bool local_faults = false;
  for (const Fault& f : c.faults) local_faults |= f.place_kind != PlaceKind::kAll;
  for (int r = 0; r < c.workers; ++r) {
    const double nominal = Own(r, false);
    busiest = std::max(busiest, nominal);
    delay_[r] = local_faults ? static_cast<float>(Own(r, true) - nominal) : 0.0f;
    max_delay_us_ = std::max(max_delay_us_, double(delay_[r]));
  }
  const double bubble =
      c.layout.pp > 1 ? double(c.layout.pp - 1) / (kMicrobatches + c.layout.pp - 1) * 0.5 : 0.02;
  base_iteration_us_ = busiest * (1 + bubble);
}

// Whether `other` is in `rank`'s group of the given role (O(1), so large DP groups are
// cheap to test against the few ranks under a faulty node or switch).
bool TimingModel::SameGroup(int rank, int other, Role role) const {
  Coord a = topo_.CoordOf(rank), b = topo_.CoordOf(other);
  switch (role) {
    case Role::kCollTp:
      return a.pp == b.pp && a.dp == b.dp;
    case Role::kCollPp:
      return a.tp == b.tp && a.dp == b.dp;
    case Role::kCollDp:
      return a.tp == b.tp && a.pp == b.pp;
    case Role::kCollEp:
      return a.tp == b.tp && a.pp == b.pp && a.dp / cfg_.layout.ep == b.dp / cfg_.layout.ep;
    default:
      return false;
  }
}

// The first or last member of a rank's group of the given role.
int TimingModel::GroupEnd(int rank, Role role, bool last) const {
  Coord c = topo_.CoordOf(rank);
  const Layout& l = cfg_.layout;
  switch (role) {
    case Role::kCollTp:
      c.tp = last ? l.tp - 1 : 0;
      break;
    case Role::kCollPp:
      c.pp = last ? l.pp - 1 : 0;
      break;
    case Role::kCollDp:
      c.dp = last ? l.dp - 1 : 0;
      break;
    case Role::kCollEp:
      c.dp = c.dp / l.ep * l.ep + (last ? l.ep - 1 : 0);
      break;
    default:
      break;
  }
  return topo_.RankOf(c);
}

double TimingModel::TransferUs(int rank, const Spec& s, bool faults) const {
  const int n = CollectiveGroupSize(cfg_.layout, s.role);
  if (n == 0) return 0;
  // Members are sorted by rank, so the ends tell whether the group leaves its node/switch.
  const int lo = GroupEnd(rank, s.role, false), hi = GroupEnd(rank, s.role, true);
  const bool cross_node = topo_.Node(lo) != topo_.Node(hi);
  double gbps = cross_node ? kNicGBps : kNvlinkGBps;
  double slow = 1;
  if (faults) {
    for (const Fault& f : cfg_.faults) {
      if (f.kind == FaultKind::kSlowNvlink && !cross_node && topo_.Node(rank) == f.index) {
        slow = std::max(slow, 1 + (kSlowNvlinkFactor - 1) * f.Strength());
      }
      if ((f.kind == FaultKind::kSlowNic || f.kind == FaultKind::kSlowSwitch) && cross_node) {
        const bool sw = f.kind == FaultKind::kSlowSwitch;
        const int per = cfg_.gpus_per_node * (sw ? cfg_.nodes_per_switch : 1);
        const int first = f.index * per;
        for (int o = first; o < std::min(cfg_.workers, first + per); ++o) {
          if (SameGroup(rank, o, s.role)) {
            slow =
                std::max(slow, 1 + ((sw ? kSlowSwitchFactor : kSlowNicFactor) - 1) * f.Strength());
            break;
          }
        }
      }
    }
  }
  // Every collective group has at least two members (a group exists only when its layout
  // dimension is over 1; PP transfers are pairwise), and the ops are all_reduce, send_recv,
  // reduce_scatter, all_gather and all_to_all, so pattern's factor never meets the cases where
  // it reports algbw (n <= 0, broadcast and other ops).
  const double bytes = s.msg_bytes * pattern::BusFactor(s.op, n);
  return bytes / (gbps * 1e3) * slow;  // GB/s = 1e3 bytes/us
}

double TimingModel::Factor(int rank, const Spec& s, bool faults) const {
  if (!faults) return 1;
  double x = 1;
  for (const Fault& f : cfg_.faults) {
    if (!InPlace(topo_, f, rank)) continue;
    const double k = f.Strength();
    if (f.kind == FaultKind::kSlowGpu && s.role == Role::kComputeKernel)
      x *= 1 + (kSlowGpuFactor - 1) * k;
    if (f.kind == FaultKind::kCpuContention &&
        (s.role == Role::kCpuOp || s.role == Role::kLaunch)) {
      x *= 1 + (kCpuContentionFactor - 1) * k;
    }
    if (f.kind == FaultKind::kCpuContention && s.role == Role::kPython) x *= 1 + k;
  }
  return x;
}

// Time a rank's faults add to a function's calls outright (a slow data loader).
double TimingModel::Extra(int rank, Role role, bool faults) const {
  double us = 0;
  if (!faults) return 0;
  for (const Fault& f : cfg_.faults) {
    if (!InPlace(topo_, f, rank)) continue;
    if (f.kind == FaultKind::kSlowLoader && role == Role::kLoader)
      us += kSlowLoaderUs * f.Strength();
  }
  return us;
}

int TimingModel::EveryOf(int rank) const {
  int every = 1;
  for (const Fault& f : cfg_.faults)
    if (InPlace(topo_, f, rank)) every = std::max(every, f.every);
  return every;
}

double TimingModel::GcUs(int rank) const {
  double us = 0;
  for (const Fault& f : cfg_.faults)
    if (f.kind == FaultKind::kGc && f.index == rank) us += kGcUs * f.Strength();
  return us;
}

double TimingModel::Own(int rank, bool faults, double* stall_out) const {
  const std::vector<Spec>& specs = stages_[topo_.CoordOf(rank).pp];
  double gpu = 0, stall = 0, compute = 0;
  for (const Spec& s : specs) {
    if (s.role == Role::kComputeKernel || s.role == Role::kMemcpy) {
      double us = s.base_us * s.calls * Factor(rank, s, faults);
      gpu += us;
      compute += us;
    } else if (IsCollective(s.role)) {
      gpu += TransferUs(rank, s, faults) * s.calls;
    } else if (s.role == Role::kLoader) {
      stall += s.base_us + Extra(rank, s.role, faults);
    } else if (s.role == Role::kTinyKernel) {
      // Launch-bound: the CPU issues each tiny kernel with an aten::fill_ and a
      // cudaLaunchKernel (15 us); the GPU runs it in 2 us and idles the rest.
      stall += s.calls * std::max(0.0, kTinyFillUs + kLaunchUs - s.base_us);
      gpu += s.calls * s.base_us;
    } else if (s.role == Role::kSync && s.kind == EventKind::kCudaRuntime) {
      stall += s.calls * kSyncIdleUs;
    }
  }
  if (faults) {
    for (const Fault& f : cfg_.faults) {
      if (!InPlace(topo_, f, rank)) continue;
      if (f.kind == FaultKind::kCpuContention)
        stall += kCpuContentionStall * f.Strength() * compute;
    }
    stall += GcUs(rank);
  }
  stall += kStepOverheadUs;
  if (stall_out) *stall_out = stall;
  return gpu + stall;
}

double TimingModel::Waits::Of(Role role) const {
  switch (role) {
    case Role::kCollTp:
      return tp;
    case Role::kCollPp:
      return pp + bubble_pp;
    case Role::kCollDp:
      return dp + bubble_dp;
    default:
      return 0.0;
  }
}

// Waits, group by group in the order they synchronize.
TimingModel::Waits TimingModel::WaitsOf(int rank) const {
  const double d0 = delay_[rank];
  double d1 = d0;
  for (int m : topo_.TpGroup(rank)) d1 = std::max(d1, double(delay_[m]));
  double d2 = d1;
  for (int p : topo_.PpGroup(rank)) {
    for (int m : topo_.TpGroup(p)) d2 = std::max(d2, double(delay_[m]));
  }
  const double own_nominal = Own(rank, false);
  Waits w;
  double wait_tp = d1 - d0, wait_pp = d2 - d1, wait_dp = max_delay_us_ - d2;
  const double bubble = base_iteration_us_ - own_nominal;  // pipeline bubble: PP waits
  const Layout& l = cfg_.layout;
  // Where a wait lands when the job has no such group: the next group that exists.
  if (l.tp == 1) wait_pp += wait_tp, wait_tp = 0;
  if (l.pp == 1) wait_dp += wait_pp, wait_pp = 0;
  double bubble_pp = l.pp > 1 ? bubble : 0, bubble_dp = l.pp > 1 ? 0 : bubble;
  if (l.dp == 1) {
    if (l.pp > 1) {
      wait_pp += wait_dp, wait_dp = 0, bubble_pp += bubble_dp, bubble_dp = 0;
    } else if (l.tp > 1) {
      wait_tp += wait_dp + wait_pp + bubble_dp, wait_dp = 0, bubble_dp = 0;
    }
  }
  w.tp = wait_tp, w.pp = wait_pp, w.dp = wait_dp;
  w.bubble_pp = bubble_pp, w.bubble_dp = bubble_dp;
  return w;
}

// The GPU idles for the rank's own CPU-side stalls, whatever its kernels' noise: a rank whose
// kernels run a little long waits that much less in its collectives (and one whose kernels
// run short waits longer). The difference goes to the waits, last group first.
void TimingModel::SpreadResidual(int rank, RankState* st) const {
  const std::vector<Spec>& specs = stages_[st->stage];
  double stall = 0;
  Own(rank, true, &stall);
  double residual = st->iteration_us - (st->compute_us + st->comm_us + st->memcpy_us) - stall;
  for (Role role : {Role::kCollDp, Role::kCollPp, Role::kCollTp}) {
    int calls = 0;
    for (const Spec& s : specs) {
      if (s.role == role) calls += s.calls;
    }
    if (calls == 0 || std::fabs(residual) < 1e-9) continue;
    const double per_call = residual / calls;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& s = specs[i];
      if (s.role != role) continue;
      const double floor = TransferUs(rank, s, true) * st->noise[i];
      const double was = st->call_us[i];
      st->call_us[i] = std::max(floor, was + per_call);
      st->comm_us += (st->call_us[i] - was) * s.calls;
      residual -= (st->call_us[i] - was) * s.calls;
    }
  }
}

RankState TimingModel::Evaluate(int rank) const {
  RankState st;
  st.rank = rank;
  st.stage = topo_.CoordOf(rank).pp;
  const std::vector<Spec>& specs = stages_[st.stage];
  std::mt19937_64 rng(SplitMix(cfg_.seed * 0x100000001b3ULL ^ SplitMix(rank + 1)));
  std::normal_distribution<double> z(0, 1);
  st.noise.resize(specs.size());
  for (double& n : st.noise) n = std::exp(kRankNoise * std::clamp(z(rng), -3.0, 3.0));
  for (int i = 0; i < cfg_.iterations; ++i) {
    st.iter_factor.push_back(jitter_[i] * (1 + 0.002 * std::clamp(z(rng), -3.0, 3.0)));
  }
  st.iteration_us = base_iteration_us_ + max_delay_us_;
  const Waits waits = WaitsOf(rank);
  // Collectives of one group split its wait by call count.
  int dp_calls = 0;
  for (const Spec& s : specs) {
    if (s.role == Role::kCollDp) dp_calls += s.calls;
  }
  st.call_us.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    double us = s.base_us * Factor(rank, s, true) * st.noise[i];
    if (IsCollective(s.role)) {
      const int calls = s.role == Role::kCollDp ? dp_calls : s.calls;
      us = TransferUs(rank, s, true) * st.noise[i] + waits.Of(s.role) / std::max(1, calls);
      st.comm_us += us * s.calls;
    } else if (s.role == Role::kComputeKernel || s.role == Role::kTinyKernel) {
      st.compute_us += us * s.calls;
    } else if (s.role == Role::kMemcpy) {
      st.memcpy_us += us * s.calls;
    } else if (s.role == Role::kLoader) {
      us = (s.base_us + Extra(rank, s.role, true)) * st.noise[i];
    } else if (s.role == Role::kSync) {
      // The CPU blocks until the GPU drains: the sync's time is the GPU's queue.
      us = kSyncIdleUs * st.noise[i];
    }
    st.call_us[i] = us;
  }
  // GPU idle: what is not kernel time; CPU-side stalls (loader, GC, contention, syncs).
  SpreadResidual(rank, &st);
  const double busy = st.compute_us + st.comm_us + st.memcpy_us;
  st.idle_us = std::max(0.0, st.iteration_us - busy);
  st.cpu_stall_us = st.idle_us;
  // Python functions and the step cover what they enclose.
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    if (s.role == Role::kTrainStep) st.call_us[i] = st.iteration_us * 0.985;
  }
  return st;
}

}  // namespace perftracker::sim
