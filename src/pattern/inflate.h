// Inflating a summary's payload (pattern/summary_io.h) into a buffer that one thread reuses
// from file to file. Loading 100,000 summaries created and freed a zstd decoder and a fresh
// output buffer per file: a fifth of the load went to setting up decoders, growing buffers and
// faulting their pages in. Here the decoder is one per thread (reset between frames) and the
// output keeps its capacity, so a typical file inflates in one call straight into memory that
// is already there.
#ifndef PERFTRACKER_PATTERN_INFLATE_H_
#define PERFTRACKER_PATTERN_INFLATE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace perftracker::pattern {

// Bytes with a capacity that outlives their contents: clearing keeps the storage, growing
// allocates exactly what is asked (no doubling past it) and leaves new bytes uninitialized.
class ByteBuffer {
 public:
  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  std::string_view view() const { return {data_.get(), size_}; }

  // Capacity of at least N bytes, keeping the first size() bytes.
  void Reserve(size_t n);
  // N bytes (reserved first if needed); bytes past the old size are not initialized.
  void Resize(size_t n) {
    Reserve(n);
    size_ = n;
  }
  void Clear() { size_ = 0; }
  // Frees the storage if it is larger than MAX, so one outsized input is not held for good.
  void Trim(size_t max);

 private:
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

enum class Inflated { kOk, kTruncated, kCorrupt, kError };

// Inflates SRC (a zstd frame for VERSION 3 and later, a zlib stream for version 2) into OUT,
// which must come out exactly SIZE bytes; OUT->size() is then SIZE. OUT's existing capacity
// (up to SIZE + 1) is used as it is; beyond it the buffer grows with what the stream actually
// yields, never ahead of it: a small file that declares a large size and then does not deliver
// costs little, and nothing past SIZE + 1 (the byte that catches a stream longer than
// declared) is ever written. SIZE is at most limits::kMaxSummaryPayload. The zstd decoder is
// this thread's, reused.
Inflated Inflate(uint32_t version, std::string_view src, uint64_t size, ByteBuffer* out);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_INFLATE_H_
