// Small socket and host helpers shared by the launcher, the agent and the benchmarks.
#ifndef PERFTRACKER_BASE_NET_H_
#define PERFTRACKER_BASE_NET_H_

#include <string>

#include "base/status.h"

namespace perftracker {

// This node's name as the job's launcher knows it: Slurm's (SLURMD_NODENAME; several nodes may
// share a machine), else the host name. Agents register under it and `{node}` in paths is it.
std::string NodeName();

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it back, close), or
// 0 when none could be had. Another process may take it before the caller binds it.
int FreeLoopbackPort();

// Whether ADDRESS (host:port, or a host) is this machine's loopback: 127.0.0.1, localhost or
// [::1]. Off loopback the token and every summary cross a network: servers and clients then
// want TLS.
bool IsLoopbackAddress(const std::string& address);

// A non-blocking listening Unix stream socket bound at PATH (close-on-exec; its fd). A socket
// file left at PATH by a process that is gone (no one accepts on it) is replaced; one a live
// process listens on, or a file of another kind, is an error, as is a PATH too long for
// sockaddr_un. Errors name PATH and begin with WHO ("agent: ...").
StatusOr<int> ListenUnixSocket(const std::string& path, const std::string& who);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_NET_H_
