// The cluster simulator behind `perftracker simulate`: a Megatron-style job (tensor x pipeline x
// data parallel, optionally expert parallel) on nodes and switches, with injected faults and the
// ground truth beside the output. It ties the units together: the configuration (config.h), the
// job's placement (topology.h), the per-stage function sets (workload.h), the timing model of
// collectives and faults (timing.h), the ground truth (truth.h) and the output (emit.h), and
// writes, rank by rank, the summaries agents would upload (the real summary format) and, for
// small jobs, Kineto JSON traces. Every rank is generated from (config, rank) alone, so ranks
// stream out in parallel and memory stays bounded whatever the job size.
#ifndef PERFTRACKER_SIM_SIMULATOR_H_
#define PERFTRACKER_SIM_SIMULATOR_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "pattern/pattern.h"
#include "sim/config.h"
#include "sim/topology.h"
#include "sim/truth.h"

namespace perftracker::sim {

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
