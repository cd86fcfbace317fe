#include "diagnose/finding_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/units.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose::internal {

std::vector<std::string> SplitStack(const std::string& stack) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= stack.size()) {
    size_t end = stack.find(';', start);
    if (end == std::string::npos) end = stack.size();
    if (end > start) out.push_back(stack.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

FunctionRef MakeFunctionRef(const std::string& name, trace::EventKind kind,
                            const std::string& stack) {
  return FunctionRef{name, trace::EventKindName(kind), SplitStack(stack)};
}

std::string Ms(double us) {
  double ms = UsToMs(us);
  if (std::fabs(ms) >= 100) return fmt::format("{:.0f} ms", ms);
  if (std::fabs(ms) >= 1) return fmt::format("{:.1f} ms", ms);
  return fmt::format("{:.2f} ms", ms);
}

std::string Percent(double fraction) { return fmt::format("{:.0f}%", fraction * 100); }

void SortFindings(std::vector<Finding>* findings) {
  std::stable_sort(findings->begin(), findings->end(), [](const Finding& a, const Finding& b) {
    // Silent ranks first: the diagnosis is incomplete without them, and a silent rank blocks
    // every other in the next collective.
    bool ma = a.category == Category::kMissingRank, mb = b.category == Category::kMissingRank;
    if (ma != mb) return ma;
    // Then memory that grows every iteration: it costs no time yet (impact 0) but ends the job
    // when the host's memory runs out, and what its growth slows now (the allocations) is
    // named beside it.
    bool la = a.category == Category::kMemoryGrowth, lb = b.category == Category::kMemoryGrowth;
    if (la != lb) return la;
    bool ga = a.impact_ms >= 0, gb = b.impact_ms >= 0;
    if (ga != gb) return ga;
    // A low-confidence finding never outranks a confident one, whatever its impact.
    bool ca = a.confidence >= policy::kConfident, cb = b.confidence >= policy::kConfident;
    if (ca != cb) return ca;
    // What fixing it gives where the replay says (diagnose/what_if.h), else the rule's figure.
    const auto gain = [](const Finding& f) {
      return f.what_if_ms >= 0 ? f.what_if_ms : std::fabs(f.impact_ms);
    };
    return gain(a) > gain(b);
  });
}

}  // namespace perftracker::diagnose::internal
