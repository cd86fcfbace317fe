#include "trace/scan_input.h"

#include <algorithm>
#include <cstring>

#include "trace/block_classifier.h"

namespace perftracker::trace::internal {

size_t ScanInput::MaxRead() const { return std::max<size_t>(tuning_.read_bytes, 1); }

size_t ScanInput::ReadSize(uint64_t so_far) const {
  return std::min(MaxRead(), static_cast<size_t>(std::max<uint64_t>(kFirstReadBytes, so_far)));
}

Status ScanInput::TooLarge(uint64_t at) const {
  return MalformedJson(
      name_, at,
      "a single value is larger than " + std::to_string(tuning_.max_value_bytes >> 20) + " MiB");
}

Status ScanInput::Feed(ByteSource* src, const char* map, size_t map_size,
                       const std::function<Status(size_t)>& scan) {
  return map != nullptr ? FeedMapped(src, map, map_size, scan) : FeedStream(src, scan);
}

Status ScanInput::FeedMapped(ByteSource* src, const char* map, size_t map_size,
                             const std::function<Status(size_t)>& scan) {
  data_ = map;
  size_t released = 0;
  size_t ahead = 0;  // bytes hinted to the source as read next
  while (len_ < map_size) {
    if (len_ >= ahead) {
      ahead = std::min(map_size, len_ + std::max(tuning_.release_bytes, MaxRead()));
      if (!src->WillRead(len_, ahead)) return DataLoss(name_ + ": file changed while being read");
    }
    if (keep_from_ != kNone && len_ - keep_from_ > tuning_.max_value_bytes) {
      return TooLarge(keep_from_);
    }
    const size_t from = len_;
    len_ = std::min(map_size, len_ + MaxRead());
    PT_RETURN_IF_ERROR(scan(from));
    const size_t done = keep_from_ == kNone ? len_ : static_cast<size_t>(keep_from_);
    if (done - released >= tuning_.release_bytes) {
      src->Release(released, done);
      released = done;
    }
  }
  src->Release(released, len_);
  return Status::Ok();
}

Status ScanInput::FeedStream(ByteSource* src, const std::function<Status(size_t)>& scan) {
  buf_.resize(ReadSize(0) + kPad);
  data_ = buf_.data();
  for (;;) {
    const size_t read = ReadSize(base_ + len_);
    // Keep the bytes of whatever value is still being captured; drop the rest.
    if (keep_from_ != kNone) {
      const size_t drop = static_cast<size_t>(keep_from_ - base_);
      std::memmove(buf_.data(), buf_.data() + drop, len_ - drop);
      base_ += drop;
      len_ -= drop;
    } else {
      base_ += len_;
      len_ = 0;
    }
    if (len_ + read + kPad > buf_.size()) {
      if (len_ > tuning_.max_value_bytes) return TooLarge(base_);
      buf_.resize(std::max(buf_.size() * 2, len_ + read + kPad));
      data_ = buf_.data();
    }
    StatusOr<size_t> n = src->Read(buf_.data() + len_, read);
    if (!n.ok()) return Status(n.status().code(), name_ + ": " + n.status().message());
    if (*n == 0) return Status::Ok();
    const size_t from = len_;
    len_ += *n;
    PT_RETURN_IF_ERROR(scan(from));
  }
}

}  // namespace perftracker::trace::internal
