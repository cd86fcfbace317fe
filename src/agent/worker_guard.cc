#include "agent/worker_guard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/log.h"

namespace perftracker::agent {

StatusOr<PeerCredentials> PeerOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred))
    return Unavailable(fmt::format("agent: cannot tell who connected: {}", std::strerror(errno)));
  return PeerCredentials{cred.pid, cred.uid};
}

StatusOr<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr)
    return NotFound(fmt::format("{}: {}", log::Printable(path), std::strerror(errno)));
  return std::string(buf);
}

StatusOr<std::string> CheckTraceFile(const std::string& trace_root, const std::string& path) {
  if (path.empty() || path[0] != '/')
    return InvalidArgument(fmt::format("'{}': not an absolute path", log::Printable(path)));
  auto real = RealPath(path);
  if (!real.ok()) return real.status();
  const std::string& r = *real;
  if (r.size() <= trace_root.size() + 1 || r.compare(0, trace_root.size(), trace_root) != 0 ||
      (trace_root != "/" && r[trace_root.size()] != '/')) {
    return InvalidArgument(fmt::format("{}: outside the trace folder {}", log::Printable(path),
                                       log::Printable(trace_root)));
  }
  // The path itself, not what realpath found: a link anywhere is refused here (ELOOP), and a
  // FIFO opens at once without a writer (O_NONBLOCK) and is then refused by its type.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return InvalidArgument(fmt::format("{}: cannot open it{}: {}", log::Printable(path),
                                       errno == ELOOP ? " (a link)" : "", std::strerror(errno)));
  }
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  ::close(fd);
  if (!regular) return InvalidArgument(fmt::format("{}: not a regular file", log::Printable(path)));
  // The workers run as this user: a trace of anyone else's was planted (the folder is private,
  // base/private_dir.h; this holds where it once was not).
  if (st.st_uid != ::geteuid())
    return InvalidArgument(
        fmt::format("{}: belongs to user {}, not to this one", log::Printable(path), st.st_uid));
  return r;
}

bool ProcessGone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;  // no /proc: kill() said it exists
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "PID (COMM) STATE ...": COMM may hold anything, so the state follows the last ')'.
  const char* close = std::strrchr(buf, ')');
  return close != nullptr && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

}  // namespace perftracker::agent
