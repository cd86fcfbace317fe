// The windows the server closes, from sealed to published: a part of the server's state
// (server_impl.h). Closing a window seals it under the server's lock (uploads that arrive
// afterwards are refused as for any closed window) and queues it; one thread of its own
// diagnoses it (diagnose::DiagnoseWindow, against the attempt's baseline window, with the memory
// findings of the moment), renders its page and publishes it. A 10,000-rank diagnosis takes
// seconds and every other call (uploads to the next window, iteration reports, commands,
// status) needs the lock: the thread holds it only to take a window and to publish it. It runs
// at the lowest CPU priority (base/background.h): in `perftracker run` the server shares the
// node with training, and nothing here is urgent. Hangs and amendments publish through Publish
// too. Not for use outside src/server.
#ifndef PERFTRACKER_SERVER_WINDOW_PUBLISHER_H_
#define PERFTRACKER_SERVER_WINDOW_PUBLISHER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "diagnose/finding.h"
#include "diagnose/window_diagnosis.h"
#include "pattern/compact_job.h"
#include "report/html.h"
#include "server/server.h"
#include "server/window.h"

namespace perftracker::server {

class WindowPublisher {
 public:
  // STATE: the server's, which owns this publisher.
  explicit WindowPublisher(Server::Impl* state) : s_(*state) {}

  // Starts the thread.
  void Start();
  // Seals window ID and queues it for the thread, the one path of every window (a trigger, a
  // hang, a new attempt, the job's end); nothing when it is closed already. The server's lock
  // held.
  void CloseLater(int64_t id);
  // Waits, with LK (the server's lock) held and released meanwhile, until window ID is
  // published or the publisher stopped: the last upload's reply waits for its diagnosis.
  void WaitPublished(std::unique_lock<std::mutex>& lk, int64_t id);
  // The thread publishes what is queued, then ends: StopLocked with the server's lock held, then
  // Join without it.
  void StopLocked() { done_ = true; }
  void Join();

  // Writes DIR/windows/<id>/diagnosis.json and report.html, and DIR/diagnosis.json and
  // report.html (the latest), stores and prints D. JOB: the window's patterns (null: a hang).
  // WHAT "amended": D replaces window ID's earlier diagnosis; DIR's files only if they still
  // hold that window's, and no window or hang is counted again. The server's lock held.
  void Publish(int64_t id, const diagnose::Diagnosis& d, const char* what,
               std::shared_ptr<const pattern::CompactJob> job, std::string html);

 private:
  // Above this many series rows, the series is stored at the end of the run only.
  static constexpr size_t kSeriesRowsPerWindow = 200000;

  struct SealedWindow {
    Window::Sealed sealed;
    std::vector<report::RunSeries> series;
    std::vector<report::WindowMark> marks;
    std::optional<diagnose::HealthyRate> rate;  // the job's healthy rate up to the window
  };
  void Loop();

  Server::Impl& s_;
  std::deque<SealedWindow> queue_;  // under the server's lock
  // The attempt's baseline window, which every later window is compared with
  // (diagnose/window_diagnosis.h). The thread's alone: no lock.
  diagnose::BaselineState baseline_;
  bool done_ = false;           // the thread drains the queue, then returns
  int64_t last_published_ = 0;  // the newest window published
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace perftracker::server

#endif  // PERFTRACKER_SERVER_WINDOW_PUBLISHER_H_
