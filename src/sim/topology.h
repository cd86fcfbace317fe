// Where ranks sit: in the job's layout (tensor x data x pipeline parallel coordinates, in
// Megatron's rank order, and the process groups that follow from them) and in the cluster
// (rank -> node: gpus_per_node consecutive ranks a node; node -> switch: nodes_per_switch
// consecutive nodes a switch). It owns which ranks a fault's place covers.
#ifndef PERFTRACKER_SIM_TOPOLOGY_H_
#define PERFTRACKER_SIM_TOPOLOGY_H_

#include <vector>

#include "sim/config.h"
#include "trace/event.h"

namespace perftracker::sim {

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

// Whether a rank lies under a fault's place (its rank, node or switch, or every rank).
bool InPlace(const Topology& topo, const Fault& fault, int rank);

// The ranks a fault touches (what a correct finding names): the ranks under its place, for a
// slow data loader only those of the first pipeline stage, where the loader runs.
std::vector<int> FaultRanks(const Config& config, const Fault& fault);

}  // namespace perftracker::sim

#endif  // PERFTRACKER_SIM_TOPOLOGY_H_
