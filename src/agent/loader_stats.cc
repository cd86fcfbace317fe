#include "agent/loader_stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/units.h"

namespace perftracker::agent {
namespace {

constexpr std::string_view kMagic = "PTLW";
constexpr uint32_t kVersion = 1;
constexpr size_t kCountersAt = 8;
constexpr size_t kNamesAt = 40;
constexpr size_t kNameBytes = 128;
// A worker writes its counters in about a microsecond; a reader that finds the sequence odd
// this many times in a row gives up on the file for this reading.
constexpr int kReadAttempts = 8;

uint64_t U64(std::string_view b, size_t at) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[at + k]);
  return v;
}

std::string Name(std::string_view b, size_t at) {
  std::string out;
  for (size_t k = 0; k < kNameBytes - 1 && b[at + k] != '\0'; ++k) {
    const char c = b[at + k];
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return out;
}

}  // namespace

StatusOr<LoaderStats> ParseLoaderStats(std::string_view b) {
  if (b.size() != kLoaderStatsBytes)
    return InvalidArgument(fmt::format("{} bytes, not {}", b.size(), kLoaderStatsBytes));
  if (b.substr(0, 4) != kMagic) return InvalidArgument("not a DataLoader worker file (magic)");
  const uint64_t version = U64(b, 4) & 0xffffffffu;
  if (version != kVersion)
    return InvalidArgument(fmt::format("version {}, not {}", version, kVersion));
  LoaderStats s;
  s.sequence = U64(b, kCountersAt);
  s.batches = U64(b, kCountersAt + 8);
  s.dataset_ns = U64(b, kCountersAt + 16);
  s.collate_ns = U64(b, kCountersAt + 24);
  s.dataset_fn = Name(b, kNamesAt);
  s.collate_fn = Name(b, kNamesAt + kNameBytes);
  return s;
}

StatusOr<LoaderStats> ReadLoaderStats(const std::string& dir, int pid) {
  const std::string path = fmt::format("{}/loader-{}", dir, pid);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return NotFound(fmt::format("{}: {}", path, std::strerror(errno)));
  struct stat st {};
  std::string buf(kLoaderStatsBytes, '\0');
  Status err = Status::Ok();
  // Only the job's user writes here: a file of another owner is not one of its workers'.
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || !S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgument(fmt::format("{}: not a regular file of this user", path));
  }
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const ssize_t n = pread(fd, buf.data(), buf.size(), 0);
    if (n != static_cast<ssize_t>(buf.size())) {
      err = InvalidArgument(fmt::format("{}: read {} of {} bytes", path, n, buf.size()));
      break;
    }
    StatusOr<LoaderStats> s = ParseLoaderStats(buf);
    if (!s.ok() || s->sequence % 2 == 0) {
      close(fd);
      if (!s.ok()) return InvalidArgument(fmt::format("{}: {}", path, s.status().message()));
      return s;
    }
    err = Unavailable(fmt::format("{}: the worker kept writing", path));
  }
  close(fd);
  return err;
}

void RemoveStaleLoaderStats(const std::string& dir, const std::string& proc, size_t max) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  size_t seen = 0;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "loader-", 7) != 0) continue;
    if (++seen > max) break;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name + 7, &end, 10);
    if (end == e->d_name + 7 || *end != '\0' || pid <= 0) continue;
    if (access(fmt::format("{}/{}", proc, pid).c_str(), F_OK) != 0)
      unlink(fmt::format("{}/{}", dir, e->d_name).c_str());
  }
  closedir(d);
}

void AddLoaderMetrics(const std::map<int, LoaderStats>& begin,
                      const std::map<int, LoaderStats>& end, std::map<std::string, double>* m) {
  if (end.empty()) return;
  uint64_t batches = 0, dataset_ns = 0, collate_ns = 0;
  const LoaderStats* named = nullptr;  // the worker with the most time: its names are shown
  uint64_t named_ns = 0;
  for (const auto& [pid, e] : end) {
    auto b = begin.find(pid);
    // A worker that started within the window counts whole; counters never go back (a reused
    // pid's new file restarts them: counted whole too).
    const bool whole = b == begin.end() || b->second.batches > e.batches;
    const LoaderStats zero;
    const LoaderStats& s = whole ? zero : b->second;
    const uint64_t d = e.dataset_ns - std::min(s.dataset_ns, e.dataset_ns);
    const uint64_t c = e.collate_ns - std::min(s.collate_ns, e.collate_ns);
    batches += e.batches - std::min(s.batches, e.batches);
    dataset_ns += d;
    collate_ns += c;
    if (named == nullptr || d + c > named_ns) named = &e, named_ns = d + c;
  }
  (*m)["loader.workers"] = static_cast<double>(end.size());
  (*m)["loader.batches"] = static_cast<double>(batches);
  (*m)["loader.dataset_s"] = NsToS(dataset_ns);
  (*m)["loader.collate_s"] = NsToS(collate_ns);
  if (!named->dataset_fn.empty()) (*m)["loader.dataset_fn=" + named->dataset_fn] = 1;
  if (!named->collate_fn.empty()) (*m)["loader.collate_fn=" + named->collate_fn] = 1;
}

}  // namespace perftracker::agent
