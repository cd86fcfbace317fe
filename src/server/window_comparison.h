// What a window's diagnosis is compared with after the peer comparison (diagnose::Diagnose and
// the agents' metrics, server/window.h): the attempt's baseline window or, where that is spoiled,
// the job's healthy rate (diagnose/since_baseline.h, diagnose/healthy_rate.h); the memory
// findings; the costs bounded (diagnose/cost_bound.h); and a note that says what it compared
// against ("compared with: ..."). The publisher thread calls CompareWindow for every window it
// publishes; BaselineState is that thread's alone. SetRunMemory, the memory part, also gives the
// run's final diagnosis the memory findings of the run as it ended (CollectorServer::Shutdown).
#ifndef PERFTRACKER_SERVER_WINDOW_COMPARISON_H_
#define PERFTRACKER_SERVER_WINDOW_COMPARISON_H_

#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "diagnose/diagnose.h"
#include "diagnose/finding.h"
#include "diagnose/healthy_rate.h"
#include "diagnose/since_baseline.h"
#include "server/window.h"

namespace perftracker::server {

// The attempt's baseline window as the comparison keeps it, and the problems it named (a rank's
// problem there was present while the job was healthy: not part of a later rise).
struct BaselineState {
  std::optional<diagnose::Baseline> baseline;
  int attempt = -1;
  std::set<std::pair<diagnose::Category, int>> named;
};

// The run's memory in D: its memory_growth findings replaced by MEMORY (the server's series of
// the run, server/rank_state.h MemoryFindings), named with the allocation sites D's window
// recorded (diagnose::NameMemorySites); with TIMELINES, its online memory timelines replaced too.
void SetRunMemory(std::vector<diagnose::Finding> memory,
                  std::optional<std::vector<diagnose::RankMemoryUse>> timelines,
                  diagnose::Diagnosis* d);

// Adds to D (SEALED's diagnosis) what its window is compared with: keeps SEALED as the baseline
// when it is one; else the comparison with STATE's baseline, or with RATE (the healthy rate up to
// the window) where the baseline is spoiled; MEMORY's findings; the bounded costs; the note that
// says what it was compared against.
void CompareWindow(Window::Sealed* sealed, const std::optional<diagnose::HealthyRate>& rate,
                   std::vector<diagnose::Finding> memory, const diagnose::DiagnoseOptions& options,
                   BaselineState* state, diagnose::Diagnosis* d);

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_WINDOW_COMPARISON_H_
