// GPU metrics through NVML, loaded with dlopen("libnvidia-ml.so.1") so the agent runs (and
// says "unavailable") on machines without a driver. Only the few NVML entry points used here
// are declared: SM clock, clock-event (throttle) reasons, temperature, power, PCIe throughput,
// and, where the driver has them, NVLink data counters (nvmlDeviceGetFieldValues), uncorrected
// ECC errors and PCIe replays; and each process's GPU memory
// (nvmlDeviceGetComputeRunningProcesses).
#ifndef PERFTRACKER_AGENT_NVML_SAMPLER_H_
#define PERFTRACKER_AGENT_NVML_SAMPLER_H_

#include <map>
#include <string>

namespace perftracker::agent {

class NvmlSampler {
 public:
  explicit NvmlSampler(const char* library = "libnvidia-ml.so.1");
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  bool available() const { return ok_; }
  // "ok", or "unavailable: <why>".
  const std::string& status() const { return status_; }
  // Remembers the NVLink counters at the window's start.
  void Begin();
  // One sample of every GPU: "gpu<i>.sm_clock_mhz", "gpu<i>.clock_event_reasons",
  // "gpu<i>.temperature_c", "gpu<i>.power_w", "gpu<i>.pcie_tx_kbps", "gpu<i>.pcie_rx_kbps",
  // "gpu<i>.ecc_uncorrected" (volatile count), "gpu<i>.pcie_replay" (where supported), and
  // since Begin "gpu<i>.nvlink_tx_kib" / "gpu<i>.nvlink_rx_kib" (all links; where NVLink
  // exists). Empty when unavailable.
  std::map<std::string, double> Sample() const;
  // The GPU memory each process holds, by pid (NVML's per-process usage: its CUDA context and
  // what its allocator reserved), with that GPU's index, free and total memory. A process on
  // several GPUs is listed on the one where it holds the most. Empty when unavailable, when the
  // driver lacks the calls, or where NVML may not see the processes (a container without the
  // permission reports no usage).
  struct ProcessGpuMemory {
    int gpu = -1;
    double used_bytes = 0;
    double free_bytes = -1;
    double total_bytes = -1;
  };
  std::map<int, ProcessGpuMemory> ProcessMemory() const;

  struct Api;  // the entry points, resolved by dlsym

 private:
  void* lib_ = nullptr;
  Api* api_ = nullptr;
  bool ok_ = false;
  std::string status_;
  std::map<std::string, double> nvlink_begin_;
};

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_NVML_SAMPLER_H_
