// Internal to the diagnosis engine: how findings name things and are ordered. A function as a
// FunctionRef (name, kind, its call stack split into frames), times and shares as short text,
// and the order findings are listed in.
#ifndef PERFTRACKER_DIAGNOSE_FINDING_TEXT_H_
#define PERFTRACKER_DIAGNOSE_FINDING_TEXT_H_

#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "pattern/compact_job.h"
#include "pattern/pattern.h"
#include "trace/event.h"

namespace perftracker::diagnose::internal {

std::vector<std::string> SplitStack(const std::string& stack);
FunctionRef MakeFunctionRef(const std::string& name, trace::EventKind kind,
                            const std::string& stack);
inline FunctionRef MakeFunctionRef(const pattern::FunctionPattern& f) {
  return MakeFunctionRef(f.name, f.kind, f.stack);
}
inline FunctionRef MakeFunctionRef(const pattern::FunctionInfo& f) {
  return MakeFunctionRef(f.name, f.kind, f.stack);
}

// Microseconds as a short millisecond string: "41.2 ms".
std::string Ms(double us);
std::string Percent(double fraction);

// The missing_rank finding first; then regressions and problems, confident ones
// (policy::kConfident) before the others, each by what fixing it gives (the replay's
// what_if_ms where set, else its impact); improvements (negative impact) after, biggest first.
void SortFindings(std::vector<Finding>* findings);

}  // namespace perftracker::diagnose::internal

#endif  // PERFTRACKER_DIAGNOSE_FINDING_TEXT_H_
