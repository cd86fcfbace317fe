#include "diagnose/finding.h"

#include <fmt/format.h>

#include <algorithm>

namespace perftracker::diagnose {

const char* FindingClassName(FindingClass c) {
  switch (c) {
    case FindingClass::kSubset:
      return "subset";
    case FindingClass::kAll:
      return "all";
  }
  return "subset";
}

const char* CauseName(Cause c) {
  switch (c) {
    case Cause::kHardware:
      return "hardware";
    case Cause::kSoftware:
      return "software";
    case Cause::kConfiguration:
      return "configuration";
    case Cause::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::string RankList(const std::vector<int>& ranks) {
  std::vector<int> r = ranks;
  std::sort(r.begin(), r.end());
  std::string out;
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j >= i + 2) {
      out += fmt::format("{}-{}", r[i], r[j]);
    } else {
      out += std::to_string(r[i]);
      if (j == i + 1) out += "," + std::to_string(r[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace perftracker::diagnose
