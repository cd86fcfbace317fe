#include "base/python_window_format.h"

#include <bit>
#include <cmath>

namespace perftracker::python_window {

int HistogramBucket(int64_t ns) {
  if (ns < 4) return ns > 0 ? static_cast<int>(ns) : 0;
  const int msb = 63 - std::countl_zero(static_cast<uint64_t>(ns));
  return 4 * msb + static_cast<int>((ns >> (msb - 2)) & 3);
}

double HistogramLowerEdge(int bucket) {
  if (bucket < 8) return bucket;
  return std::ldexp(1.0 + (bucket % 4) / 4.0, bucket / 4);
}

bool LooksLikePythonWindow(std::string_view head) {
  size_t i = 0;
  while (i < head.size() && (head[i] == ' ' || head[i] == '\n' || head[i] == '\t')) ++i;
  head.remove_prefix(i);
  return head.substr(0, 10) == "{\"schema\":" && head.find(kSchemaFamily) != std::string_view::npos;
}

}  // namespace perftracker::python_window
