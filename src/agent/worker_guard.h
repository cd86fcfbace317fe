// What the agent checks before it believes a worker (issue 26). The socket's folder is private
// (base/private_dir.h), but a worker is still a process the agent does not control: the peer of
// each connection must run as the agent's own user (SO_PEERCRED), and a trace file a worker names
// is read only if it lies inside the agent's trace folder and is a regular file, opened without
// following a link and without blocking (a FIFO named as a trace kept the agent's thread, and the
// launcher's SIGTERM, waiting for a writer); and, once a worker's connection closed, whether its
// process is gone. Owns no state; socket_sink.cc calls it.
#ifndef PERFTRACKER_AGENT_WORKER_GUARD_H_
#define PERFTRACKER_AGENT_WORKER_GUARD_H_

#include <sys/types.h>

#include <string>

#include "base/status.h"

namespace perftracker::agent {

struct PeerCredentials {
  int pid = 0;  // in the agent's PID namespace (0: the kernel could not map it)
  uid_t uid = 0;
};

// The process at the other end of a connected Unix socket FD, as the kernel says.
StatusOr<PeerCredentials> PeerOf(int fd);

// Whether a worker running as PEER may talk to an agent running as AGENT: only the same user
// (root's processes therefore only reach an agent that runs as root).
inline bool PeerAllowed(uid_t peer, uid_t agent) { return peer == agent; }

// PATH's real path when it names a regular file inside TRACE_ROOT (itself a real path: no link
// in it, as realpath() gives). Refused with one line naming PATH: missing, outside the folder
// (after links are resolved), a link, not a regular file (a FIFO, a device, a folder), or
// another user's. The file is opened O_NONBLOCK | O_NOFOLLOW to be checked, so the check itself
// never blocks.
StatusOr<std::string> CheckTraceFile(const std::string& trace_root, const std::string& path);

// Whether process PID has ended: no such process, or a zombie its parent has not reaped yet
// (after a worker's connection closed, whether it exited is what the server is told). A worker
// in another PID namespace than the agent's cannot be told; its pid then reads as gone.
bool ProcessGone(int pid);

// realpath(PATH), or the error naming it.
StatusOr<std::string> RealPath(const std::string& path);

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_WORKER_GUARD_H_
