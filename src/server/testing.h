// What the server's tests share (test-only; no library source includes it): a gRPC client that
// makes an agent's calls as agent/agent.cc makes them, a fresh temporary folder, a file's text.
#ifndef PERFTRACKER_SERVER_TESTING_H_
#define PERFTRACKER_SERVER_TESTING_H_

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "perftracker.grpc.pb.h"
#include "server/server.h"

namespace perftracker::server::testing {

// An empty folder of the system's temporary one, named after the test and this process.
inline std::string TempDir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("pt_server_test_" + name + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A test server's options: its own report folder (TempDir(NAME)), nothing printed, and where
// given (> 0), a window's length and its upload grace in seconds.
inline ServerOptions TestOptions(const std::string& name, double max_seconds = 0,
                                 double upload_grace_seconds = 0) {
  ServerOptions o;
  o.report_dir = TempDir(name);
  o.print = false;
  if (max_seconds > 0) o.max_seconds = max_seconds;
  if (upload_grace_seconds > 0) o.upload_grace_seconds = upload_grace_seconds;
  return o;
}

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An agent's calls to the collector on 127.0.0.1:PORT (with TOKEN, when one is given).
class AgentClient {
 public:
  explicit AgentClient(int port, std::string token = "")
      : token_(std::move(token)),
        stub_(v1::Server::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                      grpc::InsecureChannelCredentials()))) {}

  template <typename Req, typename Reply, typename Fn>
  grpc::Status Call(Fn fn, const Req& req, Reply* reply) {
    grpc::ClientContext ctx;
    if (!token_.empty()) ctx.AddMetadata("x-perftracker-token", token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return (stub_.get()->*fn)(&ctx, req, reply);
  }
  v1::Server::Stub* stub() { return stub_.get(); }

  // Registers an agent of HOST with RANKS (none: it declares none); its id in *ID.
  bool Register(const std::vector<int>& ranks, std::string* id, const std::string& host = "") {
    v1::RegisterRequest req;
    req.set_host(host);
    for (int r : ranks) req.add_ranks(r);
    v1::RegisterReply reply;
    bool ok = Call(&v1::Server::Stub::Register, req, &reply).ok();
    *id = agent_ = reply.agent_id();
    return ok;
  }

  // RANK's iterations STEPS, MS[i] each, from process PID of restart count ATTEMPT, as AGENT
  // (empty: the agent registered last).
  bool Report(int rank, const std::vector<int64_t>& steps, const std::vector<double>& ms,
              const std::string& agent = "", int pid = 0, int attempt = 0) {
    v1::ReportIterationsRequest req;
    req.set_agent_id(agent.empty() ? agent_ : agent);
    auto* b = req.add_batches();
    b->set_rank(rank);
    if (pid != 0) b->set_pid(pid);
    if (attempt != 0) b->set_attempt(attempt);
    for (size_t i = 0; i < steps.size(); ++i) {
      b->add_steps(steps[i]);
      b->add_iteration_ms(ms[i]);
    }
    v1::ReportIterationsReply reply;
    return Call(&v1::Server::Stub::ReportIterations, req, &reply).ok();
  }

 private:
  std::string agent_;  // the id of the agent registered last
  std::string token_;
  std::unique_ptr<v1::Server::Stub> stub_;
};

}  // namespace perftracker::server::testing

#endif  // PERFTRACKER_SERVER_TESTING_H_
