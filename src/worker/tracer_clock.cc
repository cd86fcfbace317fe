#include "worker/tracer_clock.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace perftracker::worker {

bool HardwareTimeSource::InvariantTsc() const {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
#else
  return false;
#endif
}

}  // namespace perftracker::worker
