// The bytes pass 1 of the trace reader (trace_scanner.h) scans, and where they come from: a
// mapped file, walked a read's worth at a time with its pages handed back to the source once
// they are behind the scan, or a stream read into a buffer that grows from 64 KiB (a rank's
// short trace clears no MiB-sized buffer) and keeps only the bytes of the value the scanner is
// still capturing. Bounds that value at ReaderTuning::max_value_bytes either way.
//
// Internal to the trace module.
#ifndef PERFTRACKER_TRACE_SCAN_INPUT_H_
#define PERFTRACKER_TRACE_SCAN_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "base/file_source.h"
#include "base/status.h"
#include "trace/reader_internal.h"

namespace perftracker::trace::internal {

class ScanInput {
 public:
  static constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();  // no offset

  // NAME: the trace's name in messages.
  ScanInput(const std::string& name, const ReaderTuning& tuning) : name_(name), tuning_(tuning) {}

  // Takes every byte of SRC (MAP, with MAP_SIZE bytes and kPad more after them, is the whole
  // input when the source is mapped; null to stream it through Read) and calls SCAN(from) each
  // time bytes [from, len()) at data() are new. SCAN's error ends it. E.g. a 100-byte stream
  // read 64 KiB at a time: SCAN(0) once, with len() 100.
  Status Feed(ByteSource* src, const char* map, size_t map_size,
              const std::function<Status(size_t from)>& scan);

  // The bytes at hand: data()[i] is byte base() + i of the input, for i < len().
  const char* data() const { return data_; }
  uint64_t base() const { return base_; }
  size_t len() const { return len_; }
  uint64_t total() const { return base_ + len_; }  // bytes taken so far
  // Byte AT of the input (at least base()) and the bytes [START, END) as a view.
  const char* At(uint64_t at) const { return data_ + (at - base_); }
  std::string_view View(uint64_t start, uint64_t end) const {
    return std::string_view(At(start), static_cast<size_t>(end - start));
  }

  // The bytes from AT on stay at hand until Drop(): the value starting there is still being
  // read whole.
  void Keep(uint64_t at) { keep_from_ = at; }
  void Drop() { keep_from_ = kNone; }

 private:
  Status FeedMapped(ByteSource* src, const char* map, size_t map_size,
                    const std::function<Status(size_t)>& scan);
  Status FeedStream(ByteSource* src, const std::function<Status(size_t)>& scan);
  Status TooLarge(uint64_t at) const;
  size_t MaxRead() const;
  size_t ReadSize(uint64_t so_far) const;

  // A stream's first read; later ones read as much as was read so far (doubling), up to
  // MaxRead. A small file (a rank's short trace) then clears no MiB-sized buffer (measured: the
  // fuzzer's 1 KiB inputs spent most of their 5 ms on it); a large one soon reads MaxRead.
  static constexpr size_t kFirstReadBytes = 64 << 10;

  const std::string name_;
  const ReaderTuning& tuning_;
  std::vector<char> buf_;       // streamed input
  const char* data_ = nullptr;  // buf_.data(), or the mapped input
  uint64_t base_ = 0;           // offset of data_[0] in the input
  size_t len_ = 0;
  uint64_t keep_from_ = kNone;
};

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_SCAN_INPUT_H_
