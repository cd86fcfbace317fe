// The simulator's configuration as `perftracker simulate` takes it: the job's layout, the
// cluster's shape, the injected faults. This unit owns the parsing of --layout and --fault and
// the whole-configuration check, each failure a one-line error that names its flag.
#ifndef PERFTRACKER_SIM_CONFIG_H_
#define PERFTRACKER_SIM_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace perftracker::sim {

struct Layout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int ep = 1;  // expert parallel: a split of each data-parallel group; divides dp
};

enum class FaultKind {
  kSlowGpu,
  kSlowNvlink,
  kSlowNic,
  kSlowSwitch,
  kSlowLoader,
  kCpuContention,
  kGc,
  kTinyKernels,
  kSync,
  kHang,
};
const char* FaultKindName(FaultKind kind);

enum class PlaceKind { kRank, kNode, kSwitch, kAll };

struct Fault {
  FaultKind kind = FaultKind::kSlowGpu;
  PlaceKind place_kind = PlaceKind::kAll;
  int index = -1;     // the rank, node or switch; -1 for all
  std::string place;  // as written: "rank=5", "node=2", "switch=0", "all"
  // The fault's strength against its default (size=0.1: a tenth of the default slowdown: a
  // slow GPU 4% slower instead of 40%), and intermittency: active in every `every`-th iteration
  // only, at full strength there. Timing faults only (not hang, sync, tiny-kernels).
  double size = 1.0;
  int every = 1;
  // The mean share of its default strength over the iterations.
  double Strength() const { return size / every; }
};

struct Config {
  int workers = 0;
  Layout layout;
  int gpus_per_node = 8;
  int nodes_per_switch = 4;
  int iterations = 20;
  int layers = 16;  // transformer layers per pipeline stage (about 16 functions each)
  // Per-function, per-iteration noise (coefficient of variation): 0.03 is a GPU job in steady
  // state (the shared NCCL trace: median 1.3%, 90th percentile 7%); ranks sharing CPU cores
  // reach 0.3.
  double noise = 0.03;
  uint64_t seed = 0;
  std::vector<Fault> faults;
  bool traces = false;
  int threads = 2;
};

// "tp=2,pp=4[,dp=D][,ep=E]"; dp defaults to workers / (tp * pp). Errors name --layout.
StatusOr<Layout> ParseLayout(std::string_view text, int workers);
// "KIND@PLACE[,size=S][,every=K]". Errors name --fault.
StatusOr<Fault> ParseFault(std::string_view text);
// Checks the whole configuration (sizes, fault places in range); one-line errors naming a flag.
Status Validate(const Config& config);

}  // namespace perftracker::sim

#endif  // PERFTRACKER_SIM_CONFIG_H_
