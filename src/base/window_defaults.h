// What a profiling window is when nobody says otherwise: named once here for the server's
// scheduler, the launcher's and server's flags, the agent's commands to workers and (mirrored in
// python/perftracker/config.py, checked by tests/test_protocol.py) the Python collector.
#ifndef PERFTRACKER_BASE_WINDOW_DEFAULTS_H_
#define PERFTRACKER_BASE_WINDOW_DEFAULTS_H_

namespace perftracker::window_defaults {

// Iterations a window profiles: enough for a median that one odd iteration does not move
// (a data-loader stall every few steps still shows), few enough that the profiler's overhead
// touches a fraction of a percent of a long run.
inline constexpr int kIterations = 10;

// A window's profiling time limit: ten iterations of a slow job (2 s each) fit; a window on a
// job that slowed to a crawl or hung ends anyway, with the iterations it got.
inline constexpr double kMaxSeconds = 20;

}  // namespace perftracker::window_defaults

#endif  // PERFTRACKER_BASE_WINDOW_DEFAULTS_H_
