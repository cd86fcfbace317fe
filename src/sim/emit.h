// The simulator's output: a rank's summary (the format agents upload) and, for small jobs, its
// Kineto JSON trace, both built from the rank's timing; and the writer that streams every
// rank's files into a job folder in parallel. Each rank's content depends on (config, rank)
// alone, never on the thread that writes it.
#ifndef PERFTRACKER_SIM_EMIT_H_
#define PERFTRACKER_SIM_EMIT_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "pattern/pattern.h"
#include "sim/simulator.h"
#include "sim/timing.h"

namespace perftracker::sim {

// The summary an agent would upload for RANK.
pattern::RankSummary BuildSummary(const Config& config, const Topology& topo,
                                  const TimingModel& model, int rank);

// Kineto-style JSON: a ProfilerStep#N span per iteration on the main thread, CPU ops, Python
// functions and launches laid end to end on it, kernels on their streams linked by correlation
// ids, NCCL kernels with the collective args torch 2.x records.
std::string BuildTraceJson(const Config& config, const Topology& topo, const TimingModel& model,
                           int rank);

// Writes DIR/summaries/rank-<R>.summary and, with config.traces, DIR/traces/rank-<R>.json
// (the folders must exist). Returns the bytes written.
StatusOr<uint64_t> WriteRank(const Simulator& sim, const std::string& dir, int rank);

// Writes every rank that writes (a hung one does not) on config.threads threads, clamped to
// [1, kMaxWriterThreads]; stops taking ranks at the first error and returns it. Fills the
// stats' ranks_written and bytes.
Status WriteRanks(const Simulator& sim, const std::string& dir, RunStats* stats);

// More writer threads than this only contend for the disk.
constexpr int kMaxWriterThreads = 64;

}  // namespace perftracker::sim

#endif  // PERFTRACKER_SIM_EMIT_H_
