#include "pattern/pattern.h"

#include <algorithm>
#include <numeric>

#include "pattern/names.h"

namespace perftracker::pattern {

const char* FunctionClassName(FunctionClass c) {
  switch (c) {
    case FunctionClass::kCompute:
      return "compute";
    case FunctionClass::kCollective:
      return "collective";
    case FunctionClass::kMemcpy:
      return "memcpy";
    case FunctionClass::kDataLoader:
      return "data_loader";
    case FunctionClass::kOptimizer:
      return "optimizer";
    case FunctionClass::kSync:
      return "sync";
    case FunctionClass::kLaunch:
      return "launch";
    case FunctionClass::kPython:
      return "python";
    case FunctionClass::kGc:
      return "gc";
    case FunctionClass::kAnnotation:
      return "annotation";
    case FunctionClass::kOther:
      return "other";
  }
  return "other";
}

std::string FunctionPattern::Key() const {
  // '\x1f' (unit separator) never occurs in names, so distinct triples give distinct keys.
  std::string key = trace::EventKindName(kind);
  key.push_back('\x1f');
  key += name;
  key.push_back('\x1f');
  key += stack;
  return key;
}

FunctionView FunctionView::Of(const FunctionPattern& f) {
  FunctionView v;
  v.name = f.name;
  v.kind = f.kind;
  v.fclass = f.fclass;
  v.stack = f.stack;
  v.device = f.device;
  v.stream = f.stream;
  v.main_thread = f.main_thread;
  v.top_level = f.top_level;
  v.in_python = f.in_python;
  v.count = f.count;
  v.total_us = f.total_us;
  v.mean_us = f.mean_us;
  v.p50_us = f.p50_us;
  v.p99_us = f.p99_us;
  v.max_us = f.max_us;
  v.min_us = f.min_us;
  v.cv = f.cv;
  v.calls_per_iter = f.calls_per_iter;
  v.per_iter_us = f.per_iter_us;
  v.share = f.share;
  v.self_per_iter_us = f.self_per_iter_us;
  v.iter_us = f.iter_us;
  v.coll_op = f.coll.op;
  v.coll_msg_bytes = f.coll.msg_bytes;
  v.coll_dtype = f.coll.dtype;
  v.coll_group_size = f.coll.group_size;
  v.coll_group = f.coll.group;
  v.coll_algbw_gbps = f.coll.algbw_gbps;
  v.coll_busbw_gbps = f.coll.busbw_gbps;
  v.input_dims = f.input_dims;
  v.input_elements = f.input_elements;
  return v;
}

FunctionPattern FunctionView::ToPattern() const {
  FunctionPattern f;
  f.name = name;
  f.kind = kind;
  f.fclass = fclass;
  f.stack = stack;
  f.device = device;
  f.stream = stream;
  f.main_thread = main_thread;
  f.top_level = top_level;
  f.in_python = in_python;
  f.count = count;
  f.total_us = total_us;
  f.mean_us = mean_us;
  f.p50_us = p50_us;
  f.p99_us = p99_us;
  f.max_us = max_us;
  f.min_us = min_us;
  f.cv = cv;
  f.calls_per_iter = calls_per_iter;
  f.per_iter_us = per_iter_us;
  f.share = share;
  f.self_per_iter_us = self_per_iter_us;
  f.iter_us.assign(iter_us.begin(), iter_us.end());
  f.coll.op = coll_op;
  f.coll.msg_bytes = coll_msg_bytes;
  f.coll.dtype = coll_dtype;
  f.coll.group_size = coll_group_size;
  f.coll.group = coll_group;
  f.coll.algbw_gbps = coll_algbw_gbps;
  f.coll.busbw_gbps = coll_busbw_gbps;
  f.input_dims = input_dims;
  f.input_elements = input_elements;
  return f;
}

double RankSummary::MeanIterationMs() const {
  if (iteration_ms.empty()) return 0;
  return std::accumulate(iteration_ms.begin(), iteration_ms.end(), 0.0) /
         static_cast<double>(iteration_ms.size());
}

double RankSummary::MedianIterationMs() const {
  if (iteration_ms.empty()) return 0;
  std::vector<double> v = iteration_ms;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double hi = v[mid];
  const double lo = *std::max_element(v.begin(), v.begin() + mid);
  return (lo + hi) / 2;
}

}  // namespace perftracker::pattern
