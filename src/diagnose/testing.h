// Builders for synthetic behaviour patterns, shared by the diagnose and report tests.
#ifndef PERFTRACKER_DIAGNOSE_TESTING_H_
#define PERFTRACKER_DIAGNOSE_TESTING_H_

#include <string>
#include <vector>

#include "pattern/pattern.h"

namespace perftracker::diagnose::testing {

inline pattern::FunctionPattern Fn(const std::string& name, pattern::FunctionClass c,
                                   double per_iter_ms, double calls = 1,
                                   trace::EventKind kind = trace::EventKind::kCpuOp,
                                   const std::string& stack = "") {
  pattern::FunctionPattern f;
  f.name = name;
  f.kind = kind;
  f.fclass = c;
  f.stack = stack;
  f.main_thread = true;
  f.top_level = true;
  f.per_iter_us = per_iter_ms * 1000.0;
  f.self_per_iter_us = f.per_iter_us;
  f.calls_per_iter = calls;
  f.count = static_cast<uint64_t>(calls * 20);
  f.mean_us = calls > 0 ? f.per_iter_us / calls : 0;
  f.p50_us = f.mean_us;
  return f;
}

inline pattern::RankSummary Rank(int rank, int world, std::vector<pattern::FunctionPattern> fns,
                                 double iteration_ms, const std::string& host = "node0",
                                 int iterations = 20) {
  pattern::RankSummary r;
  r.rank = rank;
  r.world_size = world;
  r.host = host;
  r.source = "rank-" + std::to_string(rank) + ".json";
  r.iteration_source = "ProfilerStep";
  r.iteration_ms.assign(iterations, iteration_ms);
  r.window_ms = iteration_ms * iterations;
  for (auto& f : fns) f.share = iteration_ms > 0 ? f.per_iter_us / (iteration_ms * 1000) : 0;
  r.functions = std::move(fns);
  return r;
}

}  // namespace perftracker::diagnose::testing

#endif  // PERFTRACKER_DIAGNOSE_TESTING_H_
