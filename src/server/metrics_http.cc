#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/log.h"

namespace perftracker::server {
namespace {

// A request line and headers fit in this; more is not a scraper.
constexpr size_t kMaxRequestBytes = 8 << 10;
// A client that has not sent its request, or not taken the reply, by then is dropped.
constexpr int kClientMillis = 2000;

bool WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
  if (left <= 0) return false;
  pollfd p{fd, events, 0};
  return poll(&p, 1, static_cast<int>(left)) > 0;
}

void SendAll(int fd, std::string_view data, std::chrono::steady_clock::time_point deadline) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(fd, POLLOUT, deadline)) return;
    } else {
      return;
    }
  }
}

}  // namespace

std::string MetricsHttp::Label(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

StatusOr<std::unique_ptr<MetricsHttp>> MetricsHttp::Start(const std::string& addr, Render render) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument(fmt::format("--metrics {}: expected HOST:PORT", addr));
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port = addr.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
      rc != 0)
    return InvalidArgument(fmt::format("--metrics {}: {}", addr, gai_strerror(rc)));
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 16) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return Unavailable(fmt::format("--metrics {}: cannot listen: {}", addr, why));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  std::unique_ptr<MetricsHttp> m(new MetricsHttp(fd, bound, std::move(render)));
  if (pipe2(m->wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    return Internal(fmt::format("--metrics: pipe: {}", std::strerror(errno)));
  MetricsHttp* raw = m.get();
  m->thread_ = std::thread([raw] { raw->Loop(); });
  return m;
}

MetricsHttp::MetricsHttp(int fd, int port, Render render)
    : fd_(fd), port_(port), render_(std::move(render)) {}

MetricsHttp::~MetricsHttp() {
  if (wake_[1] >= 0) {
    const char b = 1;
    [[maybe_unused]] ssize_t r = write(wake_[1], &b, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int f : {fd_, wake_[0], wake_[1]})
    if (f >= 0) close(f);
}

void MetricsHttp::Loop() {
  while (true) {
    pollfd p[2] = {{wake_[0], POLLIN, 0}, {fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log::Error("server", "metrics: poll: {}", std::strerror(errno));
      return;
    }
    if (p[0].revents) return;
    if (!(p[1].revents & POLLIN)) continue;
    int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) continue;
    try {
      Serve(client);
    } catch (const std::exception& e) {
      log::Error("server", "metrics: internal error: {}", e.what());
    }
    close(client);
  }
}

void MetricsHttp::Serve(int client) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kClientMillis);
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos) {
    if (req.size() > kMaxRequestBytes) return;
    ssize_t n = recv(client, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      req.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(client, POLLIN, deadline)) return;
    } else {
      return;
    }
  }
  const size_t eol = req.find_first_of("\r\n");
  const std::string line = req.substr(0, eol);
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (line.rfind("GET ", 0) != 0 && line.rfind("HEAD ", 0) != 0) {
    status = "405 Method Not Allowed";
    body = "only GET /metrics\n";
  } else {
    const size_t sp = line.find(' ');
    std::string path = line.substr(sp + 1, line.find(' ', sp + 1) - sp - 1);
    if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    if (path == "/metrics") {
      body = render_();
    } else if (path == "/") {
      type = "text/plain; charset=utf-8";
      body = "perftracker server: metrics at /metrics\n";
    } else {
      status = "404 Not Found";
      body = "not found; metrics are at /metrics\n";
    }
  }
  std::string head = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", status,
      type, body.size());
  SendAll(client, head, deadline);
  if (line.rfind("HEAD ", 0) != 0) SendAll(client, body, deadline);
}

}  // namespace perftracker::server
