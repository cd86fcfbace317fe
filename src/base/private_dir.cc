#include "base/private_dir.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace perftracker {

namespace {

// What an existing folder must be.
struct Rule {
  const char* what;
  mode_t forbidden;   // permission bits of others it may not have
  bool follow_links;  // a link of the user's (or root's) to the folder stands for it
};

// A private folder: the owner's bits only, and never a link (another link could be swapped in).
constexpr Rule kPrivate = {"folder", S_IRWXG | S_IRWXO, false};

Status CheckExisting(const std::string& path, const Rule& rule) {
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0)
    return Unavailable(
        fmt::format("{}: cannot check the {}: {}", path, rule.what, std::strerror(errno)));
  if (S_ISLNK(link.st_mode) &&
      (!rule.follow_links || (link.st_uid != ::geteuid() && link.st_uid != 0))) {
    return Unavailable(
        fmt::format("{}: the {} is a link (of uid {}), not a folder of yours; "
                    "refusing it",
                    path, rule.what, link.st_uid));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Unavailable(
        fmt::format("{}: cannot check the {}: {}", path, rule.what, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    return Unavailable(fmt::format("{}: the {} exists and is not a folder", path, rule.what));
  if (st.st_uid != ::geteuid()) {
    return Unavailable(fmt::format(
        "{}: the {} belongs to another user (uid {}), not to you (uid {}); refusing it (its "
        "owner could replace what is written and read there): remove it or choose another path",
        path, rule.what, st.st_uid, ::geteuid()));
  }
  if (st.st_mode & rule.forbidden) {
    return Unavailable(
        fmt::format("{}: {} (mode {:04o}); refusing it (chmod {} it, or choose another path)", path,
                    rule.forbidden == kPrivate.forbidden
                        ? "others may enter the " + std::string(rule.what)
                        : "the " + std::string(rule.what) + " is writable by others",
                    st.st_mode & 07777, rule.forbidden == kPrivate.forbidden ? "700" : "go-w"));
  }
  return Status::Ok();
}

Status Make(const std::string& path, const Rule& rule) {
  if (path.empty()) return InvalidArgument(fmt::format("{}: the path is empty", rule.what));
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::exists(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (ec) return Unavailable(fmt::format("{}: cannot create its parent: {}", path, ec.message()));
  }
  // mkdir applies the umask, which can only take bits away from 0700: the mode is exact or
  // stricter, and the folder is never more open than private at any moment.
  if (::mkdir(path.c_str(), 0700) == 0) return Status::Ok();
  if (errno != EEXIST)
    return Unavailable(
        fmt::format("{}: cannot create the {}: {}", path, rule.what, std::strerror(errno)));
  return CheckExisting(path, rule);
}

Rule OwnRule(const char* what) { return {what, S_IWGRP | S_IWOTH, true}; }

}  // namespace

Status MakePrivateDir(const std::string& path) { return Make(path, kPrivate); }

Status MakeOwnFolder(const std::string& path, const char* what) {
  return Make(path, OwnRule(what));
}

Status CheckOwnFolder(const std::string& path, const char* what) {
  return CheckExisting(path, OwnRule(what));
}

}  // namespace perftracker
