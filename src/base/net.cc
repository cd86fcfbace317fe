#include "base/net.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

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

}  // namespace perftracker
