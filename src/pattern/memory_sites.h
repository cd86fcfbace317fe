// Where a trace's memory was kept (RankSummary::memory_sites): from profile_memory's records,
// the allocations made in a steady iteration before the last that the trace never saw freed,
// summed by the place that allocated them. A leak keeps memory at one place in every iteration;
// that place is what a memory_growth finding names (diagnose/trace_memory.h NameMemorySites).
//
// The summarizer feeds every memory record (Add), then, once the trace is read, pairs each
// free with its allocation (Pair), walks each thread's remaining allocations beside its events
// to set their place (OfThread; the summarizer knows the nesting), and builds the sites
// (Build). Memory is bounded: a record is 32 bytes, matched pairs are dropped as the records
// grow (what remains is the live set and no more), and past kMaxRecords the builder gives up
// (dropped()): a site list built from a partial record would call freed memory kept.
#ifndef PERFTRACKER_PATTERN_MEMORY_SITES_H_
#define PERFTRACKER_PATTERN_MEMORY_SITES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pattern/pattern.h"
#include "trace/event.h"

namespace perftracker::pattern {

// Whether a Python frame's name is the program's own: not a C function it called
// ("<built-in method ones of type object at 0x...>"), a comprehension inside a function
// ("train.py(42): <listcomp>") nor torch's own Python
// ("torch/nn/modules/module.py(1736): _call_impl") nor the collector's tensor recorder
// (kKeptTensorsFile), so that kept memory is placed where the
// program asked for it. "train.py(42): keep" -> true.
bool IsProgramFrame(std::string_view name);
// The file of the collector's tensor recorder (python/perftracker/kept_tensors.py), whose frame
// sits between an op and the program's call in a window that follows tensors: never the place.
inline constexpr std::string_view kKeptTensorsFile = "perftracker/kept_tensors.py(";

class MemorySiteBuilder {
 public:
  // The records held at once, after dropping matched pairs: a window's live set is thousands
  // of tensors; 2 M records (64 MiB) is a trace that allocates without freeing at all.
  static constexpr size_t kMaxRecords = size_t{1} << 21;
  static constexpr uint32_t kNoSite = UINT32_MAX;

  // An allocation still live at the trace's end.
  struct Live {
    double ts = 0;
    int64_t bytes = 0;
    int32_t iteration = -1;  // the summarizer's index; -1 outside every iteration
    uint16_t thread = 0;     // into the builder's thread table
    uint16_t device = 0;     // into its device table
    // Set by the caller's walk (OfThread), read by Build: the place, and under a Python
    // function the op that allocated.
    uint32_t site = kNoSite;
    uint32_t op = kNoSite;
    void Place(uint32_t at, uint32_t by_op) {
      site = at;
      op = by_op;
    }
  };

  // A record at iteration ITERATION (-1: outside them). Records without an address are not
  // pairable and are left out.
  void Add(const trace::MemoryEvent& e, int iteration);

  // Pairs frees with their allocations; what is left are the live allocations, ordered by
  // thread and time. Call once, after the last Add.
  void Pair();

  // The live allocations of thread TID in time order (empty when none), for the caller to set
  // `site` on.
  std::span<Live> OfThread(int64_t tid);
  // Every live allocation (to rewrite sites after the walk).
  std::span<Live> live() { return live_; }

  // The sites of the allocations made in STEADY iterations (the summarizer's indices) but the
  // last, most kept bytes first, at most RankSummary::kMaxMemorySites per device. NAME_OF
  // gives a site's (or an op's) function and stack.
  using NameOf = std::function<std::pair<std::string, std::string>(uint32_t site)>;
  std::vector<MemorySite> Build(const std::vector<size_t>& steady, const NameOf& name_of) const;

  bool gave_up() const { return gave_up_; }
  uint64_t dropped() const { return dropped_; }

 private:
  struct Record {
    double ts;
    int64_t addr;
    int64_t bytes;  // negative: a free
    int32_t iteration;
    uint16_t thread;
    uint16_t device;
  };
  static_assert(sizeof(Record) == 32);

  // Sorts the records by device, address and time and drops each allocation that a free of the
  // same address follows, and the frees nothing before them allocated. FINAL: also drops an
  // allocation another allocation of its address follows (its free went unrecorded).
  void Compact(bool final);
  uint16_t Index(std::vector<int64_t>* table, int64_t key);

  std::vector<Record> records_;
  size_t compact_at_ = kFirstCompaction;
  static constexpr size_t kFirstCompaction = 1 << 16;
  std::vector<int64_t> threads_;  // tid by index
  std::vector<int64_t> devices_;  // (type << 32 | id) by index
  std::vector<Live> live_;
  bool gave_up_ = false;
  uint64_t dropped_ = 0;  // records not held: no address, a table full, or after giving up
};

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_MEMORY_SITES_H_
