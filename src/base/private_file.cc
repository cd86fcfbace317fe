#include "base/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace perftracker {
namespace {

constexpr int kCreateFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;

// Whether PATH is a regular file of this user's (not a link, not another's file), removed.
bool RemovedOwnFile(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
         ::unlink(path.c_str()) == 0;
}

}  // namespace

Status CreatePrivateFile(const std::string& path, std::string_view data, IfPresent if_present,
                         int* err) {
  int fd = ::open(path.c_str(), kCreateFlags, 0600);
  if (fd < 0 && errno == EEXIST && if_present == IfPresent::kReplaceOwnFile &&
      RemovedOwnFile(path)) {
    fd = ::open(path.c_str(), kCreateFlags, 0600);
  }
  if (fd < 0) {
    const int e = errno;
    if (err != nullptr) *err = e;
    return InvalidArgument(path + ": " + std::strerror(e));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      ::close(fd);
      if (err != nullptr) *err = e;
      return DataLoss(path + ": write failed: " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const int e = errno;
    if (err != nullptr) *err = e;
    return DataLoss(path + ": write failed: " + std::strerror(e));
  }
  return Status::Ok();
}

Status WritePrivateFileAtomically(const std::string& path, std::string_view data, AtPath at_path) {
  const std::string tmp = path + ".tmp";
  PT_RETURN_IF_ERROR(CreatePrivateFile(tmp, data, IfPresent::kReplaceOwnFile));
  // link() does not replace an existing name, as rename() does.
  const bool placed = at_path == AtPath::kReplace ? std::rename(tmp.c_str(), path.c_str()) == 0
                                                  : ::link(tmp.c_str(), path.c_str()) == 0;
  const int e = errno;
  if (!placed || at_path == AtPath::kKeep) ::unlink(tmp.c_str());
  if (!placed) return DataLoss(path + ": cannot put the file in place: " + std::strerror(e));
  return Status::Ok();
}

}  // namespace perftracker
