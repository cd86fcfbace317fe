#include "base/background.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace perftracker {
namespace {

id_t ThisThreadId() { return static_cast<id_t>(syscall(SYS_gettid)); }

}  // namespace

Status BecomeBackgroundThread(const char* name) {
  pthread_setname_np(pthread_self(), name);  // longer names are refused, and stay unnamed
  if (setpriority(PRIO_PROCESS, ThisThreadId(), kBackgroundNice) != 0)
    return Internal(std::string("cannot lower a background thread's priority: ") +
                    std::strerror(errno));
  return Status::Ok();
}

int ThisThreadNice() {
  errno = 0;
  return getpriority(PRIO_PROCESS, ThisThreadId());
}

}  // namespace perftracker
