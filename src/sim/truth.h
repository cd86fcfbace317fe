// The ground truth of a simulated job: what a correct diagnosis of each injected fault finds
// (its ranks, hosts and switch, its category and class), written as DIR/truth.json beside the
// summaries. Benchmarks and tests score the diagnosis against it.
#ifndef PERFTRACKER_SIM_TRUTH_H_
#define PERFTRACKER_SIM_TRUTH_H_

#include <string>

#include "sim/config.h"

namespace perftracker::sim {

// A fault's finding category ("straggler", "communication", ...) and class: "all" for a fault
// on every rank, "subset" for one on some.
std::string FaultCategory(FaultKind kind);
std::string FaultClass(FaultKind kind);

// DIR/truth.json contents.
std::string TruthJson(const Config& config);

}  // namespace perftracker::sim

#endif  // PERFTRACKER_SIM_TRUTH_H_
