#include "base/phase_times.h"

#include <fmt/format.h>

#include <algorithm>

namespace perftracker {

void PhaseTimes::Add(std::string_view name, double seconds) {
  auto it =
      std::find_if(phases_.begin(), phases_.end(), [&](const auto& p) { return p.first == name; });
  if (it == phases_.end()) {
    phases_.emplace_back(std::string(name), seconds);
  } else {
    it->second += seconds;
  }
}

double PhaseTimes::Seconds(std::string_view name) const {
  for (const auto& [n, s] : phases_)
    if (n == name) return s;
  return 0;
}

std::string PhaseTimes::Format() const {
  std::string out;
  for (const auto& [name, seconds] : phases_) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {:.2f} s", name, seconds);
  }
  return out;
}

}  // namespace perftracker
