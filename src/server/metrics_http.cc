#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "base/limits.h"
#include "base/log.h"

namespace perftracker::server {
namespace {

constexpr size_t kMaxRequestBytes = limits::kMaxHttpRequest;

std::chrono::milliseconds Millis(int ms) { return std::chrono::milliseconds(ms); }

void Wake(int fd) {
  const char b = 1;
  [[maybe_unused]] ssize_t r = write(fd, &b, 1);
}

}  // namespace

struct MetricsHttp::Client {
  enum class Phase { kReading, kWaiting, kWriting };
  int fd = -1;
  Phase phase = Phase::kReading;
  Clock::time_point deadline;  // of the phase: reading, waiting for a snapshot, writing
  Clock::time_point arrived;   // when its request was complete
  std::string request;
  bool head_only = false;  // HEAD: the headers alone
  std::string head;        // status line and headers
  std::shared_ptr<const std::string> body;
  size_t sent = 0;
};

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

namespace {

// Whether SA is a loopback address (127.0.0.0/8, ::1, or IPv4's loopback mapped into IPv6).
bool Loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family != AF_INET6) return false;
  const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
  if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
  return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
}

// A comparison whose time does not depend on where A and B first differ.
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (b.empty() ? 0 : b[i % b.size()]));
  return diff == 0;
}

}  // namespace

StatusOr<std::unique_ptr<MetricsHttp>> MetricsHttp::Start(const std::string& addr, Render render,
                                                          Access access) {
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
  bool loopback = true;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) loopback &= Loopback(a->ai_addr);
  if (!loopback && (!access.public_address || access.token.empty())) {
    freeaddrinfo(res);
    if (!access.public_address)
      return InvalidArgument(fmt::format(
          "--metrics {}: not a loopback address: /metrics would show every rank's host, findings "
          "and functions to whoever can reach it; add --metrics-public to serve it there (a "
          "scraper then sends the server's token: Authorization: Bearer)",
          addr));
    return InvalidArgument(
        fmt::format("--metrics {}: --metrics-public needs the server's token for scrapers to send "
                    "(--token-file)",
                    addr));
  }
  // Loopback alone: nobody else to keep out.
  std::string token = loopback ? "" : access.token;
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
  std::unique_ptr<MetricsHttp> m(new MetricsHttp(fd, bound, std::move(render), std::move(token)));
  if (pipe2(m->wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    return Internal(fmt::format("--metrics: pipe: {}", std::strerror(errno)));
  MetricsHttp* raw = m.get();
  m->render_thread_ = std::thread([raw] { raw->RenderLoop(); });
  m->thread_ = std::thread([raw] { raw->Loop(); });
  return m;
}

MetricsHttp::MetricsHttp(int fd, int port, Render render, std::string token)
    : fd_(fd), port_(port), render_(std::move(render)), token_(std::move(token)) {}

bool MetricsHttp::Authorized(const Client& c) const {
  if (token_.empty()) return true;
  // The header lines after the request line: "Authorization: Bearer TOKEN", the name in any case.
  constexpr std::string_view kName = "authorization:";
  size_t at = c.request.find('\n');
  while (at != std::string::npos && at + 1 < c.request.size()) {
    const size_t end = c.request.find('\n', at + 1);
    std::string_view line(c.request.data() + at + 1,
                          (end == std::string::npos ? c.request.size() : end) - at - 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > kName.size() &&
        std::equal(kName.begin(), kName.end(), line.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      std::string_view value = line.substr(kName.size());
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      constexpr std::string_view kBearer = "Bearer ";
      return value.starts_with(kBearer) && SameSecret(value.substr(kBearer.size()), token_);
    }
    at = end;
  }
  return false;
}

MetricsHttp::~MetricsHttp() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (wake_[1] >= 0) Wake(wake_[1]);
  if (thread_.joinable()) thread_.join();
  if (render_thread_.joinable()) render_thread_.join();
  for (int f : {fd_, wake_[0], wake_[1]})
    if (f >= 0) close(f);
}

MetricsHttp::Snapshot MetricsHttp::Newest() {
  std::lock_guard lk(mu_);
  return snapshot_;
}

void MetricsHttp::RenderLoop() {
  bool failed_before = false;
  while (true) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return stopping_ || wanted_; });
    if (stopping_) return;
    wanted_ = false;  // a render that starts now answers every scrape that wanted one
    lk.unlock();
    const Clock::time_point started = Clock::now();
    std::shared_ptr<const std::string> text;
    try {
      text = std::make_shared<const std::string>(render_());
    } catch (const std::exception& e) {
      // Scrapes get the last snapshot; the log says it once.
      if (!failed_before) log::Error("server", "metrics: cannot render: {}", e.what());
      failed_before = true;
    }
    lk.lock();
    if (text) snapshot_ = {std::move(text), started};
    lk.unlock();
    Wake(wake_[1]);
  }
}

bool MetricsHttp::Read(Client& c, Clock::time_point now) {
  char buf[2048];
  while (true) {
    ssize_t n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      c.request.append(buf, static_cast<size_t>(n));
      if (c.request.size() > kMaxRequestBytes) return false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    return false;  // closed before its request was complete, or an error
  }
  if (c.request.find("\r\n\r\n") == std::string::npos &&
      c.request.find("\n\n") == std::string::npos)
    return true;
  c.phase = Client::Phase::kWaiting;
  c.arrived = now;
  c.deadline = now + Millis(kRenderWaitMillis);
  return true;
}

bool MetricsHttp::Answer(Client& c, const Snapshot& snap, Clock::time_point now) {
  const std::string line = c.request.substr(0, c.request.find_first_of("\r\n"));
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  c.head_only = line.rfind("HEAD ", 0) == 0;
  std::string extra_headers;
  if (!Authorized(c)) {
    status = "401 Unauthorized";
    type = "text/plain; charset=utf-8";
    body = "send the server's token: Authorization: Bearer TOKEN\n";
    extra_headers = "WWW-Authenticate: Bearer realm=\"perftracker\"\r\n";
  } else if (line.rfind("GET ", 0) != 0 && !c.head_only) {
    status = "405 Method Not Allowed";
    body = "only GET /metrics\n";
  } else {
    const size_t sp = line.find(' ');
    std::string path = line.substr(sp + 1, line.find(' ', sp + 1) - sp - 1);
    if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    if (path == "/metrics") {
      const bool fresh = snap.text && snap.started >= c.arrived - Millis(kFreshMillis);
      if (!fresh && now < c.deadline) {
        std::lock_guard lk(mu_);
        if (!wanted_) {
          wanted_ = true;
          cv_.notify_one();
        }
        return false;
      }
      if (snap.text) {
        c.body = snap.text;
      } else {
        status = "503 Service Unavailable";
        body = "metrics not rendered yet: the server is busy; try again\n";
      }
    } else if (path == "/") {
      type = "text/plain; charset=utf-8";
      body = "perftracker server: metrics at /metrics\n";
    } else {
      status = "404 Not Found";
      body = "not found; metrics are at /metrics\n";
    }
  }
  if (!c.body) c.body = std::make_shared<const std::string>(std::move(body));
  c.head = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
      status, type, c.body->size(), extra_headers);
  c.phase = Client::Phase::kWriting;
  c.deadline = now + Millis(kWriteMillis);
  return true;
}

bool MetricsHttp::Write(Client& c) {
  const size_t total = c.head.size() + (c.head_only ? 0 : c.body->size());
  while (c.sent < total) {
    const std::string_view part = c.sent < c.head.size()
                                      ? std::string_view(c.head).substr(c.sent)
                                      : std::string_view(*c.body).substr(c.sent - c.head.size());
    ssize_t n = send(c.fd, part.data(), part.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && errno == EAGAIN;  // the rest when it can take it
    }
  }
  return false;
}

void MetricsHttp::Loop() {
  std::vector<Client> clients;
  clients.reserve(kMaxConnections);
  bool failed_before = false;
  while (true) {
    try {
      if (!Step(clients)) break;
    } catch (const std::exception& e) {
      // Out of memory, most likely: the clients of the moment are dropped, not the server.
      if (!failed_before) log::Error("server", "metrics: internal error: {}", e.what());
      failed_before = true;
      for (Client& c : clients) close(c.fd);
      clients.clear();
    }
  }
  for (Client& c : clients) close(c.fd);
}

bool MetricsHttp::Step(std::vector<Client>& clients) {
  std::vector<pollfd> fds;
  std::vector<Client*> polled;  // the client of fds[k + 2]
  auto done = [](Client& c) {
    // What it sent beyond its request, read before closing: unread bytes would reset the
    // connection and could cut off the reply it has not read yet.
    char buf[2048];
    for (size_t left = kMaxRequestBytes; left > 0;) {
      const ssize_t n = recv(c.fd, buf, std::min(sizeof(buf), left), MSG_DONTWAIT);
      if (n <= 0) break;
      left -= static_cast<size_t>(n);
    }
    close(c.fd);
    c.fd = -1;
  };
  const Clock::time_point now = Clock::now();
  const Snapshot snap = Newest();
  for (Client& c : clients) {
    if (c.phase == Client::Phase::kWaiting && Answer(c, snap, now) && !Write(c)) done(c);
    if (c.fd >= 0 && c.phase != Client::Phase::kWaiting && now >= c.deadline) done(c);
  }
  std::erase_if(clients, [](const Client& c) { return c.fd < 0; });
  fds.push_back({wake_[0], POLLIN, 0});
  const bool room = clients.size() < static_cast<size_t>(kMaxConnections);
  fds.push_back({room ? fd_ : -1, POLLIN, 0});
  Clock::time_point next = Clock::time_point::max();
  for (Client& c : clients) {
    next = std::min(next, c.deadline);
    if (c.phase == Client::Phase::kWaiting) continue;
    fds.push_back(
        {c.fd, static_cast<short>(c.phase == Client::Phase::kReading ? POLLIN : POLLOUT), 0});
    polled.push_back(&c);
  }
  int timeout = -1;
  if (next != Clock::time_point::max())
    timeout = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 0,
        kWriteMillis));
  if (poll(fds.data(), fds.size(), timeout) < 0) {
    if (errno == EINTR) return true;
    log::Error("server", "metrics: poll: {}", std::strerror(errno));
    return false;
  }
  if (fds[0].revents) {
    char buf[64];
    while (read(wake_[0], buf, sizeof(buf)) > 0) {
    }
    std::lock_guard lk(mu_);
    if (stopping_) return false;
  }
  const Clock::time_point after = Clock::now();
  for (size_t k = 0; k < polled.size(); ++k) {
    Client& c = *polled[k];
    if (!fds[k + 2].revents) continue;
    bool keep = c.phase == Client::Phase::kReading ? Read(c, after) : Write(c);
    // A complete request is answered at once where it can be (not /metrics waiting for a
    // fresh snapshot).
    if (keep && c.phase == Client::Phase::kWaiting && Answer(c, Newest(), after)) keep = Write(c);
    if (!keep) done(c);
  }
  std::erase_if(clients, [](const Client& c) { return c.fd < 0; });
  while (fds[1].revents & POLLIN && clients.size() < static_cast<size_t>(kMaxConnections)) {
    int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;
    Client& c = clients.emplace_back();
    c.fd = fd;
    c.deadline = after + Millis(kReadMillis);
  }
  return true;
}

}  // namespace perftracker::server
