#include "agent/trace_retention.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <system_error>

namespace perftracker::agent {

namespace fs = std::filesystem;

namespace {

uint64_t FolderBytes(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const uintmax_t n = it->file_size(size_ec);
      if (!size_ec) total += n;
    }
  }
  return total;
}

}  // namespace

std::vector<PrunedWindow> PruneTraces(const std::string& trace_dir, const TraceRetention& policy,
                                      int64_t current_window) {
  struct Folder {
    int64_t id;
    fs::path path;
    uint64_t bytes;
  };
  std::vector<Folder> folders;
  std::error_code ec;
  constexpr std::string_view kPrefix = "window-";
  for (const auto& e : fs::directory_iterator(trace_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !e.is_directory(ec)) continue;
    int64_t id = 0;
    const char* begin = name.data() + kPrefix.size();
    const char* end = name.data() + name.size();
    auto [ptr, err] = std::from_chars(begin, end, id);
    if (err != std::errc() || ptr != end) continue;  // not ours
    folders.push_back({id, e.path(), FolderBytes(e.path())});
  }
  std::sort(folders.begin(), folders.end(),
            [](const Folder& a, const Folder& b) { return a.id > b.id; });  // newest first
  std::vector<PrunedWindow> removed;
  uint64_t kept_bytes = 0;
  int kept = 0;
  for (const Folder& f : folders) {
    const bool current = f.id == current_window;
    if (current || (kept < policy.keep_windows && kept_bytes + f.bytes <= policy.max_bytes)) {
      kept_bytes += f.bytes;
      if (!current) ++kept;
      continue;
    }
    std::error_code rm;
    fs::remove_all(f.path, rm);
    if (!rm) removed.push_back({f.id, f.bytes});
  }
  return removed;
}

}  // namespace perftracker::agent
