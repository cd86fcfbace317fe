#include "pattern/memory_sites.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "pattern/memory_use.h"

namespace perftracker::pattern {

bool IsProgramFrame(std::string_view name) {
  // A Python frame is "file(line): function"; "<built-in ...>", "<gc>" are none. Code run from
  // a string ("<string>(5): step", python -c) is the program's.
  const size_t fn = name.rfind("): ");
  if (name.empty() || fn == std::string_view::npos || name.rfind("<built-in", 0) == 0) return false;
  // A comprehension's frame (Python before 3.12 gives it one) is its function's work.
  const std::string_view f = name.substr(fn + 3);
  if (f == "<listcomp>" || f == "<dictcomp>" || f == "<setcomp>" || f == "<genexpr>") return false;
  // The collector's tensor recorder runs inside the op it follows: the op's caller made it.
  if (name.find(kKeptTensorsFile) != std::string_view::npos) return false;
  // Kineto names torch's files from the package down; an installed copy may show its path.
  return name.rfind("torch/", 0) != 0 && name.find("/torch/") == std::string_view::npos;
}

uint16_t MemorySiteBuilder::Index(std::vector<int64_t>* table, int64_t key) {
  // Tables stay small (a process's threads, a host's devices): a scan is cheapest, and most
  // records repeat the last key.
  if (!table->empty() && table->back() == key) return static_cast<uint16_t>(table->size() - 1);
  for (size_t i = 0; i < table->size(); ++i)
    if ((*table)[i] == key) return static_cast<uint16_t>(i);
  if (table->size() >= UINT16_MAX) return UINT16_MAX;
  table->push_back(key);
  return static_cast<uint16_t>(table->size() - 1);
}

void MemorySiteBuilder::Add(const trace::MemoryEvent& e, int iteration) {
  if (gave_up_ || e.addr < 0 || e.bytes == 0 || e.out_of_memory) {
    ++dropped_;
    return;
  }
  const uint16_t thread = Index(&threads_, e.tid);
  const uint16_t device = Index(
      &devices_, (static_cast<int64_t>(e.device_type) << 32) | static_cast<uint32_t>(e.device_id));
  if (thread == UINT16_MAX || device == UINT16_MAX) {
    ++dropped_;
    return;
  }
  if (records_.size() >= compact_at_) {
    Compact(/*final=*/false);
    // The live set stays: compact again once as many records more have come.
    compact_at_ = std::max(kFirstCompaction, 2 * records_.size());
    if (compact_at_ > kMaxRecords) {
      // Half the bound is live allocations: a trace that keeps everything. Sites from part of
      // its records would be wrong; say so instead.
      gave_up_ = true;
      dropped_ += records_.size() + 1;
      std::vector<Record>().swap(records_);
      return;
    }
  }
  records_.push_back({e.ts_us, e.addr, e.bytes, iteration, thread, device});
}

void MemorySiteBuilder::Compact(bool final) {
  auto order = [](const Record& a, const Record& b) {
    // At one time, the allocation before the free.
    return std::tie(a.device, a.addr, a.ts, b.bytes) < std::tie(b.device, b.addr, b.ts, a.bytes);
  };
  std::sort(records_.begin(), records_.end(), order);
  size_t out = 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    const Record& r = records_[i];
    if (r.bytes < 0) continue;  // a free whose allocation came before the trace
    const bool next_same = i + 1 < records_.size() && records_[i + 1].device == r.device &&
                           records_[i + 1].addr == r.addr;
    if (next_same && records_[i + 1].bytes < 0) {
      ++i;  // freed: drop both
      continue;
    }
    if (next_same && final) continue;  // allocated again: this one's free went unrecorded
    records_[out++] = r;
  }
  records_.resize(out);
}

void MemorySiteBuilder::Pair() {
  if (gave_up_) return;
  Compact(/*final=*/true);
  live_.reserve(records_.size());
  for (const Record& r : records_)
    live_.push_back({r.ts, r.bytes, r.iteration, r.thread, r.device, kNoSite, kNoSite});
  std::vector<Record>().swap(records_);
  std::sort(live_.begin(), live_.end(), [](const Live& a, const Live& b) {
    return a.thread != b.thread ? a.thread < b.thread : a.ts < b.ts;
  });
}

std::span<MemorySiteBuilder::Live> MemorySiteBuilder::OfThread(int64_t tid) {
  auto t = std::find(threads_.begin(), threads_.end(), tid);
  if (t == threads_.end()) return {};
  const auto thread = static_cast<uint16_t>(t - threads_.begin());
  auto [lo, hi] =
      std::equal_range(live_.begin(), live_.end(), Live{0, 0, -1, thread, 0, kNoSite, kNoSite},
                       [](const Live& a, const Live& b) { return a.thread < b.thread; });
  return {lo, hi};
}

std::vector<MemorySite> MemorySiteBuilder::Build(const std::vector<size_t>& steady,
                                                 const NameOf& name_of) const {
  if (steady.size() < 2 || live_.empty()) return {};
  // The steady iterations but the last: what they allocated outlived at least one iteration
  // after theirs. The last one's may be its gradients, which the next step frees.
  const std::set<size_t> counted(steady.begin(), steady.end() - 1);
  struct Acc {
    double bytes = 0;
    uint64_t allocations = 0;
    std::set<int32_t> iterations;
  };
  std::map<std::tuple<uint16_t, uint32_t, uint32_t>, Acc> by_site;  // device, site, op
  for (const Live& l : live_) {
    if (l.iteration < 0 || !counted.count(static_cast<size_t>(l.iteration))) continue;
    Acc& a = by_site[{l.device, l.site, l.op}];
    a.bytes += static_cast<double>(l.bytes);
    ++a.allocations;
    a.iterations.insert(l.iteration);
  }
  std::map<uint16_t, std::vector<MemorySite>> per_device;
  for (const auto& [key, a] : by_site) {
    MemorySite s;
    const auto [device, site, op] = key;
    const int64_t d = devices_[device];
    s.device = MemoryDeviceName(static_cast<int32_t>(d >> 32), static_cast<int32_t>(d));
    if (site != kNoSite) std::tie(s.function, s.stack) = name_of(site);
    if (op != kNoSite) s.op = name_of(op).first;
    s.kept_bytes = a.bytes;
    s.kept_iterations = static_cast<uint32_t>(a.iterations.size());
    s.counted_iterations = static_cast<uint32_t>(counted.size());
    s.allocations = a.allocations;
    per_device[device].push_back(std::move(s));
  }
  std::vector<MemorySite> out;
  for (auto& [device, sites] : per_device) {
    std::sort(sites.begin(), sites.end(), [](const MemorySite& a, const MemorySite& b) {
      return a.kept_bytes != b.kept_bytes ? a.kept_bytes > b.kept_bytes : a.function < b.function;
    });
    if (sites.size() > RankSummary::kMaxMemorySites) sites.resize(RankSummary::kMaxMemorySites);
    for (MemorySite& s : sites) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace perftracker::pattern
