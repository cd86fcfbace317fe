#include "pattern/inflate.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "base/limits.h"

namespace perftracker::pattern {

void ByteBuffer::Reserve(size_t n) {
  if (n <= capacity_) return;
  std::unique_ptr<char[]> bigger(new char[n]);
  if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
  data_ = std::move(bigger);
  capacity_ = n;
}

void ByteBuffer::Trim(size_t max) {
  if (capacity_ <= max) return;
  data_.reset();
  size_ = 0;
  capacity_ = 0;
}

namespace {

// This thread's zstd decoder, its session reset (a frame that failed half-way leaves nothing
// behind); its parameters and buffers stay. nullptr when one cannot be made.
ZSTD_DCtx* ThreadDecoder() {
  struct Holder {
    ZSTD_DCtx* d = nullptr;
    ~Holder() { ZSTD_freeDCtx(d); }
  };
  thread_local Holder h;
  if (h.d == nullptr) {
    h.d = ZSTD_createDCtx();
    if (h.d == nullptr) return nullptr;
    // The decoder's window is memory too: no frame needs one larger than the payload limit.
    static_assert(limits::kMaxSummaryPayload == (size_t{1} << 24), "window log below");
    ZSTD_DCtx_setParameter(h.d, ZSTD_d_windowLogMax, 24);
  }
  ZSTD_DCtx_reset(h.d, ZSTD_reset_session_only);
  return h.d;
}

}  // namespace

Inflated Inflate(uint32_t version, std::string_view src, uint64_t size, ByteBuffer* out) {
  constexpr size_t kFirstChunk = 64 << 10;
  // Room for one byte past SIZE, so a stream that yields more than declared is caught.
  const size_t cap = static_cast<size_t>(size) + 1;
  out->Clear();
  size_t room = std::min(out->capacity(), cap);  // already there: costs nothing more
  size_t produced = 0;
  auto grow = [&] {
    size_t next = std::max(kFirstChunk, room * 2);
    // Within a doubling of the end: straight to it, so the last step is not one more copy of
    // the whole buffer for the one byte past SIZE.
    if (next * 2 >= cap) next = cap;
    out->Resize(produced);  // what the stream gave so far moves with the buffer
    out->Reserve(next);
    room = next;
  };
  if (version >= 3) {
    ZSTD_DCtx* d = ThreadDecoder();
    if (d == nullptr) return Inflated::kError;
    ZSTD_inBuffer in{src.data(), src.size(), 0};
    for (;;) {
      if (produced == room) {
        if (produced > size) return Inflated::kCorrupt;
        grow();
      }
      ZSTD_outBuffer o{out->data(), room, produced};
      const size_t rc = ZSTD_decompressStream(d, &o, &in);
      produced = o.pos;
      if (ZSTD_isError(rc)) return Inflated::kCorrupt;
      if (rc == 0) break;  // the frame is complete (and its checksum verified)
      // Input used up with room left to write: the frame goes on past the end of the file.
      if (in.pos == in.size && o.pos < o.size) return Inflated::kTruncated;
    }
  } else {
    z_stream z{};
    if (inflateInit(&z) != Z_OK) return Inflated::kError;
    std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(src.data()));
    z.avail_in = static_cast<uInt>(std::min<size_t>(src.size(), UINT32_MAX));
    for (;;) {
      if (produced == room) {
        if (produced > size) return Inflated::kCorrupt;
        grow();
      }
      z.next_out = reinterpret_cast<Bytef*>(out->data() + produced);
      z.avail_out = static_cast<uInt>(room - produced);
      const uInt before = z.avail_out;
      const int rc = inflate(&z, Z_NO_FLUSH);
      produced += before - z.avail_out;
      if (rc == Z_STREAM_END) break;
      if (rc == Z_BUF_ERROR && z.avail_in == 0) return Inflated::kTruncated;
      if (rc != Z_OK && rc != Z_BUF_ERROR) return Inflated::kCorrupt;
      if (z.avail_in == 0 && z.avail_out > 0) return Inflated::kTruncated;
    }
  }
  if (produced != size) return Inflated::kCorrupt;
  out->Resize(produced);
  return Inflated::kOk;
}

}  // namespace perftracker::pattern
