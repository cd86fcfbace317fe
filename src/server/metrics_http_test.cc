#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
  int renders = 0;
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

TEST(MetricsHttpTest, LabelValuesAreEscaped) {
  EXPECT_EQ(MetricsHttp::Label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(MetricsHttpTest, ABadAddressIsOneLine) {
  auto m = MetricsHttp::Start("nonsense", [] { return std::string(); });
  EXPECT_EQ(m.status().message(), "--metrics nonsense: expected HOST:PORT");
}

}  // namespace
}  // namespace perftracker::server
