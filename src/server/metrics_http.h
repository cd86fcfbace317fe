// The server's Prometheus endpoint: GET /metrics over plain HTTP/1.1 on its own small listener
// (gRPC serves no plain HTTP), answered in the text exposition format. On a loopback address it
// needs no token. Anywhere else it serves every rank's host, findings and functions to whoever
// can reach it: it listens there only when told so (Access::public_address, --metrics-public)
// and then answers only a request that carries the server's token (Authorization: Bearer), as
// the gRPC port does.
// Two threads. The HTTP thread serves up to kMaxConnections clients at once over non-blocking
// sockets in one poll() loop, each with a read and a write deadline and a bound on its request,
// so an idle, slow or hostile client costs one slot for a few seconds and delays nobody. It
// never calls the render callback (which takes the server's lock): it answers from the newest
// snapshot of the rendered text, shared by every client. The render thread makes snapshots, on
// demand: a scrape wants one rendered at most kFreshMillis before it arrived, so the server's
// lock is taken at most once per kFreshMillis however many clients scrape; a scrape waits for
// a fresh one up to kRenderWaitMillis, then takes the newest there is (a server busy under its
// lock answers late data rather than no data).
#ifndef PERFTRACKER_SERVER_METRICS_HTTP_H_
#define PERFTRACKER_SERVER_METRICS_HTTP_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

namespace perftracker::server {

// Who may scrape the endpoint. A non-loopback address needs PUBLIC_ADDRESS and a TOKEN.
struct MetricsAccess {
  bool public_address = false;
  std::string token = {};  // required of every request off loopback
};

class MetricsHttp {
 public:
  using Access = MetricsAccess;
  using Render = std::function<std::string()>;
  using Clock = std::chrono::steady_clock;

  // Clients served at once; more wait in the listen backlog until one is done (a scraper or
  // two and a curl are the expected load; a slot costs a pollfd and a request buffer).
  static constexpr int kMaxConnections = 64;
  // A client that has not sent its request by then is dropped.
  static constexpr int kReadMillis = 2000;
  // A client that has not taken the whole reply by then is dropped: Prometheus' own scrape
  // timeout is 10 s, and 100,000 ranks render ~25 MB.
  static constexpr int kWriteMillis = 10000;
  // How old a snapshot may be when a scrape arrives: also the least time between two renders.
  static constexpr int kFreshMillis = 1000;
  // How long a scrape waits for a fresh snapshot before it takes the newest there is.
  static constexpr int kRenderWaitMillis = 2000;

  // Listens on ADDR ("127.0.0.1:9464", "0.0.0.0:9464", port 0: any free port). RENDER runs on
  // the render thread only. Refused with one line: an address not on loopback without
  // ACCESS.public_address, or with it but without a token.
  static StatusOr<std::unique_ptr<MetricsHttp>> Start(const std::string& addr, Render render,
                                                      Access access = {});
  ~MetricsHttp();  // stops both threads and closes the sockets

  int port() const { return port_; }

  // Prometheus label value escaping: backslash, double quote and newline.
  static std::string Label(std::string_view value);

 private:
  struct Client;
  struct Snapshot {
    std::shared_ptr<const std::string> text;  // null: none rendered yet
    Clock::time_point started;                // when its render began
  };

  MetricsHttp(int fd, int port, Render render, std::string token);
  // Whether CLIENT's request carries the token (always, without one).
  bool Authorized(const Client& client) const;
  void Loop();
  // One poll() round over the listener and CLIENTS; false: stop.
  bool Step(std::vector<Client>& clients);
  void RenderLoop();
  // Reads what CLIENT sent; false: drop it (closed, too long, an error).
  bool Read(Client& client, Clock::time_point now);
  // Sends what CLIENT can take now; false: done or dropped.
  bool Write(Client& client);
  // The reply for CLIENT's request when it can be made now (from SNAP where it is /metrics).
  bool Answer(Client& client, const Snapshot& snap, Clock::time_point now);
  Snapshot Newest();

  int fd_;
  int port_;
  int wake_[2] = {-1, -1};  // the HTTP thread's: a byte on stop and on each new snapshot
  Render render_;
  const std::string token_;
  std::thread thread_;
  std::thread render_thread_;

  std::mutex mu_;  // the snapshot and the render thread's orders; never held while rendering
  std::condition_variable cv_;
  Snapshot snapshot_;
  Clock::time_point wanted_since_{};  // a render is wanted that starts after this
  bool wanted_ = false;
  bool stopping_ = false;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_METRICS_HTTP_H_
