#include "worker/heap_sampler.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>

namespace perftracker::worker {
namespace {

// What an allocator hook does with each allocation.
void Alloc(HeapSampler* s, uintptr_t addr, size_t n, uint32_t node, int32_t iteration) {
  if (s->Countdown(n)) s->Record(addr, n, node, iteration);
}

double KeptAt(const KeptHeap& k, uint32_t node) {
  double b = 0;
  for (const KeptHeapCell& c : k.cells)
    if (c.node == node) b += c.bytes;
  return b;
}

TEST(HeapSampler, TheSampledWeightsEstimateTheBytesKeptSmallBlocksAndLarge) {
  HeapSampler s;
  s.Begin(/*seed=*/42);
  uintptr_t addr = 0x10000;
  // Node 3 keeps 32 MiB in 32-byte objects (a list of floats); node 5 keeps 24 blocks of 1 MiB;
  // node 7 allocates 64 MiB in 256-byte blocks and frees each at once (a step's temporaries).
  for (int i = 0; i < (32 << 20) / 32; ++i, addr += 32) Alloc(&s, addr, 32, 3, 0);
  for (int i = 0; i < 24; ++i, addr += 1 << 20) Alloc(&s, addr, 1 << 20, 5, 1);
  for (int i = 0; i < (64 << 20) / 256; ++i) {
    Alloc(&s, 0x7f0000000000 + 256 * (i % 64), 256, 7, 2);
    s.Forget(0x7f0000000000 + 256 * (i % 64));
  }
  const KeptHeap k = s.Finish();
  EXPECT_EQ(k.sample_bytes, kHeapSampleMeanBytes);
  EXPECT_NEAR(KeptAt(k, 3), 32 << 20, 0.1 * (32 << 20));
  EXPECT_NEAR(KeptAt(k, 5), 24 << 20, 0.05 * (24 << 20));  // a 1 MiB block is almost always hit
  EXPECT_EQ(KeptAt(k, 7), 0);
  EXPECT_GT(k.samples, 1000u);  // node 7's were sampled too, and forgotten
  EXPECT_EQ(k.dropped, 0u);
  EXPECT_FALSE(s.active());
  EXPECT_EQ(s.live(), 0u);
}

TEST(HeapSampler, CellsAreByNodeThenIteration) {
  HeapSampler s;
  s.Begin(1, /*mean_bytes=*/1);  // every allocation of 10 bytes and up sampled (but once in e^10)
  Alloc(&s, 0x100, 10, 2, 1);
  Alloc(&s, 0x200, 10, 1, 0);
  Alloc(&s, 0x300, 10, 2, 0);
  Alloc(&s, 0x400, 10, 2, 1);
  Alloc(&s, 0x500, 10, 1, -1);
  const KeptHeap k = s.Finish();
  ASSERT_EQ(k.cells.size(), 4u);
  EXPECT_EQ(std::make_pair(k.cells[0].node, k.cells[0].iteration), std::make_pair(1u, -1));
  EXPECT_EQ(std::make_pair(k.cells[1].node, k.cells[1].iteration), std::make_pair(1u, 0));
  EXPECT_EQ(std::make_pair(k.cells[2].node, k.cells[2].iteration), std::make_pair(2u, 0));
  EXPECT_EQ(std::make_pair(k.cells[3].node, k.cells[3].iteration), std::make_pair(2u, 1));
  EXPECT_EQ(k.cells[3].samples, 2u);
  EXPECT_NEAR(k.cells[3].bytes, 20, 0.01);  // a block far above the mean weighs its size
}

TEST(HeapSampler, WholeBlocksWeighTheirSizeAndStayApartByOp) {
  HeapSampler s;
  s.Begin(7);
  // Tensors a window follows (1 KiB and 1 MiB, made by two ops at one node) beside a sampled
  // Python object at the same node; a followed block freed is forgotten.
  s.RecordBlock(0x1000, 1024, 4, 0, /*op=*/9);
  s.RecordBlock(0x2000, 1 << 20, 4, 0, /*op=*/9);
  s.RecordBlock(0x3000, 4096, 4, 0, /*op=*/11);
  s.RecordBlock(0x4000, 512, 4, 0, /*op=*/11);
  s.Forget(0x4000);
  s.Record(0x5000, 1 << 20, 4, 0);
  s.RecordBlock(0x6000, 0, 4, 0, 9);  // an empty tensor keeps nothing
  const KeptHeap k = s.Finish();
  ASSERT_EQ(k.cells.size(), 3u);
  EXPECT_EQ(k.cells[0].op, 0u);  // the sampled object: Python's
  EXPECT_EQ(k.cells[1].op, 9u);
  EXPECT_EQ(k.cells[1].bytes, 1024 + (1 << 20));  // exactly: not drawn, so not weighted
  EXPECT_EQ(k.cells[1].samples, 2u);
  EXPECT_EQ(k.cells[2].op, 11u);
  EXPECT_EQ(k.cells[2].bytes, 4096);
}

TEST(HeapSampler, WholeBlocksLeaveTheCountdownAlone) {
  // The same allocations sampled with and without followed blocks between them: the same draws.
  HeapSampler a, b;
  a.Begin(3, 4096);
  b.Begin(3, 4096);
  for (int i = 0; i < 1000; ++i) {
    Alloc(&a, 0x10000 + 64 * i, 64, 1, 0);
    b.RecordBlock(0x900000 + 64 * i, 1 << 16, 2, 0, 5);
    Alloc(&b, 0x10000 + 64 * i, 64, 1, 0);
  }
  EXPECT_EQ(KeptAt(a.Finish(), 1), KeptAt(b.Finish(), 1));
}

TEST(HeapSampler, ForgettingKeepsEveryOtherSampleFindable) {
  // Every allocation sampled, addresses that share homes, and a random half freed: what is left
  // is exactly the blocks not freed (the deletion must not lose entries that probed past a hole).
  HeapSampler s;
  s.Begin(7, 1);
  std::mt19937_64 rng(3);
  std::set<uintptr_t> live;
  for (int i = 0; i < 40000; ++i) {
    const uintptr_t a = (rng() % 200000 + 1) * 16;
    if (live.count(a)) {
      s.Forget(a);
      live.erase(a);
    } else {
      Alloc(&s, a, 16, static_cast<uint32_t>(a % 5), 0);
      live.insert(a);
    }
    if (i % 3 == 0 && !live.empty()) {
      const uintptr_t b = *live.begin();
      s.Forget(b);
      live.erase(b);
    }
  }
  EXPECT_EQ(s.live(), live.size());
  std::map<uint32_t, uint32_t> want;
  for (uintptr_t a : live) ++want[static_cast<uint32_t>(a % 5)];
  s.Forget(0x12345670);  // never sampled: nothing happens
  const KeptHeap k = s.Finish();
  std::map<uint32_t, uint32_t> got;
  for (const KeptHeapCell& c : k.cells) got[c.node] += c.samples;
  EXPECT_EQ(got, want);
}

TEST(HeapSampler, PastItsBoundNewSamplesAreDroppedAndCounted) {
  HeapSampler s;
  s.Begin(9, 1);
  for (size_t i = 1; i <= HeapSampler::kMaxLive + 10; ++i) Alloc(&s, i * 64, 64, 0, 0);
  EXPECT_EQ(s.live(), HeapSampler::kMaxLive);
  const KeptHeap k = s.Finish();
  EXPECT_EQ(k.dropped, 10u);
  EXPECT_EQ(k.samples, HeapSampler::kMaxLive + 10);
}

TEST(HeapSampler, IdleItSamplesNothingAndForgetsNothing) {
  HeapSampler s;
  EXPECT_FALSE(s.Countdown(1 << 30));
  s.Forget(0x1000);
  EXPECT_EQ(s.Finish().sample_bytes, 0);
}

}  // namespace
}  // namespace perftracker::worker
