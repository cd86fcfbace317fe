#include "diagnose/trace_memory.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <utility>

#include "diagnose/finding_text.h"
#include "diagnose/memory_growth.h"
#include "diagnose/peer_stats.h"
#include "diagnose/policy.h"

namespace perftracker::diagnose {
namespace {

// "rank 3's", "ranks 0-3's".
std::string Whose(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}'s", ranks.size() == 1 ? "" : "s", RankList(ranks));
}

std::vector<std::string> HostsOfRanks(const std::vector<int>& ranks,
                                      const std::map<int, std::string>& hosts) {
  std::set<std::string> out;
  for (int r : ranks) {
    auto it = hosts.find(r);
    if (it != hosts.end() && !it->second.empty()) out.insert(it->second);
  }
  return {out.begin(), out.end()};
}

// The growing ranks of one kind of device, as one finding.
Finding GrowthFinding(const std::vector<const RankMemoryUse*>& grow, size_t job_ranks,
                      const std::map<int, std::string>& hosts) {
  Finding f;
  f.category = Category::kMemoryGrowth;
  f.cause = Cause::kSoftware;
  f.confidence = policy::kConfidenceOsEvidence;
  std::vector<double> rate, grown;
  double peak = 0;
  for (const RankMemoryUse* m : grow) {
    f.ranks.push_back(m->rank);
    rate.push_back(m->bytes_per_iteration);
    grown.push_back(m->bytes_per_iteration * (m->iterations - 1));
    peak = std::max(peak, m->peak_allocated_bytes);
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  f.ranks.erase(std::unique(f.ranks.begin(), f.ranks.end()), f.ranks.end());
  f.finding_class = f.ranks.size() >= job_ranks ? FindingClass::kAll : FindingClass::kSubset;
  f.hosts = HostsOfRanks(f.ranks, hosts);
  const RankMemoryUse& first = *grow.front();
  const double median_rate = internal::Median(rate);
  f.evidence["bytes_per_iteration"] = median_rate;
  f.evidence["grown_bytes"] = internal::Median(grown);
  f.evidence["iterations"] = first.iterations;
  f.evidence["peak_allocated_bytes"] = peak;
  f.evidence_text["device"] = first.device;
  f.evidence_text["memory"] = "allocated, as the profiler's memory records count it";
  f.summary = fmt::format(
      "{} allocated memory on {} grows {} per iteration{} through the profiled iterations "
      "({} to {} over {} steady iterations of rank {}; the trace's memory records): something "
      "keeps memory every iteration",
      Whose(f.ranks),
      grow.size() == 1 ? first.device
      : first.host()   ? "the host"
                       : "their GPUs",
      MemoryBytes(median_rate), grow.size() == 1 ? "" : " (the median)",
      MemoryBytes(first.iteration_end_bytes.front()), MemoryBytes(first.iteration_end_bytes.back()),
      first.iterations, first.rank);
  f.suggestion = MemoryGrowthSuggestion(!first.host());
  return f;
}

// The ranks whose trace saw an allocation fail, as one finding.
Finding FailedAllocationFinding(const std::vector<const RankMemoryUse*>& failed,
                                const std::map<int, std::string>& hosts) {
  Finding f;
  f.category = Category::kMemoryPeak;
  f.cause = Cause::kSoftware;
  const RankMemoryUse* top = failed.front();
  for (const RankMemoryUse* m : failed) {
    f.ranks.push_back(m->rank);
    if (m->peak_allocated_bytes > top->peak_allocated_bytes) top = m;
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  f.ranks.erase(std::unique(f.ranks.begin(), f.ranks.end()), f.ranks.end());
  f.hosts = HostsOfRanks(f.ranks, hosts);
  f.evidence["failed_allocations"] = static_cast<double>(top->failed_allocations);
  f.evidence["failed_bytes"] = top->largest_failed_bytes;
  f.evidence["peak_allocated_bytes"] = top->peak_allocated_bytes;
  if (top->peak_reserved_bytes >= 0) f.evidence["peak_reserved_bytes"] = top->peak_reserved_bytes;
  f.evidence_text["device"] = top->device;
  f.summary = fmt::format(
      "{} trace saw {} allocation{} on {} fail (out of memory; the largest asked for {}); rank {} "
      "had {} allocated at its peak{}",
      Whose(f.ranks), top->failed_allocations, top->failed_allocations == 1 ? "" : "s", top->device,
      MemoryBytes(top->largest_failed_bytes), top->rank, MemoryBytes(top->peak_allocated_bytes),
      top->peak_reserved_bytes >= 0
          ? fmt::format(" and {} reserved", MemoryBytes(top->peak_reserved_bytes))
          : "");
  f.suggestion =
      "lower what one iteration holds at its peak (micro-batch size, activation checkpointing, "
      "sharding the optimizer state); where reserved is well above allocated the cache is "
      "fragmented: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
  return f;
}

// M's kept places: R's memory sites on M's device.
void AddKept(const pattern::RankSummary& r, RankMemoryUse* m) {
  for (const pattern::MemorySite& site : r.memory_sites) {
    if (site.device != m->device || site.counted_iterations == 0) continue;
    KeptMemory& k = m->kept.emplace_back();
    k.function = site.function.empty() ? "(outside any op)" : site.function;
    k.stack = internal::SplitStack(site.stack);
    k.op = site.op;
    k.bytes_per_iteration = site.kept_bytes / site.counted_iterations;
    k.kept_iterations = static_cast<int>(site.kept_iterations);
    k.counted_iterations = static_cast<int>(site.counted_iterations);
  }
  // The allocator's places and the sampled heap's come in two lists: most kept first.
  std::stable_sort(m->kept.begin(), m->kept.end(), [](const KeptMemory& a, const KeptMemory& b) {
    return a.bytes_per_iteration > b.bytes_per_iteration;
  });
}

}  // namespace

double MemorySlope(const std::vector<double>& levels) {
  const size_t n = levels.size();
  if (n < 2) return 0;
  const double mx = static_cast<double>(n - 1) / 2;
  double my = 0;
  for (double v : levels) my += v;
  my /= static_cast<double>(n);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double dx = static_cast<double>(i) - mx;
    num += dx * (levels[i] - my);
    den += dx * dx;
  }
  return den > 0 ? num / den : 0;
}

bool TraceMemoryGrows(const std::vector<double>& levels) {
  const size_t n = levels.size();
  if (n < static_cast<size_t>(policy::kTraceMemoryMinIterations)) return false;
  const double slope = MemorySlope(levels);
  if (slope * static_cast<double>(n - 1) < policy::kMemoryMinGrowthBytes) return false;
  size_t rising = 0;
  for (size_t i = 1; i < n; ++i) {
    if (levels[i] - levels[i - 1] > policy::kMemoryRiseOfExpected * slope) ++rising;
  }
  return static_cast<double>(rising) >= policy::kMemoryRisingShare * static_cast<double>(n - 1);
}

std::vector<RankMemoryUse> TraceMemoryOf(const std::vector<const pattern::RankSummary*>& ranks) {
  std::vector<RankMemoryUse> out;
  for (const pattern::RankSummary* r : ranks) {
    for (const pattern::DeviceMemory& d : r->memory) {
      RankMemoryUse& m = out.emplace_back();
      m.rank = r->rank;
      m.device = d.device;
      m.peak_allocated_bytes = d.peak_allocated_bytes;
      m.peak_reserved_bytes = d.peak_reserved_bytes;
      m.start_bytes = d.start_allocated_bytes;
      m.end_bytes = d.end_allocated_bytes;
      m.failed_allocations = d.failed_allocations;
      m.largest_failed_bytes = d.largest_failed_bytes;
      m.iteration_end_bytes = d.iteration_end_bytes;
      m.iteration_peak_bytes = d.iteration_peak_bytes;
      if (r->iteration_steps.size() == d.iteration_end_bytes.size())
        m.iteration_numbers = r->iteration_steps;
      m.iterations = static_cast<int>(d.iteration_end_bytes.size());
      m.bytes_per_iteration = MemorySlope(d.iteration_end_bytes);
      AddKept(*r, &m);
    }
    // Kept memory of a device the trace has no records of: the Python tracer's sampled heap in
    // a window without profile_memory (a torch without Kineto).
    for (const pattern::MemorySite& site : r->memory_sites) {
      const auto has = [&](const pattern::DeviceMemory& d) { return d.device == site.device; };
      if (std::any_of(r->memory.begin(), r->memory.end(), has)) continue;
      const auto row = [&](const RankMemoryUse& m) {
        return m.rank == r->rank && m.device == site.device;
      };
      if (std::any_of(out.begin(), out.end(), row)) continue;
      RankMemoryUse& m = out.emplace_back();
      m.rank = r->rank;
      m.device = site.device;
      AddKept(*r, &m);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const RankMemoryUse& a, const RankMemoryUse& b) { return a.rank < b.rank; });
  return out;
}

std::vector<Finding> TraceMemoryFindings(const std::vector<RankMemoryUse>& memory, size_t job_ranks,
                                         const std::map<int, std::string>& hosts) {
  std::vector<const RankMemoryUse*> grow_host, grow_gpu, failed;
  for (const RankMemoryUse& m : memory) {
    if (TraceMemoryGrows(m.iteration_end_bytes)) (m.host() ? grow_host : grow_gpu).push_back(&m);
    if (m.failed_allocations > 0) failed.push_back(&m);
  }
  std::vector<Finding> out;
  for (const auto* grow : {&grow_gpu, &grow_host}) {
    if (!grow->empty()) out.push_back(GrowthFinding(*grow, job_ranks, hosts));
  }
  if (!failed.empty()) out.push_back(FailedAllocationFinding(failed, hosts));
  return out;
}

void NameMemorySites(const std::vector<RankMemoryUse>& memory, std::vector<Finding>* findings) {
  for (Finding& f : *findings) {
    if (f.category != Category::kMemoryGrowth || f.evidence_text.count("kept_at")) continue;
    auto dev = f.evidence_text.find("device");
    auto kind = f.evidence_text.find("memory");
    const bool gpu = (kind != f.evidence_text.end() && kind->second == "gpu") ||
                     (dev != f.evidence_text.end() && dev->second.rfind("cuda", 0) == 0);
    // The place that kept the most on the finding's ranks and device kind, of those that kept
    // memory in most profiled iterations.
    const RankMemoryUse* where = nullptr;
    const KeptMemory* top = nullptr;
    for (const RankMemoryUse& m : memory) {
      if (m.online() || m.host() == gpu ||
          !std::binary_search(f.ranks.begin(), f.ranks.end(), m.rank))
        continue;
      for (const KeptMemory& k : m.kept) {
        if (k.kept_iterations < policy::kKeptMemoryShare * k.counted_iterations) continue;
        if (top == nullptr || k.bytes_per_iteration > top->bytes_per_iteration) {
          top = &k;
          where = &m;
        }
      }
    }
    if (top == nullptr) continue;
    FunctionRef fn;
    fn.name = top->function;
    // Kineto names a Python frame "file.py(line): function"; otherwise the place is an op.
    fn.kind = trace::EventKindName(top->function.find(".py(") != std::string::npos
                                       ? trace::EventKind::kPythonFunction
                                       : trace::EventKind::kCpuOp);
    fn.stack = top->stack;
    f.functions.insert(f.functions.begin(), std::move(fn));
    f.evidence["kept_bytes_per_iteration"] = top->bytes_per_iteration;
    f.evidence_text["kept_at"] = top->function;
    if (!top->op.empty()) f.evidence_text["kept_by_op"] = top->op;
    std::vector<std::string> how;
    if (!top->op.empty()) how.push_back(top->op);
    if (!top->stack.empty()) how.push_back("called from " + top->stack.back());
    f.summary += fmt::format(
        "; kept at {}{}: {} per iteration in {} of rank {}'s {} profiled "
        "iterations",
        top->function, how.empty() ? "" : fmt::format(" ({})", fmt::join(how, ", ")),
        MemoryBytes(top->bytes_per_iteration), top->kept_iterations, where->rank,
        top->counted_iterations);
  }
}

std::vector<Finding> MemoryPeakChanges(const std::vector<RankMemoryUse>& base,
                                       const std::vector<RankMemoryUse>& test,
                                       const std::string& base_name, const std::string& test_name) {
  std::map<std::pair<int, std::string>, const RankMemoryUse*> before;
  for (const RankMemoryUse& m : base) before[{m.rank, m.device}] = &m;
  // Per kind of device (host, GPU): the ranks whose peak rose, the largest rise, and how many
  // ranks both sides have.
  struct Rise {
    std::vector<int> ranks;
    const RankMemoryUse* top_test = nullptr;
    const RankMemoryUse* top_base = nullptr;
    size_t compared = 0;
  };
  std::map<bool, Rise> rises;  // key: a GPU
  for (const RankMemoryUse& t : test) {
    auto it = before.find({t.rank, t.device});
    if (it == before.end()) continue;
    const RankMemoryUse& b = *it->second;
    Rise& r = rises[!t.host()];
    ++r.compared;
    const double rise = t.peak_allocated_bytes - b.peak_allocated_bytes;
    if (rise < policy::kMemoryPeakMinBytes ||
        rise < policy::kMemoryPeakRise * b.peak_allocated_bytes)
      continue;
    r.ranks.push_back(t.rank);
    if (r.top_test == nullptr ||
        rise > r.top_test->peak_allocated_bytes - r.top_base->peak_allocated_bytes) {
      r.top_test = &t;
      r.top_base = &b;
    }
  }
  std::vector<Finding> out;
  for (auto& [gpu, r] : rises) {
    if (r.ranks.empty()) continue;
    Finding f;
    f.category = Category::kMemoryPeak;
    f.cause = Cause::kSoftware;
    std::sort(r.ranks.begin(), r.ranks.end());
    r.ranks.erase(std::unique(r.ranks.begin(), r.ranks.end()), r.ranks.end());
    f.ranks = r.ranks;
    f.finding_class = r.ranks.size() >= r.compared ? FindingClass::kAll : FindingClass::kSubset;
    const double b = r.top_base->peak_allocated_bytes, t = r.top_test->peak_allocated_bytes;
    f.evidence["peak_allocated_bytes"] = t;
    f.evidence["base_peak_allocated_bytes"] = b;
    f.evidence_text["device"] = r.top_test->device;
    const bool one = f.ranks.size() == 1;
    f.summary = fmt::format(
        "{} peak allocated memory on {} is higher in {}: {}{} in {}, {} in {}{}", Whose(f.ranks),
        one   ? r.top_test->device
        : gpu ? "their GPUs"
              : "the host",
        test_name, one ? "" : fmt::format("rank {}'s ", r.top_test->rank), MemoryBytes(b),
        base_name, MemoryBytes(t), test_name,
        b > 0 ? fmt::format(" (+{:.0f}%)", 100 * (t / b - 1)) : "");
    f.suggestion =
        "a larger batch or sequence, a model or optimizer change, or tensors kept longer (outputs "
        "held past the step, gradients not set to None): compare the two runs' inputs and what "
        "each iteration keeps; a rank's peak close to its device's memory ends in an out-of-"
        "memory error";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace perftracker::diagnose
