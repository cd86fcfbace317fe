// Small socket helpers shared by the launcher and the benchmarks.
#ifndef PERFTRACKER_BASE_NET_H_
#define PERFTRACKER_BASE_NET_H_

namespace perftracker {

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it back, close), or
// 0 when none could be had. Another process may take it before the caller binds it.
int FreeLoopbackPort();

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_NET_H_
