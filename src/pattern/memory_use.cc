#include "pattern/memory_use.h"

#include <fmt/format.h>

#include <algorithm>

namespace perftracker::pattern {

std::string MemoryDeviceName(int32_t device_type, int32_t device_id) {
  // c10::DeviceType's numbers: 0 is the CPU, 1 CUDA (ROCm builds report their GPUs as CUDA).
  if (device_type == 0) return "cpu";
  if (device_type == 1) return fmt::format("cuda:{}", std::max(device_id, 0));
  return fmt::format("device{}:{}", device_type, device_id);
}

MemoryUseBuilder::Device* MemoryUseBuilder::DeviceOf(int32_t type, int32_t id) {
  if (type == 0) id = -1;  // the CPU is one device whatever id a record gives it
  for (Device& d : devices_) {
    if (d.type == type && d.id == id) return &d;
  }
  if (devices_.size() >= kMaxDevices) return nullptr;
  Device& d = devices_.emplace_back();
  d.type = type;
  d.id = id;
  d.out.device = MemoryDeviceName(type, id);
  d.iterations.resize(iterations_);
  return &d;
}

void MemoryUseBuilder::Add(const trace::MemoryEvent& e, int iteration) {
  Device* d = DeviceOf(e.device_type, e.device_id);
  if (d == nullptr) {
    ++dropped_;
    return;
  }
  DeviceMemory& o = d->out;
  const auto after = static_cast<double>(e.total_allocated);
  // The CPU's reporter keeps no cache: its "Total Reserved" is always 0, not a figure.
  if (e.total_reserved >= 0 && d->type != 0) {
    o.peak_reserved_bytes = std::max(o.peak_reserved_bytes, static_cast<double>(e.total_reserved));
  }
  if (e.out_of_memory) {
    // A failed allocation changes no level; its totals are those it failed at.
    ++o.failed_allocations;
    o.largest_failed_bytes = std::max(o.largest_failed_bytes, static_cast<double>(e.bytes));
    if (e.total_allocated >= 0) o.peak_allocated_bytes = std::max(o.peak_allocated_bytes, after);
    return;
  }
  if (e.bytes > 0) {
    ++o.allocations;
    o.allocated_bytes += static_cast<double>(e.bytes);
  }
  if (e.total_allocated < 0) return;  // no totals: no level to follow
  const double before = after - static_cast<double>(e.bytes);
  o.peak_allocated_bytes = std::max(o.peak_allocated_bytes, after);
  // Records arrive in file order, not time order: each level keeps the record nearest its end.
  if (!d->first.set || e.ts_us < d->first.ts) d->first = {e.ts_us, before, true};
  if (!d->last.set || e.ts_us >= d->last.ts) d->last = {e.ts_us, after, true};
  if (iteration < 0 || static_cast<size_t>(iteration) >= d->iterations.size()) return;
  Iteration& it = d->iterations[static_cast<size_t>(iteration)];
  if (!it.start.set || e.ts_us < it.start.ts) it.start = {e.ts_us, before, true};
  if (!it.end.set || e.ts_us >= it.end.ts) it.end = {e.ts_us, after, true};
  it.peak = std::max({it.peak, after, before});
}

std::vector<DeviceMemory> MemoryUseBuilder::Build(const std::vector<size_t>& steady) const {
  std::vector<DeviceMemory> out;
  out.reserve(devices_.size());
  for (const Device& d : devices_) {
    DeviceMemory m = d.out;
    m.start_allocated_bytes = d.first.bytes;
    m.end_allocated_bytes = d.last.bytes;
    // An iteration without a record keeps the level the one before it ended at (before the
    // first record: the level the trace started at).
    std::vector<double> end(d.iterations.size()), peak(d.iterations.size());
    double level = d.first.bytes;
    for (size_t i = 0; i < d.iterations.size(); ++i) {
      const Iteration& it = d.iterations[i];
      if (it.end.set) {
        end[i] = it.end.bytes;
        peak[i] = it.peak;
        level = it.end.bytes;
      } else {
        end[i] = peak[i] = level;
      }
    }
    for (size_t i : steady) {
      if (i >= end.size()) continue;
      m.iteration_end_bytes.push_back(end[i]);
      m.iteration_peak_bytes.push_back(peak[i]);
    }
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(),
            [](const DeviceMemory& a, const DeviceMemory& b) { return a.device < b.device; });
  return out;
}

}  // namespace perftracker::pattern
