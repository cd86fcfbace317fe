// The simulated job's work: the functions each pipeline stage runs per iteration (Python
// frames, CPU ops, runtime calls, GPU kernels, collectives), with their nominal durations and
// call counts. It owns the stage function table and the workload's constants; the timing model
// (timing.h) turns a stage's functions into one rank's durations.
#ifndef PERFTRACKER_SIM_WORKLOAD_H_
#define PERFTRACKER_SIM_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pattern/pattern.h"
#include "sim/config.h"
#include "trace/event.h"

namespace perftracker::sim {

// Model constants. Chosen to look like a mid-size GPT on H100s: a few hundred ms per iteration,
// compute-dominated.
constexpr int kMicrobatches = 4;
constexpr double kTpMsgBytes = 16.0 * (1 << 20);
constexpr double kPpMsgBytes = 16.0 * (1 << 20);
constexpr double kDpMsgBytes = 64.0 * (1 << 20);
constexpr int kDpBuckets = 4;
constexpr double kEpMsgBytes = 2.0 * (1 << 20);
// The tiny-kernels fault: per-parameter work launched one tensor at a time.
constexpr int kTinyKernels = 3000;
constexpr double kTinyKernelUs = 2;  // GPU time of one tiny kernel
constexpr double kTinyFillUs = 9;    // CPU time of the aten::fill_ that issues it
constexpr double kLaunchUs = 6;      // CPU time of one cudaLaunchKernel
// The sync fault: host syncs per iteration.
constexpr int kSyncCalls = 16;

// What a function does in the timing model. The four collective roles are contiguous
// (kCollTp .. kCollEp).
enum class Role : uint8_t {
  kComputeKernel,
  kMemcpy,
  kCollTp,
  kCollPp,
  kCollDp,
  kCollEp,
  kCpuOp,
  kLaunch,
  kPython,
  kTrainStep,
  kLoader,
  kOptimizer,
  kGc,
  kSync,
  kTinyKernel,
};

// Whether a role is one of the four collective roles.
bool IsCollective(Role role);
// The process group a collective role runs in ("tp", "pp", "dp", "ep"); "" for other roles.
const char* GroupName(Role role);

// One function of a stage.
struct Spec {
  std::string raw;   // as a trace would spell it
  std::string name;  // normalized, as the summarizer would
  trace::EventKind kind = trace::EventKind::kCpuOp;
  pattern::FunctionClass fclass = pattern::FunctionClass::kOther;
  Role role = Role::kCpuOp;
  std::string stack;
  int stream = -1;
  bool gpu = false;
  double base_us = 0;  // per call, before noise and faults
  int calls = 0;       // per iteration
  double self_frac = 1;
  // Collectives.
  std::string op;
  double msg_bytes = 0;
};

// A function with its normalized name and class as the summarizer would give them; GPU work
// on stream 7.
Spec MakeSpec(std::string raw, trace::EventKind kind, Role role, double base_us, int calls,
              std::string stack = "");

// The function set of one pipeline stage (ranks of a stage share it; TP ranks run the same
// kernels). Faults that hit every rank (tiny kernels, syncs) are part of the set. The order is
// part of the output: each rank draws its noise spec by spec.
std::vector<Spec> StageSpecs(const Config& cfg, int stage);

}  // namespace perftracker::sim

#endif  // PERFTRACKER_SIM_WORKLOAD_H_
