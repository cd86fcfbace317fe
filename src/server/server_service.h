// The server's gRPC service (perftracker.proto's Server): each call's token is checked and its
// request bounded and validated, then it is handed to the server's state (server_impl.h) under
// the state's lock. A call that throws fails alone, logged (the server goes on with the job).
// Server::Start registers it. Not for use outside src/server.
#ifndef PERFTRACKER_SERVER_SERVER_SERVICE_H_
#define PERFTRACKER_SERVER_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "perftracker.grpc.pb.h"
#include "server/server.h"

namespace perftracker::server {

namespace v1 = ::perftracker::v1;

class ServerService final
    : public v1::Server::WithCallbackMethod_WatchCommands<v1::Server::Service> {
 public:
  // STATE outlives the service (it owns it).
  explicit ServerService(Server::Impl* state) : s_(*state) {}

  // Each call Guarded, then its Do*.
  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterReply* reply) override;
  grpc::Status ReportIterations(grpc::ServerContext* ctx, const v1::ReportIterationsRequest* req,
                                v1::ReportIterationsReply* reply) override;
  grpc::Status UploadWindow(grpc::ServerContext* ctx, const v1::UploadWindowRequest* req,
                            v1::UploadWindowReply* reply) override;
  grpc::Status UploadStacks(grpc::ServerContext* ctx, const v1::UploadStacksRequest* req,
                            v1::UploadStacksReply* reply) override;
  grpc::Status Trigger(grpc::ServerContext* ctx, const v1::TriggerRequest* req,
                       v1::TriggerReply* reply) override;
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusReply* reply) override;
  grpc::ServerWriteReactor<v1::Command>* WatchCommands(grpc::CallbackServerContext* ctx,
                                                       const v1::WatchRequest* req) override;

 private:
  // OK when the server has no token or the call carries it (x-perftracker-token).
  grpc::Status Authorize(grpc::ServerContextBase* ctx);
  grpc::Status DoRegister(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                          v1::RegisterReply* reply);
  grpc::Status DoReportIterations(grpc::ServerContext* ctx, const v1::ReportIterationsRequest* req,
                                  v1::ReportIterationsReply*);
  grpc::Status DoUploadWindow(grpc::ServerContext* ctx, const v1::UploadWindowRequest* req,
                              v1::UploadWindowReply* reply);
  grpc::Status DoUploadStacks(grpc::ServerContext* ctx, const v1::UploadStacksRequest* req,
                              v1::UploadStacksReply* reply);
  grpc::Status DoTrigger(grpc::ServerContext* ctx, const v1::TriggerRequest* req,
                         v1::TriggerReply* reply);
  grpc::Status DoStatus(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                        v1::StatusReply* reply);

  Server::Impl& s_;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_SERVER_SERVICE_H_
