#include "worker/heap_sampler.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace perftracker::worker {
namespace {

constexpr size_t kTableSlots = HeapSampler::kMaxLive * 2;  // at most half full: short probes
static_assert((kTableSlots & (kTableSlots - 1)) == 0, "a power of two: the home is a shift");
constexpr int kTableBits = 17;
static_assert(size_t{1} << kTableBits == kTableSlots);

}  // namespace

void HeapSampler::Begin(uint64_t seed, int64_t mean_bytes) {
  mean_ = std::max<int64_t>(1, mean_bytes);
  rng_ = seed | 1;  // xorshift's state must not be zero
  table_.assign(kTableSlots, Slot{0, 0, 0, 0, 0});
  std::fill(filter_.begin(), filter_.end(), 0);
  live_ = 0;
  samples_ = dropped_ = 0;
  countdown_ = NextCountdown();
  active_ = true;
}

KeptHeap HeapSampler::Finish() {
  KeptHeap out;
  if (!active_) return out;
  out.sample_bytes = mean_;
  out.samples = samples_;
  out.dropped = dropped_;
  std::vector<Slot> kept;
  kept.reserve(live_);
  for (const Slot& s : table_)
    if (s.addr != 0) kept.push_back(s);
  std::sort(kept.begin(), kept.end(), [](const Slot& a, const Slot& b) {
    return std::tie(a.node, a.iteration, a.op) < std::tie(b.node, b.iteration, b.op);
  });
  for (const Slot& s : kept) {
    if (out.cells.empty() || out.cells.back().node != s.node ||
        out.cells.back().iteration != s.iteration || out.cells.back().op != s.op)
      out.cells.push_back(KeptHeapCell{s.node, s.iteration, 0, 0, s.op});
    out.cells.back().bytes += s.weight;
    ++out.cells.back().samples;
  }
  std::vector<Slot>().swap(table_);
  live_ = 0;
  active_ = false;
  countdown_ = INT64_MAX;
  return out;
}

int64_t HeapSampler::NextCountdown() {
  // xorshift64*: the countdowns need only be independent of the program's allocation sizes.
  rng_ ^= rng_ >> 12;
  rng_ ^= rng_ << 25;
  rng_ ^= rng_ >> 27;
  const uint64_t r = rng_ * 0x2545F4914F6CDD1DULL;
  const double u = (static_cast<double>(r >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  return std::max<int64_t>(1, static_cast<int64_t>(-std::log(u) * static_cast<double>(mean_)));
}

size_t HeapSampler::Home(uintptr_t addr) const {
  return static_cast<size_t>(Hash(addr) >> (64 - kTableBits));
}

void HeapSampler::Record(uintptr_t addr, size_t n, uint32_t node, int32_t iteration) {
  countdown_ = NextCountdown();
  if (!active_ || addr == 0) return;
  // The block stands for the bytes of the allocations the countdown passed over (see header).
  const double s = static_cast<double>(n);
  const double m = static_cast<double>(mean_);
  const double weight = n == 0 ? m : s / -std::expm1(-s / m);
  Insert(Slot{addr, weight, node, iteration, 0});
}

void HeapSampler::RecordBlock(uintptr_t addr, size_t n, uint32_t node, int32_t iteration,
                              uint32_t op) {
  if (!active_ || addr == 0 || n == 0) return;
  Insert(Slot{addr, static_cast<double>(n), node, iteration, op});
}

void HeapSampler::Insert(const Slot& slot) {
  ++samples_;
  if (live_ >= kMaxLive) {
    ++dropped_;
    return;
  }
  size_t i = Home(slot.addr);
  while (table_[i].addr != 0 && table_[i].addr != slot.addr) i = (i + 1) & (kTableSlots - 1);
  if (table_[i].addr == 0) {
    ++live_;
    uint8_t& f = filter_[Hash(slot.addr) >> (64 - kFilterBits)];
    if (f < UINT8_MAX) ++f;
  }
  table_[i] = slot;
}

void HeapSampler::Erase(uintptr_t addr) {
  size_t i = Home(addr);
  while (table_[i].addr != addr) {
    if (table_[i].addr == 0) return;  // not sampled
    i = (i + 1) & (kTableSlots - 1);
  }
  // Backward-shift deletion: the slots after it that would be reachable from before the hole
  // move into it, so that probes never need tombstones.
  size_t hole = i;
  for (size_t j = (i + 1) & (kTableSlots - 1); table_[j].addr != 0;
       j = (j + 1) & (kTableSlots - 1)) {
    const size_t home = Home(table_[j].addr);
    // j's entry may fill the hole when its home is not in (hole, j] (cyclically).
    const bool in_between = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!in_between) {
      table_[hole] = table_[j];
      hole = j;
    }
  }
  table_[hole] = Slot{0, 0, 0, 0, 0};
  --live_;
  uint8_t& f = filter_[Hash(addr) >> (64 - kFilterBits)];
  if (f < UINT8_MAX) --f;
}

}  // namespace perftracker::worker
