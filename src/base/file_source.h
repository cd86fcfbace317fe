// Sequential byte sources for streaming readers: a plain file, a gzip file (detected by its magic
// bytes, not its name; concatenated members are read through), or a caller's memory buffer. A
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
};

// Opens `path` for reading; gzip when it starts with 1f 8b. Errors: kNotFound when the file does
// not exist, kInvalidArgument when it cannot be read (a folder, no permission).
StatusOr<std::unique_ptr<ByteSource>> OpenFileSource(const std::string& path);

// Reads `data`, which must outlive the source. No decompression.
std::unique_ptr<ByteSource> OpenMemorySource(std::string_view data);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_FILE_SOURCE_H_
