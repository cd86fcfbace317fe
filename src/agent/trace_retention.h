// Bounds the raw traces a node keeps. Every window writes its ranks' traces under
// TRACE_DIR/window-<id>/; they are summarized and uploaded when the window ends, and then only
// a person debugging needs them. A long job with periodic windows would otherwise fill the
// disk: the folders of all but the newest `keep_windows` windows are removed, and older ones
// go too while the total is over `max_bytes`. The window being written is never touched.
#ifndef PERFTRACKER_AGENT_TRACE_RETENTION_H_
#define PERFTRACKER_AGENT_TRACE_RETENTION_H_

#include <cstdint>
#include <string>
#include <vector>

namespace perftracker::agent {

struct TraceRetention {
  int keep_windows = 3;                    // newest window folders kept
  uint64_t max_bytes = uint64_t{2} << 30;  // all kept folders together
};

struct PrunedWindow {
  int64_t window_id = 0;
  uint64_t bytes = 0;
};

// Removes window folders of TRACE_DIR beyond the policy, oldest first, never CURRENT_WINDOW's.
// Returns what it removed (for the log).
std::vector<PrunedWindow> PruneTraces(const std::string& trace_dir, const TraceRetention& policy,
                                      int64_t current_window);

}  // namespace perftracker::agent

#endif  // PERFTRACKER_AGENT_TRACE_RETENTION_H_
