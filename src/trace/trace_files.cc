// Trace files in folders and ranks from file names (trace_files.h; declared in reader.h).
#include "trace/trace_files.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "trace/ascii.h"

namespace perftracker::trace {
namespace internal {

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsTraceFileName(const std::string& name) {
  auto ends = [&](std::string_view suffix) {
    return name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".json") || ends(".json.gz");
}

}  // namespace internal

int RankFromFileName(const std::string& path) {
  std::string base = internal::BaseName(path);
  for (char& c : base) c = internal::Lower(c);
  int found = -1;
  size_t at = 0;
  while ((at = base.find("rank", at)) != std::string::npos) {
    size_t i = at + 4;
    if (i < base.size() && (base[i] == '-' || base[i] == '_' || base[i] == '.')) ++i;
    int64_t r = -1;
    while (i < base.size() && base[i] >= '0' && base[i] <= '9' && r < 100000000) {
      r = (r < 0 ? 0 : r) * 10 + (base[i] - '0');
      ++i;
    }
    if (r >= 0) found = static_cast<int>(r);
    at += 4;
  }
  return found;
}

StatusOr<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& path : paths) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return NotFound(path + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
      out.push_back(path);
      continue;
    }
    DIR* dir = opendir(path.c_str());
    if (dir == nullptr)
      return InvalidArgument(path + ": cannot list folder: " + std::strerror(errno));
    std::vector<std::string> found;
    const std::string prefix = (!path.empty() && path.back() == '/') ? path : path + "/";
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (!internal::IsTraceFileName(name)) continue;
      const std::string full = prefix + name;
      struct stat fst;
      if (stat(full.c_str(), &fst) == 0 && S_ISREG(fst.st_mode)) found.push_back(full);
    }
    closedir(dir);
    if (found.empty()) {
      return NotFound(path + ": folder holds no trace files (*.json, *.json.gz)");
    }
    out.insert(out.end(), found.begin(), found.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace perftracker::trace
