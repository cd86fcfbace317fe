// The categories a finding can have: one row each drives the enum, its name in JSON, text and
// metrics, and what it means for the user (docs/diagnosis-schema.md has one row per category with
// the same name and its own evidence keys; categories_test.cc checks the two agree).
//   CategoryName(Category::kDataLoader) == "data_loader";
//   ParseCategory("data_loader") == Category::kDataLoader; ParseCategory("x") == nullopt
#ifndef PERFTRACKER_DIAGNOSE_CATEGORIES_H_
#define PERFTRACKER_DIAGNOSE_CATEGORIES_H_

#include <fmt/format.h>

#include <optional>
#include <ostream>
#include <string_view>

namespace perftracker::diagnose {

// X(id, name, meaning, evidence): EVIDENCE names the keys this category adds to the common ones
// (kCommonEvidence), space-separated; "rank_<R>_at" stands for one key per rank. A finding that a
// cause rule (diagnose/causes.h), the baseline comparison or a resumed hang gave a new category
// keeps the keys of the one it had (straggler, regression, hang).
// What a setup change carries, whichever of its two categories the GPU decides (diff.cc).
#define PT_SETUP_CHANGE_KEYS                                                              \
  "base_gpu test_gpu base_gpus test_gpus base_world_size test_world_size base_<setting> " \
  "test_<setting>"

#define PT_FINDING_CATEGORIES(X)                                                                  \
  X(kStraggler, "straggler",                                                                      \
    "a rank computes slower than its peers of the same role while they wait for it",              \
    "uniform_slowdown_ratio functions_slower functions_significant rank_collective_ms "           \
    "peers_collective_ms extra_compute_ms peers_extra_compute_ms peers_extra_wait_ms "            \
    "gpu_compute_extra_ms_per_iteration")                                                         \
  X(kDataLoader, "data_loader", "the training loop waits for its next batch",                     \
    "loader_ms_per_batch peers_loader_ms_per_batch loader_dataset_ms_per_batch "                  \
    "loader_collate_ms_per_batch loader_workers data_wait_ms_per_iteration "                      \
    "extra_data_wait_ms_per_iteration")                                                           \
  X(kGc, "gc", "Python's garbage collector runs on the training thread", "")                      \
  X(kPython, "python", "slow Python code on the training thread", "")                             \
  X(kSync, "sync", "host-device synchronization stops the CPU from queueing work", "")            \
  X(kMemcpy, "memcpy", "memory copies (pageable host-device copies) on the critical path", "")    \
  X(kCommunication, "communication",                                                              \
    "collectives take longer than they should: a slow link, NIC or switch, or a late member",     \
    "link groups_slow groups_total collective_excess_ms backed_up_peers "                         \
    "own_queued_kib job_queued_kib collective_ms_per_iteration backed_up_connections busbw_gbps " \
    "peers_busbw_gbps msg_bytes rank_collective_ms peers_collective_ms")                          \
  X(kGpuIdle, "gpu_idle", "the GPU waits for the host", "suspects")                               \
  X(kLaunchBound, "launch_bound", "kernels too short to pay for their launches",                  \
    "tiny_kernel_calls_per_iter gpu_busy_ms gpu_idle_ms")                                         \
  X(kLowBandwidth, "low_bandwidth", "collectives below the bus bandwidth the hardware gives",     \
    "busbw_gbps peers_busbw_gbps expected_busbw_gbps msg_bytes cv")                               \
  X(kMissingRank, "missing_rank", "ranks that did not report the window, and why",                \
    "missing_ranks reported_ranks world_size window start_iteration deadline_s "                  \
    "rank_<R> rank_<R>_last_iteration missing_<reason> reason_<reason>")                          \
  X(kHang, "hang", "ranks stopped making progress; where each stands",                            \
    "stalled_seconds resumed_at_iteration ranks_replied ranks_waiting_in_communication "          \
    "rank_<R>_at others_wait_at "                                                                 \
    "rank_<R>_last_collective others_last_collective collective_seq sequence group "              \
    "others_wait_in waiting_ranks")                                                               \
  X(kStall, "stall", "every rank stopped at the same place, then the job went on",                \
    "stalled_seconds resumed_at_iteration ranks_replied ranks_waiting_in_communication "          \
    "others_wait_at")                                                                             \
  X(kCollectiveMismatch, "collective_mismatch",                                                   \
    "ranks of a group made different collectives at the same sequence number",                    \
    "collective_seq group expected expected_ranks error_output")                                  \
  X(kRankCrash, "rank_crash",                                                                     \
    "the first rank whose process failed, in which collective, and whether it ran out of memory", \
    "exit_code signal collective_seq error_output oom_kill memory_limit_bytes rss_bytes "         \
    "cgroup_usage_bytes last_iteration gpu_oom gpu requested_bytes gpu_total_bytes "              \
    "gpu_free_bytes torch_allocated_bytes torch_reserved_unallocated_bytes "                      \
    "memory_growth_bytes_per_iteration memory_growth_first_iteration")                            \
  X(kRegression, "regression", "slower than the reference (diff, or since the baseline window)",  \
    "os baseline_window baseline_ms window_ms throttled_share baseline_throttled_share "          \
    "baseline_runq_wait_per_cpu_s")                                                               \
  X(kImprovement, "improvement", "faster than the reference (diff)", "")                          \
  X(kHardwareChange, "hardware_change", "the two runs compared ran on different GPUs",            \
    PT_SETUP_CHANGE_KEYS)                                                                         \
  X(kConfigurationChange, "configuration_change",                                                 \
    "the two runs compared ran with a different setup (world size, versions)",                    \
    PT_SETUP_CHANGE_KEYS)                                                                         \
  X(kMemoryGrowth, "memory_growth", "a rank's host or GPU memory grows every iteration",          \
    "rss_bytes grown_bytes bytes_per_iteration first_iteration last_iteration rising_share "      \
    "host_available_bytes cgroup_headroom_bytes iterations_left memory gpu gpu_free_bytes "       \
    "gpu_total_bytes gpu_memory_bytes gpu_series cuda_reserved_bytes cuda_peak_allocated_bytes "  \
    "device iterations peak_allocated_bytes")                                                     \
  X(kCpuThrottled, "cpu_throttled", "the rank's CPU quota (cgroup) throttles it",                 \
    "throttled_periods_share peers_throttled_periods_share throttled_s quota_cpus window_s "      \
    "throttled_share baseline_throttled_share")                                                   \
  X(kCpuContention, "cpu_contention", "the rank's threads wait for a CPU others hold",            \
    "runq_wait_per_cpu_s peers_runq_wait_per_cpu_s extra_runq_wait_ms_per_iteration "             \
    "host_runnable_threads host_cores baseline_runq_wait_per_cpu_s")                              \
  X(kGpuThrottled, "gpu_throttled", "the rank's GPU runs at a lower clock than its peers'",       \
    "gpu_index sm_clock_mhz peers_sm_clock_mhz clock_event_reasons gpu_clock_reasons "            \
    "temperature_c power_w ecc_uncorrected pcie_replay")                                          \
  X(kIoStall, "io_stall",                                                                         \
    "the rank waits on storage its peers do not use, or every rank waits on storage",             \
    "storage_bytes_per_iteration peers_storage_bytes_per_iteration read_bytes_per_iteration "     \
    "write_bytes_per_iteration io_stall_share")                                                   \
  X(kMoreWork, "more_work", "the rank's inputs are larger than its peers'",                       \
    "input_elements_per_call peers_input_elements_per_call input_elements_ratio "                 \
    "larger_input_extra_ms_per_iteration input_shapes peers_input_shapes also_larger_inputs")     \
  X(kMemoryPeak, "memory_peak",                                                                   \
    "a rank's memory peak: an allocation its trace saw fail, or a peak above the reference "      \
    "(diff)",                                                                                     \
    "device peak_allocated_bytes peak_reserved_bytes base_peak_allocated_bytes "                  \
    "failed_allocations failed_bytes")

// The keys any category may carry: the peer comparison's (the named rank's top function against
// its peers'), the all-rank rules', a diff's, and the strings every finding may explain itself
// with.
inline constexpr const char* kCommonEvidence =
    "rank_ms peers_ms ratio calls_per_iter peers_calls_per_iter peers_extra_collective_wait_ms "
    "noise_z own_work_ms peers_own_work_ms own_op_work_ms peers_own_op_work_ms own_gpu_work_ms "
    "peers_own_gpu_work_ms excess_self_ms "
    "rank_iteration_ms runq_wait_per_cpu_s peers_runq_wait_per_cpu_s host_cores "
    "host_runnable_threads iteration_ms ranks_affected ranks_total median_ms min_ms max_ms "
    "base_ms test_ms base_self_ms test_self_ms base_calls_per_iter test_calls_per_iter reasoning "
    "peers host uncertainty partial_data node switch change claimed_ms cost_bound healthy_ms "
    "recent_ms slowdown_iteration reference what_if waiting_ranks critical_iterations";

enum class Category {
#define PT_CATEGORY_ENUM(id, name, meaning, evidence) id,
  PT_FINDING_CATEGORIES(PT_CATEGORY_ENUM)
#undef PT_CATEGORY_ENUM
};

struct CategoryInfo {
  Category category;
  const char* name;
  const char* meaning;
  const char* evidence;
};

inline constexpr CategoryInfo kCategories[] = {
#define PT_CATEGORY_ROW(id, name, meaning, evidence) {Category::id, name, meaning, evidence},
    PT_FINDING_CATEGORIES(PT_CATEGORY_ROW)
#undef PT_CATEGORY_ROW
};

const char* CategoryName(Category c);
std::optional<Category> ParseCategory(std::string_view name);

// For test failures and logs: the name.
inline std::ostream& operator<<(std::ostream& os, Category c) { return os << CategoryName(c); }

}  // namespace perftracker::diagnose

// fmt::format("{}", category) writes the name.
template <>
struct fmt::formatter<perftracker::diagnose::Category> : fmt::formatter<std::string_view> {
  auto format(perftracker::diagnose::Category c, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(perftracker::diagnose::CategoryName(c), ctx);
  }
};

#endif  // PERFTRACKER_DIAGNOSE_CATEGORIES_H_
