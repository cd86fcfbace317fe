// What `perftracker run` shows on the terminal while a job runs: the ranks' own lines, relayed
// whole so that they never share a terminal line with the live status line, and that status line
// itself. Owns the relay's pipes and its reader thread.
#ifndef PERFTRACKER_CLI_JOB_OUTPUT_H_
#define PERFTRACKER_CLI_JOB_OUTPUT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "agent/agent.h"
#include "base/status.h"

namespace perftracker::cli {

using Clock = std::chrono::steady_clock;

// How often the live status line is refreshed: often enough to feel live, rarely enough to cost
// nothing.
constexpr auto kStatusInterval = std::chrono::milliseconds(250);
// A rank's output line longer than this is passed on in pieces (a progress bar without newlines).
constexpr size_t kMaxPassthroughLine = 64 << 10;
// A rank's last stderr lines kept for the diagnosis of how it ended: a Python traceback's last
// lines or a C++ terminate message fit in 8; a line is cut at 400 characters (a finding quotes
// them, a page does not).
constexpr size_t kErrorTailLines = 8;
constexpr size_t kErrorTailChars = 400;

// Whether a rank's stderr LINE is the profiler's own log (Kineto's "USDT:... profiler_stop",
// "STAGE:... ActivityProfilerController.cpp..."), which every profiled window writes: never the
// error a crash's diagnosis should quote.
bool IsProfilerChatter(std::string_view line);

// On a terminal the ranks' stdout and stderr come through pipes, so that their lines and the
// status line never share a terminal line. One thread reads every pipe and writes whole lines.
class OutputRelay {
 public:
  // Pipes for the next child (children are numbered from 0 in the order they are added): returns
  // {child's stdout, child's stderr} write ends, {-1, -1} on failure. Without WITH_STDOUT the
  // child's stdout is left as it is ({-1, stderr}): its stderr still passes through here, for
  // its error tail.
  std::pair<int, int> AddChild(bool with_stdout = true);
  // After the children were spawned: the parent's write ends close, the reader starts (an error
  // when the system refuses the thread: the children's pipes would fill, so the job must stop).
  Status Start();
  // Returns once every child's pipes reached end of file (all writers, the ranks' own children
  // included, are gone), or after a bound: a daemon a rank left behind may hold a pipe forever.
  void Join();
  // After Join: the last lines child CHILD wrote to stderr, oldest first (kErrorTailLines at
  // most, each cut to kErrorTailChars), without the profiler's chatter: what the diagnosis of a
  // crash quotes.
  std::vector<std::string> ErrorTail(int child) const;

 private:
  struct End {
    int fd;
    int target;
    std::string partial;
    int child = -1;
    std::deque<std::string> tail;  // stderr ends: the last lines
  };
  void Keep(End* e, std::string_view lines);

  void Loop();

  int children_ = 0;
  std::vector<End> ends_;
  std::vector<int> write_ends_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
};

// "0:24", "1:02:03": a job's running time.
std::string Elapsed(Clock::duration d);

// "perftracker 0:24 | iteration 137, 84.3 ms | detector: watching | window 1: profiling (2/4)"
std::string StatusLine(const agent::AgentProgress& p, Clock::duration elapsed, int ranks);

}  // namespace perftracker::cli

#endif  // PERFTRACKER_CLI_JOB_OUTPUT_H_
