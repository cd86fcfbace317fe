// The cluster simulator behind `perftracker simulate`: a Megatron-style job (tensor x pipeline x
// data parallel, optionally expert parallel) on nodes and switches, with injected faults and the
// ground truth beside the output. It owns the job model (layout, topology, process groups, the
// per-stage function sets, the timing model of collectives and faults) and writes, rank by rank,
// the summaries agents would upload (the real summary format) and, for small jobs, Kineto JSON
// traces. Every rank is generated from (config, rank) alone, so ranks stream out in parallel and
// memory stays bounded whatever the job size.
#ifndef PERFTRACKER_SIM_SIMULATOR_H_
#define PERFTRACKER_SIM_SIMULATOR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "pattern/pattern.h"
#include "trace/event.h"

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

// Where a rank sits in the layout and the cluster. Rank order is Megatron's:
// rank = pp_idx * (dp * tp) + dp_idx * tp + tp_idx.
struct Coord {
  int tp = 0;
  int pp = 0;
  int dp = 0;
};

class Topology {
 public:
  explicit Topology(const Config& config);
  Coord CoordOf(int rank) const;
  int RankOf(const Coord& c) const;
  int Node(int rank) const { return rank / gpus_per_node_; }
  int Switch(int rank) const { return Node(rank) / nodes_per_switch_; }
  std::vector<int> TpGroup(int rank) const;
  std::vector<int> PpGroup(int rank) const;
  std::vector<int> DpGroup(int rank) const;
  std::vector<int> EpGroup(int rank) const;  // empty when ep == 1
  // The rank's process groups: "tp", "pp", "dp" (and "ep"), desc "<name>:<first rank>".
  std::vector<trace::ProcessGroup> Groups(int rank) const;
  const Layout& layout() const { return layout_; }
  int workers() const { return workers_; }

 private:
  Layout layout_;
  int workers_;
  int gpus_per_node_;
  int nodes_per_switch_;
};

// The ranks a fault touches (what a correct finding names) and its truth category and class.
std::vector<int> FaultRanks(const Config& config, const Fault& fault);
std::string FaultCategory(FaultKind kind);
std::string FaultClass(FaultKind kind);

// DIR/truth.json contents.
std::string TruthJson(const Config& config);

// The simulator proper. Construction precomputes what all ranks share (stage function sets,
// the job's slowest arrival); SimulateRank and TraceJson are then thread-safe and depend only
// on (config, rank).
class Simulator {
 public:
  explicit Simulator(Config config);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // False for a hung rank: it writes nothing.
  bool Writes(int rank) const;
  pattern::RankSummary SimulateRank(int rank) const;
  std::string TraceJson(int rank) const;

  const Config& config() const { return config_; }
  const Topology& topology() const { return topo_; }

  struct Impl;

 private:
  Config config_;
  Topology topo_;
  Impl* impl_;
};

struct RunStats {
  int ranks_written = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

// Writes DIR/summaries/rank-<R>.summary, DIR/truth.json and, with config.traces,
// DIR/traces/rank-<R>.json, on config.threads threads.
StatusOr<RunStats> Run(const Config& config, const std::string& dir);

}  // namespace perftracker::sim

#endif  // PERFTRACKER_SIM_SIMULATOR_H_
