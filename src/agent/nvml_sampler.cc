#include "agent/nvml_sampler.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace perftracker::agent {

// The NVML ABI subset we call (nvml.h): handles are opaque pointers, results 0 on success.
using nvmlDevice_t = void*;
using nvmlReturn_t = int;
constexpr int kNvmlClockSm = 1;              // NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;       // NVML_TEMPERATURE_GPU
constexpr int kNvmlPcieTx = 0;               // NVML_PCIE_UTIL_TX_BYTES
constexpr int kNvmlPcieRx = 1;               // NVML_PCIE_UTIL_RX_BYTES
constexpr unsigned kNvlinkDataTx = 138;      // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (KiB)
constexpr unsigned kNvlinkDataRx = 139;      // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX (KiB)
constexpr unsigned kAllLinks = 0xffffffffu;  // scopeId: the sum over links
constexpr int kEccUncorrected = 1;           // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kEccVolatile = 0;              // NVML_VOLATILE_ECC: since the driver loaded

// nvmlFieldValue_t (nvml.h): value is a union of 8 bytes; counters read as unsigned long long.
struct NvmlFieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp;
  long long latency_us;
  int value_type;
  int nvml_return;
  unsigned long long value;
};
static_assert(sizeof(NvmlFieldValue) == 40);

// nvmlProcessInfo_t (v2 and v3 share it) and nvmlMemory_t (nvml.h).
struct NvmlProcessInfo {
  unsigned pid;
  unsigned long long used_gpu_memory;  // kNvmlValueNotAvailable where NVML may not say
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
static_assert(sizeof(NvmlProcessInfo) == 24);
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;  // NVML_VALUE_NOT_AVAILABLE
// Processes read per GPU: a GPU shared by more is read as far as this (bounded, as anything a
// library hands back).
constexpr unsigned kMaxProcessesPerGpu = 256;

struct NvmlSampler::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*count)(unsigned*);
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long*);
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*);
  nvmlReturn_t (*pcie)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*fields)(nvmlDevice_t, int, NvmlFieldValue*);  // optional
  // Optional: boards without ECC or drivers without the counter answer "not supported".
  nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long*);
  nvmlReturn_t (*replay)(nvmlDevice_t, unsigned*);
  // Optional: per-process GPU memory and the device's memory.
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned*, NvmlProcessInfo*);
  nvmlReturn_t (*memory)(nvmlDevice_t, NvmlMemory*);
};

namespace {

// Cumulative NVLink data counters per GPU, "gpu<i>.nvlink_tx_kib" / "..._rx_kib".
std::map<std::string, double> NvlinkCounters(const NvmlSampler::Api& api);

}  // namespace

NvmlSampler::NvmlSampler(const char* library) {
  lib_ = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    status_ = fmt::format("unavailable: cannot load {}", library);
    return;
  }
  api_ = new Api{};
  bool all = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib_, name));
    if (!fn) all = false;
  };
  sym(api_->init, "nvmlInit_v2");
  sym(api_->shutdown, "nvmlShutdown");
  sym(api_->count, "nvmlDeviceGetCount_v2");
  sym(api_->handle, "nvmlDeviceGetHandleByIndex_v2");
  sym(api_->clock, "nvmlDeviceGetClockInfo");
  sym(api_->reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  sym(api_->temperature, "nvmlDeviceGetTemperature");
  sym(api_->power, "nvmlDeviceGetPowerUsage");
  sym(api_->pcie, "nvmlDeviceGetPcieThroughput");
  // Not in every driver; the rest works without it.
  api_->fields = reinterpret_cast<decltype(api_->fields)>(dlsym(lib_, "nvmlDeviceGetFieldValues"));
  api_->ecc = reinterpret_cast<decltype(api_->ecc)>(dlsym(lib_, "nvmlDeviceGetTotalEccErrors"));
  api_->replay =
      reinterpret_cast<decltype(api_->replay)>(dlsym(lib_, "nvmlDeviceGetPcieReplayCounter"));
  // The v3 entry point where the driver has it, else v2 (the same struct; v1's is smaller).
  for (const char* name :
       {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}) {
    if (api_->processes == nullptr)
      api_->processes = reinterpret_cast<decltype(api_->processes)>(dlsym(lib_, name));
  }
  api_->memory = reinterpret_cast<decltype(api_->memory)>(dlsym(lib_, "nvmlDeviceGetMemoryInfo"));
  if (!all) {
    status_ = "unavailable: NVML lacks an entry point we use";
    return;
  }
  if (int rc = api_->init(); rc != 0) {
    status_ = fmt::format("unavailable: nvmlInit failed ({})", rc);
    return;
  }
  ok_ = true;
  status_ = "ok";
}

NvmlSampler::~NvmlSampler() {
  if (ok_) api_->shutdown();
  delete api_;
  if (lib_) dlclose(lib_);
}

namespace {

std::map<std::string, double> NvlinkCounters(const NvmlSampler::Api& api) {
  std::map<std::string, double> m;
  unsigned n = 0;
  if (api.fields == nullptr || api.count(&n) != 0) return m;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    if (api.handle(i, &dev) != 0) continue;
    NvmlFieldValue v[2] = {};
    v[0].field_id = kNvlinkDataTx;
    v[1].field_id = kNvlinkDataRx;
    v[0].scope_id = v[1].scope_id = kAllLinks;
    if (api.fields(dev, 2, v) != 0) continue;
    if (v[0].nvml_return == 0)
      m[fmt::format("gpu{}.nvlink_tx_kib", i)] = static_cast<double>(v[0].value);
    if (v[1].nvml_return == 0)
      m[fmt::format("gpu{}.nvlink_rx_kib", i)] = static_cast<double>(v[1].value);
  }
  return m;
}

}  // namespace

std::map<int, NvmlSampler::ProcessGpuMemory> NvmlSampler::ProcessMemory() const {
  std::map<int, ProcessGpuMemory> out;
  unsigned n = 0;
  if (!ok_ || api_->processes == nullptr || api_->count(&n) != 0) return out;
  std::vector<NvmlProcessInfo> infos(kMaxProcessesPerGpu);
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    if (api_->handle(i, &dev) != 0) continue;
    unsigned count = kMaxProcessesPerGpu;
    // NVML_ERROR_INSUFFICIENT_SIZE (7): more processes than the buffer; those read are kept.
    if (const int rc = api_->processes(dev, &count, infos.data()); rc != 0 && rc != 7) continue;
    count = std::min(count, kMaxProcessesPerGpu);
    NvmlMemory mem{};
    const bool have_mem = api_->memory != nullptr && api_->memory(dev, &mem) == 0;
    for (unsigned k = 0; k < count; ++k) {
      const NvmlProcessInfo& p = infos[k];
      if (p.used_gpu_memory == kNvmlValueNotAvailable || p.used_gpu_memory == 0) continue;
      ProcessGpuMemory& m = out[static_cast<int>(p.pid)];
      if (static_cast<double>(p.used_gpu_memory) <= m.used_bytes) continue;
      m.gpu = static_cast<int>(i);
      m.used_bytes = static_cast<double>(p.used_gpu_memory);
      m.free_bytes = have_mem ? static_cast<double>(mem.free) : -1;
      m.total_bytes = have_mem ? static_cast<double>(mem.total) : -1;
    }
  }
  return out;
}

void NvmlSampler::Begin() {
  if (ok_) nvlink_begin_ = NvlinkCounters(*api_);
}

std::map<std::string, double> NvmlSampler::Sample() const {
  std::map<std::string, double> m;
  if (!ok_) return m;
  for (const auto& [k, v] : NvlinkCounters(*api_)) {
    auto b = nvlink_begin_.find(k);
    if (b != nvlink_begin_.end() && v >= b->second) m[k] = v - b->second;
  }
  unsigned n = 0;
  if (api_->count(&n) != 0) return m;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    if (api_->handle(i, &dev) != 0) continue;
    std::string p = fmt::format("gpu{}.", i);
    unsigned v = 0;
    unsigned long long reasons = 0;
    if (api_->clock(dev, kNvmlClockSm, &v) == 0) m[p + "sm_clock_mhz"] = v;
    if (api_->reasons(dev, &reasons) == 0)
      m[p + "clock_event_reasons"] = static_cast<double>(reasons);
    if (api_->temperature(dev, kNvmlTemperatureGpu, &v) == 0) m[p + "temperature_c"] = v;
    if (api_->power(dev, &v) == 0) m[p + "power_w"] = v / 1000.0;
    if (api_->pcie(dev, kNvmlPcieTx, &v) == 0) m[p + "pcie_tx_kbps"] = v;
    if (api_->pcie(dev, kNvmlPcieRx, &v) == 0) m[p + "pcie_rx_kbps"] = v;
    unsigned long long errors = 0;
    if (api_->ecc && api_->ecc(dev, kEccUncorrected, kEccVolatile, &errors) == 0)
      m[p + "ecc_uncorrected"] = static_cast<double>(errors);
    if (api_->replay && api_->replay(dev, &v) == 0) m[p + "pcie_replay"] = v;
  }
  return m;
}

}  // namespace perftracker::agent
