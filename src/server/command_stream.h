// One node agent's WatchCommands stream (CommandStream): the server queues profile and stack
// commands for it and they are written in order, without a thread per agent. Owned by gRPC; the
// collector keeps a pointer while the stream is open.
#ifndef PERFTRACKER_SERVER_COMMAND_STREAM_H_
#define PERFTRACKER_SERVER_COMMAND_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <mutex>

#include "perftracker.grpc.pb.h"

namespace perftracker::server {

// One agent's WatchCommands stream on gRPC's callback API: it holds no thread while it waits,
// and a command is written the moment it is queued (the sync API needed a thread per agent,
// each polling for commands and cancellation). Its own mutex guards its queue and write state;
// the service's mutex is taken first wherever both are held.
class CommandStream final : public grpc::ServerWriteReactor<::perftracker::v1::Command> {
 public:
  // Takes `cmds` for the client, written in order as earlier writes complete. False (cmds left
  // as they are) once the stream is finishing: the caller keeps them for the next stream.
  bool Push(std::deque<::perftracker::v1::Command>* cmds) {
    {
      std::lock_guard lk(mu_);
      if (finished_) return false;
      for (auto& c : *cmds) queue_.push_back(std::move(c));
    }
    cmds->clear();
    Pump();
    return true;
  }

  // Ends the stream: a refusal, a newer stream of the same agent, server shutdown.
  void Close(const grpc::Status& st = grpc::Status::OK) { FinishOnce(st); }

  // Set by the service: hands back what was not sent and forgets the stream, under its mutex.
  std::function<void(CommandStream*, std::deque<::perftracker::v1::Command>)> on_done;

 private:
  void Pump() {
    {
      std::lock_guard lk(mu_);
      if (writing_ || finished_ || queue_.empty()) return;
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    StartWrite(&current_);
  }

  void FinishOnce(const grpc::Status& st) {
    {
      std::lock_guard lk(mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(st);
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard lk(mu_);
      writing_ = false;
      if (!ok) queue_.push_front(std::move(current_));  // not delivered: for the next stream
    }
    if (ok) {
      Pump();
    } else {
      FinishOnce(grpc::Status::OK);
    }
  }

  void OnCancel() override { FinishOnce(grpc::Status::CANCELLED); }

  void OnDone() override {
    std::deque<::perftracker::v1::Command> left;
    {
      std::lock_guard lk(mu_);
      left.swap(queue_);
    }
    if (on_done) on_done(this, std::move(left));
    delete this;
  }

  std::mutex mu_;
  std::deque<::perftracker::v1::Command> queue_;
  ::perftracker::v1::Command current_;
  bool writing_ = false;
  bool finished_ = false;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_COMMAND_STREAM_H_
