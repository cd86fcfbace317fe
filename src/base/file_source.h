// Sequential byte sources for streaming readers: a plain file, a gzip file (detected by its magic
// bytes, not its name; concatenated members are read through; inflated with ISA-L's igzip), or
// a caller's memory buffer. A
// source hands out the uncompressed bytes in caller-sized pieces, so memory stays bounded by the
// caller's buffer plus a fixed inflate window. Error messages do not name the file: the caller
// prefixes its own name.
#ifndef PERFTRACKER_BASE_FILE_SOURCE_H_
#define PERFTRACKER_BASE_FILE_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace perftracker {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Copies up to `n` bytes into `dst`; returns 0 only at the end of the data.
  virtual StatusOr<size_t> Read(char* dst, size_t n) = 0;
  virtual bool compressed() const { return false; }
  // Sources that can show all their bytes at once (a plain file, through mmap) return them here,
  // followed by at least `pad` more bytes; *size is the data's length. Every byte may be
  // written: writes stay private to this source. Null when the source can only be read (gzip,
  // pipes, an empty file); then Read is the way in. Do not mix Map and Read on one source.
  // A mapped file that shrinks while mapped: WillRead notices it before the bytes are read
  // (false), but a file cut between that check and the read of the bytes still faults the
  // process (SIGBUS); traces are complete files by the time they are read.
  virtual char* Map(size_t pad, size_t* size) { return nullptr; }
  // Lets the system drop the mapped bytes in [from, to) from memory (whole pages inside the
  // range only). They stay readable: reading them again pages them back in, and bytes written
  // there revert to the file's.
  virtual void Release(size_t from, size_t to) {}
  // Hints that the mapped bytes in [from, to) are read next: a plain file maps them in one go
  // instead of page fault by page fault. False when the file no longer holds all of them (it
  // was cut since Map): reading them would fault, so the caller stops with an error instead.
  virtual bool WillRead(size_t from, size_t to) { return true; }
};

// Opens `path` for reading; gzip when it starts with 1f 8b. Errors: kNotFound when the file does
// not exist, kInvalidArgument when it cannot be read (a folder, no permission).
StatusOr<std::unique_ptr<ByteSource>> OpenFileSource(const std::string& path);

// The whole of a small file (plain bytes, no decompression), refused past MAX_BYTES before it is
// all allocated: "PATH: cannot read: ..." or "PATH: over the N MiB WHAT may have".
StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                    std::string_view what);

// Reads `data`, which must outlive the source. No decompression. A `mappable` source also
// supports Map, over a private padded copy of `data` (for tests of the mapped path).
std::unique_ptr<ByteSource> OpenMemorySource(std::string_view data, bool mappable = false);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_FILE_SOURCE_H_
