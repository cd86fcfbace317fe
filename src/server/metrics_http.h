// The server's Prometheus endpoint: GET /metrics over plain HTTP/1.1 on its own small listener
// (gRPC serves no plain HTTP), answered with what a callback renders in the text exposition
// format. One thread, one client at a time, each bounded in bytes and time, so a slow or hostile
// scraper costs at most a couple of seconds and a few KB; read-only, so it needs no token (it
// listens on 127.0.0.1 unless told otherwise).
#ifndef PERFTRACKER_SERVER_METRICS_HTTP_H_
#define PERFTRACKER_SERVER_METRICS_HTTP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"

namespace perftracker::server {

class MetricsHttp {
 public:
  using Render = std::function<std::string()>;

  // Listens on ADDR ("127.0.0.1:9464", "0.0.0.0:9464", port 0: any free port).
  static StatusOr<std::unique_ptr<MetricsHttp>> Start(const std::string& addr, Render render);
  ~MetricsHttp();  // stops the thread and closes the socket

  int port() const { return port_; }

  // Prometheus label value escaping: backslash, double quote and newline.
  static std::string Label(std::string_view value);

 private:
  MetricsHttp(int fd, int port, Render render);
  void Loop();
  void Serve(int client);

  int fd_;
  int port_;
  int wake_[2] = {-1, -1};
  Render render_;
  std::thread thread_;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_METRICS_HTTP_H_
