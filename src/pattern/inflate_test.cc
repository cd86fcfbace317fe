#include "pattern/inflate.h"

#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

namespace perftracker::pattern {
namespace {

// Bytes that compress a little (so frames are not stored raw) and differ per seed.
std::string Payload(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>('a' + rng() % 8);
  return s;
}

std::string Zstd(const std::string& payload) {
  std::string z(ZSTD_compressBound(payload.size()), '\0');
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  const size_t n = ZSTD_compress2(cctx, z.data(), z.size(), payload.data(), payload.size());
  ZSTD_freeCCtx(cctx);
  z.resize(n);
  return z;
}

std::string Zlib(const std::string& payload) {
  uLongf n = compressBound(payload.size());
  std::string z(n, '\0');
  compress2(reinterpret_cast<Bytef*>(z.data()), &n,
            reinterpret_cast<const Bytef*>(payload.data()), payload.size(), 6);
  z.resize(n);
  return z;
}

TEST(ByteBufferTest, ReserveKeepsTheBytesAndTrimFreesOnlyLargeBuffers) {
  ByteBuffer b;
  EXPECT_EQ(b.capacity(), 0u);
  b.Resize(3);
  std::memcpy(b.data(), "abc", 3);
  b.Reserve(1000);
  EXPECT_EQ(b.capacity(), 1000u);  // exactly: no doubling past what was asked
  EXPECT_EQ(b.view(), "abc");
  b.Reserve(10);  // never shrinks
  EXPECT_EQ(b.capacity(), 1000u);
  b.Clear();
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.capacity(), 1000u);
  b.Trim(1000);
  EXPECT_EQ(b.capacity(), 1000u);
  b.Trim(999);
  EXPECT_EQ(b.capacity(), 0u);
}

// One buffer (and this thread's one zstd decoder) through frames of different sizes, as a
// loader thread goes from file to file: each comes out whole, and a smaller one after a larger
// one needs no new memory.
TEST(InflateTest, FramesOfDifferentSizesInARowOnOneBuffer) {
  ByteBuffer out;
  for (size_t n : {size_t{200000}, size_t{1000}, size_t{150000}, size_t{0}, size_t{300000}}) {
    const std::string payload = Payload(n, static_cast<unsigned>(n));
    const size_t capacity_before = out.capacity();
    ASSERT_EQ(Inflate(3, Zstd(payload), n, &out), Inflated::kOk) << n;
    EXPECT_EQ(out.view(), payload) << n;
    if (n < capacity_before) {
      EXPECT_EQ(out.capacity(), capacity_before) << n;
    }
    // Grown only to what the frame needed (SIZE and the byte that catches overruns).
    EXPECT_LE(out.capacity(), std::max(capacity_before, n + 1)) << n;
  }
  for (size_t n : {size_t{100000}, size_t{10}}) {
    const std::string payload = Payload(n, 7);
    ASSERT_EQ(Inflate(2, Zlib(payload), n, &out), Inflated::kOk) << n;
    EXPECT_EQ(out.view(), payload);
  }
}

// A small frame that declares a large size: the buffer grows only with what arrives.
TEST(InflateTest, ADeclaredSizeThatIsNotDeliveredCostsLittle) {
  const std::string payload = Payload(10, 1);
  const uint64_t declared = 16u << 20;
  for (uint32_t version : {2u, 3u}) {
    ByteBuffer fresh;
    const std::string z = version == 3 ? Zstd(payload) : Zlib(payload);
    EXPECT_EQ(Inflate(version, z, declared, &fresh), Inflated::kCorrupt);
    EXPECT_LE(fresh.capacity(), size_t{64} << 10) << version;
    // A buffer kept from earlier files is used as it is, not grown.
    ByteBuffer used;
    used.Reserve(300000);
    EXPECT_EQ(Inflate(version, z, declared, &used), Inflated::kCorrupt);
    EXPECT_EQ(used.capacity(), 300000u) << version;
  }
}

// A frame longer than declared is corrupt, and nothing is written past the declared size and
// the one byte that catches it, even into capacity an earlier file left.
TEST(InflateTest, AFrameLongerThanDeclaredIsCorruptAndWritesNoFurther) {
  const std::string payload = Payload(50000, 2);
  for (uint32_t version : {2u, 3u}) {
    const std::string z = version == 3 ? Zstd(payload) : Zlib(payload);
    for (uint64_t declared : {uint64_t{1000}, uint64_t{49999}, uint64_t{0}}) {
      ByteBuffer out;
      out.Reserve(100000);
      std::memset(out.data(), '#', out.capacity());
      EXPECT_EQ(Inflate(version, z, declared, &out), Inflated::kCorrupt) << declared;
      const std::string_view all(out.data(), out.capacity());
      EXPECT_EQ(all.find_first_not_of('#', declared + 1), std::string_view::npos)
          << version << " " << declared;
      ByteBuffer fresh;
      EXPECT_EQ(Inflate(version, z, declared, &fresh), Inflated::kCorrupt) << declared;
      EXPECT_LE(fresh.capacity(), std::max<size_t>(declared + 1, 64u << 10)) << declared;
    }
  }
}

// A cut or damaged frame leaves the thread's decoder ready for the next one.
TEST(InflateTest, TruncatedAndCorruptFramesThenAGoodOne) {
  const std::string payload = Payload(120000, 3);
  const std::string z = Zstd(payload);
  ByteBuffer out;
  for (size_t cut : {z.size() / 2, z.size() - 1, size_t{5}}) {
    EXPECT_EQ(Inflate(3, std::string_view(z).substr(0, cut), payload.size(), &out),
              Inflated::kTruncated)
        << cut;
    ASSERT_EQ(Inflate(3, z, payload.size(), &out), Inflated::kOk) << cut;
    EXPECT_EQ(out.view(), payload);
  }
  std::string bad = z;
  bad[bad.size() / 2] ^= 0x55;
  EXPECT_EQ(Inflate(3, bad, payload.size(), &out), Inflated::kCorrupt);
  std::string bad_sum = z;
  bad_sum.back() ^= 1;  // the frame's checksum
  EXPECT_EQ(Inflate(3, bad_sum, payload.size(), &out), Inflated::kCorrupt);
  EXPECT_EQ(Inflate(3, "not a zstd frame at all", payload.size(), &out), Inflated::kCorrupt);
  ASSERT_EQ(Inflate(3, z, payload.size(), &out), Inflated::kOk);
  EXPECT_EQ(out.view(), payload);

  const std::string zl = Zlib(payload);
  EXPECT_EQ(Inflate(2, std::string_view(zl).substr(0, zl.size() / 2), payload.size(), &out),
            Inflated::kTruncated);
  ASSERT_EQ(Inflate(2, zl, payload.size(), &out), Inflated::kOk);
  EXPECT_EQ(out.view(), payload);
}

}  // namespace
}  // namespace perftracker::pattern
