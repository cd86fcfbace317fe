#include "base/net.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace perftracker {

std::string NodeName() {
  if (const char* n = std::getenv("SLURMD_NODENAME"); n != nullptr && *n != '\0') return n;
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

bool IsLoopbackAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  const bool bracketed_v6 = !address.empty() && address.back() == ']';
  const std::string host =
      colon == std::string::npos || bracketed_v6 ? address : address.substr(0, colon);
  return host == "127.0.0.1" || host == "localhost" || host == "[::1]";
}

StatusOr<int> ListenUnixSocket(const std::string& path, const std::string& who) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument(fmt::format("{}: socket path '{}' is empty or longer than {} bytes", who,
                                       path, sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const auto* sa = reinterpret_cast<const sockaddr*>(&addr);
  struct stat st{};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return InvalidArgument(
          fmt::format("{}: {} exists and is not a socket; not replacing it", who, path));
    }
    // A live process answers; a stale file (a crashed one's) does not.
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
      const bool live = connect(probe, sa, sizeof(addr)) == 0;
      close(probe);
      if (live) return Unavailable(fmt::format("{}: another process listens on {}", who, path));
    }
    unlink(path.c_str());
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal(fmt::format("{}: socket for {}: {}", who, path, strerror(errno)));
  if (bind(fd, sa, sizeof(addr)) != 0 || listen(fd, 128) != 0) {
    Status err =
        Unavailable(fmt::format("{}: cannot listen on {}: {}", who, path, std::strerror(errno)));
    close(fd);
    return err;
  }
  return fd;
}

}  // namespace perftracker
