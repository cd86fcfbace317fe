#include "base/start_thread.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace perftracker {
namespace {

TEST(StartThreadTest, RunsTheFunction) {
  std::atomic<bool> ran{false};
  std::thread t;
  ASSERT_TRUE(StartThread(&t, [&] { ran = true; }).ok());
  t.join();
  EXPECT_TRUE(ran);
}

// A refused thread (the user's task limit reached) is an error value, not std::terminate. In a
// child process: the limit is set to one task, and root, whom RLIMIT_NPROC does not bind,
// becomes nobody first.
TEST(StartThreadTest, ARefusedThreadIsAnError) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    const rlimit one{1, 1};
    if (setrlimit(RLIMIT_NPROC, &one) != 0) _exit(4);
    std::thread t;
    const Status st = StartThread(&t, [] {});
    if (st.ok()) {
      t.join();
      _exit(5);
    }
    _exit(st.message().rfind("cannot start a thread: ", 0) == 0 ? 0 : 6);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: setuid failed, 4: setrlimit failed, 5: the thread "
                                       "started, 6: another message";
}

}  // namespace
}  // namespace perftracker
