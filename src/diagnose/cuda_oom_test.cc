#include "diagnose/cuda_oom.h"

#include <gtest/gtest.h>

namespace perftracker::diagnose {
namespace {

constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;

TEST(ParseTorchSize, UnitsAsTorchPrintsThem) {
  EXPECT_EQ(ParseTorchSize("2.00 GiB"), 2 * kGiB);
  EXPECT_EQ(ParseTorchSize("20.00 MiB"), 20 * kMiB);
  EXPECT_EQ(ParseTorchSize(" 512 bytes "), 512);
  EXPECT_EQ(ParseTorchSize("1.5 GB"), 1.5 * kGiB);
  EXPECT_FALSE(ParseTorchSize("2.00"));
  EXPECT_FALSE(ParseTorchSize("many GiB"));
  EXPECT_FALSE(ParseTorchSize("2.00 parsecs"));
  EXPECT_FALSE(ParseTorchSize("-1 GiB"));
}

TEST(FindCudaOom, Torch2Message) {
  const std::vector<std::string> lines = {
      "Traceback (most recent call last):", "  File \"train.py\", line 40, in <module>",
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
      "capacity of 79.15 GiB of which 1.19 GiB is free. Including non-PyTorch memory, this "
      "process has 77.95 GiB memory in use. Of the allocated memory 75.30 GiB is allocated by "
      "PyTorch, and 1.52 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
      "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
      "fragmentation."};
  std::optional<CudaOom> o = FindCudaOom(lines);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->gpu, 3);
  EXPECT_DOUBLE_EQ(o->requested_bytes, 2 * kGiB);
  EXPECT_DOUBLE_EQ(o->total_bytes, 79.15 * kGiB);
  EXPECT_DOUBLE_EQ(o->free_bytes, 1.19 * kGiB);
  EXPECT_DOUBLE_EQ(o->allocated_bytes, 75.30 * kGiB);
  EXPECT_DOUBLE_EQ(o->reserved_unallocated_bytes, 1.52 * kGiB);
}

TEST(FindCudaOom, Torch113MessageAndNone) {
  std::optional<CudaOom> o = FindCudaOom(
      {"RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total "
       "capacity; 14.50 GiB already allocated; 8.75 MiB free; 14.90 GiB reserved in total by "
       "PyTorch)"});
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->gpu, 0);
  EXPECT_DOUBLE_EQ(o->requested_bytes, 20 * kMiB);
  EXPECT_DOUBLE_EQ(o->total_bytes, 15.78 * kGiB);
  EXPECT_DOUBLE_EQ(o->allocated_bytes, 14.50 * kGiB);
  EXPECT_DOUBLE_EQ(o->free_bytes, 8.75 * kMiB);
  EXPECT_DOUBLE_EQ(o->reserved_bytes, 14.90 * kGiB);
  EXPECT_NEAR(o->reserved_unallocated_bytes, 0.40 * kGiB, 1e3);
  EXPECT_FALSE(FindCudaOom({"RuntimeError: shapes cannot be multiplied", ""}));
  // Cut short (a tail keeps the start of a long line): what it holds.
  o = FindCudaOom({"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU"});
  ASSERT_TRUE(o.has_value());
  EXPECT_DOUBLE_EQ(o->requested_bytes, 2 * kGiB);
  EXPECT_EQ(o->total_bytes, -1);
}

}  // namespace
}  // namespace perftracker::diagnose
