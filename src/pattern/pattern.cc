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
