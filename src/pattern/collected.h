// What the collectors gather besides summaries, shared by collection (agent, server) and
// diagnosis: every rank's stacks when a job hangs, and the per-rank metrics the node agents
// sample during a window. Data flows one way: the agent fills these, diagnose/ reads them, and
// neither reaches into the other.
#ifndef PERFTRACKER_PATTERN_COLLECTED_H_
#define PERFTRACKER_PATTERN_COLLECTED_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace perftracker::pattern {

struct StackFrame {
  std::string file;
  int line = 0;
  std::string function;
};

struct ThreadStack {
  int64_t tid = 0;
  std::string name;
  bool main = false;               // the thread that runs the training loop
  std::vector<StackFrame> frames;  // outermost first
};

// The last collective the rank entered through torch.distributed's Python API.
struct LastCollective {
  std::string op;     // empty: none seen
  int64_t count = 0;  // collectives entered so far
  std::string file;   // the caller's file:line
  int line = 0;
  bool in_progress = false;
  double seconds = 0;  // since it was entered
};

struct RankStacks {
  int rank = -1;
  int pid = 0;
  std::string host;
  int64_t iteration = -1;  // the worker's last completed iteration index
  std::vector<ThreadStack> threads;
  LastCollective last_collective;
};

// Metrics per rank, as agents upload them (agent/proc_sampler.h names).
using RankMetrics = std::map<int, std::map<std::string, double>>;

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_COLLECTED_H_
