#include "diagnose/finding.h"

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

}  // namespace perftracker::diagnose
