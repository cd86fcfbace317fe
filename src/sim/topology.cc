#include "sim/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace perftracker::sim {

Topology::Topology(const Config& c)
    : layout_(c.layout),
      workers_(c.workers),
      gpus_per_node_(std::max(1, c.gpus_per_node)),
      nodes_per_switch_(std::max(1, c.nodes_per_switch)) {}

Coord Topology::CoordOf(int rank) const {
  const Layout& l = layout_;
  Coord c;
  c.tp = rank % l.tp;
  c.dp = (rank / l.tp) % l.dp;
  c.pp = rank / (l.tp * l.dp);
  return c;
}

int Topology::RankOf(const Coord& c) const {
  return c.pp * (layout_.dp * layout_.tp) + c.dp * layout_.tp + c.tp;
}

std::vector<int> Topology::TpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g;
  for (c.tp = 0; c.tp < layout_.tp; ++c.tp) g.push_back(RankOf(c));
  return g;
}

std::vector<int> Topology::PpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g;
  for (c.pp = 0; c.pp < layout_.pp; ++c.pp) g.push_back(RankOf(c));
  return g;
}

std::vector<int> Topology::DpGroup(int rank) const {
  Coord c = CoordOf(rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < layout_.dp; ++c.dp) g.push_back(RankOf(c));
  return g;
}

std::vector<int> Topology::EpGroup(int rank) const {
  if (layout_.ep <= 1) return {};
  Coord c = CoordOf(rank);
  const int first = c.dp / layout_.ep * layout_.ep;
  std::vector<int> g;
  for (c.dp = first; c.dp < first + layout_.ep; ++c.dp) g.push_back(RankOf(c));
  return g;
}

std::vector<trace::ProcessGroup> Topology::Groups(int rank) const {
  std::vector<trace::ProcessGroup> out;
  auto add = [&](const char* name, std::vector<int> ranks) {
    trace::ProcessGroup g;
    g.name = name;
    g.desc = fmt::format("{}:{}", name, ranks.front());
    g.backend = "nccl";
    g.size = static_cast<int>(ranks.size());
    g.ranks = std::move(ranks);
    out.push_back(std::move(g));
  };
  add("tp", TpGroup(rank));
  add("pp", PpGroup(rank));
  add("dp", DpGroup(rank));
  if (layout_.ep > 1) add("ep", EpGroup(rank));
  return out;
}

bool InPlace(const Topology& topo, const Fault& f, int rank) {
  switch (f.place_kind) {
    case PlaceKind::kRank:
      return rank == f.index;
    case PlaceKind::kNode:
      return topo.Node(rank) == f.index;
    case PlaceKind::kSwitch:
      return topo.Switch(rank) == f.index;
    case PlaceKind::kAll:
      return true;
  }
  return false;
}

std::vector<int> FaultRanks(const Config& c, const Fault& f) {
  Topology topo(c);
  std::vector<int> out;
  // Only the ranks of the place are scanned, so a job of 100,000 ranks answers at once.
  int lo = 0, hi = c.workers;
  if (f.place_kind == PlaceKind::kRank) lo = f.index, hi = std::min(c.workers, f.index + 1);
  if (f.place_kind == PlaceKind::kNode) {
    lo = f.index * c.gpus_per_node, hi = std::min(c.workers, lo + c.gpus_per_node);
  }
  if (f.place_kind == PlaceKind::kSwitch) {
    lo = f.index * c.nodes_per_switch * c.gpus_per_node;
    hi = std::min(c.workers, lo + c.nodes_per_switch * c.gpus_per_node);
  }
  for (int r = lo; r < hi; ++r) {
    if (!InPlace(topo, f, r)) continue;
    // The data loader only runs in the first pipeline stage.
    if (f.kind == FaultKind::kSlowLoader && topo.CoordOf(r).pp != 0) continue;
    out.push_back(r);
  }
  return out;
}

}  // namespace perftracker::sim
