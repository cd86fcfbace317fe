#include "base/private_dir.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace perftracker {

namespace {

// The permission bits a private folder may have: the owner's only.
constexpr mode_t kOthersBits = S_IRWXG | S_IRWXO;

Status CheckExisting(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return Unavailable(fmt::format("{}: cannot check the folder: {}", path, std::strerror(errno)));
  if (S_ISLNK(st.st_mode))
    return Unavailable(fmt::format("{}: is a link, not a private folder; refusing it", path));
  if (!S_ISDIR(st.st_mode))
    return Unavailable(fmt::format("{}: exists and is not a folder", path));
  if (st.st_uid != ::geteuid()) {
    return Unavailable(fmt::format(
        "{}: belongs to another user (uid {}); refusing it (remove it or choose another path)",
        path, st.st_uid));
  }
  if (st.st_mode & kOthersBits) {
    return Unavailable(fmt::format(
        "{}: others may enter it (mode {:04o}); refusing it (chmod 700 it, or choose another "
        "path)",
        path, st.st_mode & 07777));
  }
  return Status::Ok();
}

}  // namespace

Status MakePrivateDir(const std::string& path) {
  if (path.empty()) return InvalidArgument("private folder: the path is empty");
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::exists(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (ec)
      return Unavailable(fmt::format("{}: cannot create its parent: {}", path, ec.message()));
  }
  // mkdir applies the umask, which can only take bits away from 0700: the mode is exact or
  // stricter, and the folder is never more open than private at any moment.
  if (::mkdir(path.c_str(), 0700) == 0) return Status::Ok();
  if (errno != EEXIST)
    return Unavailable(fmt::format("{}: cannot create the folder: {}", path, std::strerror(errno)));
  return CheckExisting(path);
}

}  // namespace perftracker
