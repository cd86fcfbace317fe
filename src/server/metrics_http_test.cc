#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace perftracker::server {
namespace {

// Sends REQUEST to 127.0.0.1:PORT and returns everything the server answers.
std::string Ask(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "connect failed";
  }
  if (!request.empty()) (void)!send(fd, request.data(), request.size(), 0);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST(MetricsHttpTest, ServesMetricsAndNothingElse) {
  std::atomic<int> renders{0};
  auto m = MetricsHttp::Start("127.0.0.1:0", [&] {
    ++renders;
    return std::string("# TYPE up gauge\nup 1\n");
  });
  ASSERT_TRUE(m.ok()) << m.status().message();
  const int port = (*m)->port();
  ASSERT_GT(port, 0);
  std::string r = Ask(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "# TYPE up gauge\nup 1\n");
  EXPECT_EQ(Ask(port, "GET /secret HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Ask(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  // A client that never sends its request is dropped (after 2 s); the next one is served.
  EXPECT_EQ(Ask(port, ""), "");
  EXPECT_EQ(Ask(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  // An endless request line is cut off, not buffered.
  EXPECT_EQ(Ask(port, std::string(20000, 'A')), "");
  EXPECT_EQ(renders, 2);
}

// A connection to 127.0.0.1:PORT that sends nothing (closed when the test ends).
int Idle(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Whether the server still holds FD open (it sent nothing and did not close it).
bool StillOpen(int fd) {
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(MetricsHttpTest, IdleConnectionsDoNotDelayAScrape) {
  auto m = MetricsHttp::Start("127.0.0.1:0", [] { return std::string("up 1\n"); });
  ASSERT_TRUE(m.ok()) << m.status().message();
  const int port = (*m)->port();
  // Eight clients that connect and say nothing (one at a time, each held 2 s, was 16 s).
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(Idle(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all accepted first
  const std::string r = Ask(port, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "up 1\n");
  // Answered while every idle client is still held open: a server serving one connection at a
  // time would have answered only after timing them out. (No timing: it gates no unit test.)
  for (int fd : idle) EXPECT_TRUE(StillOpen(fd));
  // As many idle clients as it serves at once: the next waits for a slot (the idle ones' read
  // deadline) and is answered.
  for (int i = 8; i < MetricsHttp::kMaxConnections; ++i) idle.push_back(Idle(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Ask(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  for (int fd : idle) close(fd);
}

TEST(MetricsHttpTest, ARenderHeldUpDelaysNoOneAndScrapesTakeTheLastSnapshot) {
  std::mutex server_lock;  // what the collector's render takes
  std::atomic<int> renders{0};
  auto m = MetricsHttp::Start("127.0.0.1:0", [&] {
    std::lock_guard lk(server_lock);
    return fmt::format("renders {}\n", ++renders);
  });
  ASSERT_TRUE(m.ok()) << m.status().message();
  const int port = (*m)->port();
  auto body = [](const std::string& r) {
    const size_t at = r.find("\r\n\r\n");
    return at == std::string::npos ? std::string() : r.substr(at + 4);
  };
  EXPECT_EQ(body(Ask(port, "GET /metrics HTTP/1.1\r\n\r\n")), "renders 1\n");
  // Scrapes in quick succession share one snapshot: one render, one lock (when the machine is
  // so loaded that they spread over more than kFreshMillis, fewer renders than scrapes).
  const auto quick = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) Ask(port, "GET /metrics HTTP/1.1\r\n\r\n");
  if (SecondsSince(quick) < MetricsHttp::kFreshMillis / 1e3)
    EXPECT_EQ(renders, 1);
  else
    EXPECT_LT(renders, 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(MetricsHttp::kFreshMillis + 100));
  std::string held;
  {
    std::lock_guard busy(server_lock);  // the server busy under its lock
    // Answered while the lock is held (a server rendering per scrape would block here).
    EXPECT_EQ(Ask(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
    const auto t = std::chrono::steady_clock::now();
    // Too old to be fresh, and the render is stuck: the last snapshot, after the wait.
    held = body(Ask(port, "GET /metrics HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(held.rfind("renders ", 0), 0u);
    EXPECT_EQ(held, fmt::format("renders {}\n", renders.load()));
    EXPECT_GE(SecondsSince(t), MetricsHttp::kRenderWaitMillis / 1e3 - 0.1);
  }
  // The lock free again: the stuck render completes, and a scrape gets that newer snapshot.
  const std::string after = body(Ask(port, "GET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(after.rfind("renders ", 0), 0u);
  EXPECT_NE(after, held);
}

TEST(MetricsHttpTest, LabelValuesAreEscaped) {
  EXPECT_EQ(MetricsHttp::Label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(MetricsHttpTest, OffLoopbackOnlyWhenToldAndOnlyWithTheToken) {
  // Issue 40: /metrics answered anyone on any address.
  auto render = [] { return std::string("up 1\n"); };
  auto refused = MetricsHttp::Start("0.0.0.0:0", render);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--metrics 0.0.0.0:0: not a loopback address"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(refused.status().message().find('\n'), std::string::npos);
  auto no_token = MetricsHttp::Start(":0", render, {.public_address = true});
  ASSERT_FALSE(no_token.ok());
  EXPECT_NE(no_token.status().message().find("needs the server's token"), std::string::npos);
  auto m = MetricsHttp::Start("0.0.0.0:0", render, {.public_address = true, .token = "s3cret"});
  ASSERT_TRUE(m.ok()) << m.status().message();
  const int port = (*m)->port();
  std::string r = Ask(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 401 Unauthorized\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("WWW-Authenticate: Bearer"), std::string::npos) << r;
  EXPECT_EQ(r.find("up 1"), std::string::npos) << r;
  EXPECT_EQ(Ask(port, "GET /metrics HTTP/1.1\r\nAuthorization: Bearer s3cre\r\n\r\n")
                .rfind("HTTP/1.1 401", 0),
            0u);
  EXPECT_EQ(
      Ask(port, "GET / HTTP/1.1\r\nAuthorization: Basic s3cret\r\n\r\n").rfind("HTTP/1.1 401", 0),
      0u);
  r = Ask(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "up 1\n");
  // Loopback needs neither: a scraper on the host itself.
  auto local = MetricsHttp::Start("127.0.0.1:0", render, {.public_address = true, .token = "t"});
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(Ask((*local)->port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
}

TEST(MetricsHttpTest, ABadAddressIsOneLine) {
  auto m = MetricsHttp::Start("nonsense", [] { return std::string(); });
  EXPECT_EQ(m.status().message(), "--metrics nonsense: expected HOST:PORT");
}

}  // namespace
}  // namespace perftracker::server
