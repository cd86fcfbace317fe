// Starting a thread without std::terminate: std::thread's constructor throws std::system_error
// when the system refuses a thread (EAGAIN: RLIMIT_NPROC or the kernel's task limit reached,
// which a launcher that has just forked hundreds of ranks can hit), and an exception that
// leaves a thread's caller ends the process. Here that is an error value, so a collector or a
// launcher says what failed and goes on or stops cleanly.
//   std::thread t;
//   if (Status st = StartThread(&t, [] { Work(); }); !st.ok()) { /* one line, no thread */ }
#ifndef PERFTRACKER_BASE_START_THREAD_H_
#define PERFTRACKER_BASE_START_THREAD_H_

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "base/status.h"

namespace perftracker {

template <typename F>
Status StartThread(std::thread* out, F&& fn) {
  try {
    *out = std::thread(std::forward<F>(fn));
  } catch (const std::system_error& e) {
    return Internal(std::string("cannot start a thread: ") + e.code().message());
  }
  return Status::Ok();
}

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_START_THREAD_H_
