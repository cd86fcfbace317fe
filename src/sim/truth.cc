#include "sim/truth.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "base/json_writer.h"
#include "diagnose/categories.h"
#include "sim/topology.h"

namespace perftracker::sim {

std::string FaultCategory(FaultKind kind) {
  // The diagnosis' own names (diagnose/categories.h), never spelled here.
  using diagnose::Category;
  switch (kind) {
    case FaultKind::kSlowGpu:
    case FaultKind::kCpuContention:
      return diagnose::CategoryName(Category::kStraggler);
    case FaultKind::kSlowNvlink:
    case FaultKind::kSlowNic:
    case FaultKind::kSlowSwitch:
      return diagnose::CategoryName(Category::kCommunication);
    case FaultKind::kSlowLoader:
      return diagnose::CategoryName(Category::kDataLoader);
    case FaultKind::kGc:
      return diagnose::CategoryName(Category::kGc);
    case FaultKind::kTinyKernels:
      return diagnose::CategoryName(Category::kLaunchBound);
    case FaultKind::kSync:
      return diagnose::CategoryName(Category::kSync);
    case FaultKind::kHang:
      return diagnose::CategoryName(Category::kMissingRank);
  }
  return "?";
}

std::string FaultClass(FaultKind kind) {
  return kind == FaultKind::kTinyKernels || kind == FaultKind::kSync ? "all" : "subset";
}

std::string TruthJson(const Config& c) {
  JsonWriter w(2);
  w.BeginObject();
  w.Key("workers").Int(c.workers);
  w.Key("layout").BeginObject();
  w.Key("tp").Int(c.layout.tp).Key("pp").Int(c.layout.pp).Key("dp").Int(c.layout.dp);
  w.Key("ep").Int(c.layout.ep).EndObject();
  w.Key("gpus_per_node").Int(c.gpus_per_node);
  w.Key("nodes_per_switch").Int(c.nodes_per_switch);
  w.Key("iterations").Int(c.iterations);
  w.Key("seed").Int(static_cast<int64_t>(c.seed));
  w.Key("faults").BeginArray();
  Topology topo(c);
  for (const Fault& f : c.faults) {
    w.BeginObject();
    w.Key("kind").String(FaultKindName(f.kind));
    w.Key("place").String(f.place);
    w.Key("size").Number(f.size);
    w.Key("every").Int(f.every);
    std::vector<int> ranks = FaultRanks(c, f);
    w.Key("ranks").BeginArray();
    for (int r : ranks) w.Int(r);
    w.EndArray();
    std::vector<int> nodes;
    for (int r : ranks) nodes.push_back(topo.Node(r));
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    w.Key("hosts").BeginArray();
    // An all-rank fault names no host: it is not a place.
    if (f.place_kind != PlaceKind::kAll) {
      for (int n : nodes) w.String(fmt::format("node-{}", n));
    }
    w.EndArray();
    if (f.place_kind == PlaceKind::kSwitch)
      w.Key("switch").String(fmt::format("switch-{}", f.index));
    w.Key("category").String(FaultCategory(f.kind));
    w.Key("class").String(FaultClass(f.kind));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::string out = w.Take();
  out.push_back('\n');
  return out;
}

}  // namespace perftracker::sim
