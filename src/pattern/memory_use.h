// Memory use from a trace's memory records (torch.profiler's profile_memory=True: the
// allocator's totals after every allocation and free, trace::MemoryEvent): per device, the
// peak the trace saw, where it started and ended, and the level at the end of every iteration,
// so that `analyze` shows each rank's memory timeline and peak, finds memory that grows within
// the profiled iterations, and `diff` compares peaks. The summarizer feeds it; its result is
// RankSummary::memory. Memory is bounded: one accumulator per device (kMaxDevices) and a few
// numbers per iteration, whatever the number of records.
#ifndef PERFTRACKER_PATTERN_MEMORY_USE_H_
#define PERFTRACKER_PATTERN_MEMORY_USE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pattern/pattern.h"
#include "trace/event.h"

namespace perftracker::pattern {

// The name a device's memory goes by: "cpu" (type 0), "cuda:N" (type 1), "deviceT:N" else.
std::string MemoryDeviceName(int32_t device_type, int32_t device_id);

class MemoryUseBuilder {
 public:
  // Devices beyond this many are counted in dropped() (a host has a CPU and at most 16 GPUs).
  static constexpr size_t kMaxDevices = 17;

  // ITERATIONS: how many iterations the records' iteration indices refer to.
  explicit MemoryUseBuilder(size_t iterations = 0) : iterations_(iterations) {}
  // A record at iteration ITERATION (index into the summarizer's iterations; -1: outside them).
  void Add(const trace::MemoryEvent& e, int iteration);
  // Each device's memory, the per-iteration values for the STEADY iteration indices only.
  std::vector<DeviceMemory> Build(const std::vector<size_t>& steady) const;
  uint64_t dropped() const { return dropped_; }

 private:
  struct Level {
    double ts = 0;     // of the record that set it
    double bytes = 0;  // total allocated after (or, for a start, before) it
    bool set = false;
  };
  struct Iteration {
    Level start, end;  // the level before its first record and after its last
    double peak = 0;
  };
  struct Device {
    int32_t type = -1, id = -1;
    DeviceMemory out;
    Level first, last;
    std::vector<Iteration> iterations;
  };
  Device* DeviceOf(int32_t type, int32_t id);

  size_t iterations_;
  std::vector<Device> devices_;
  uint64_t dropped_ = 0;
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_MEMORY_USE_H_
