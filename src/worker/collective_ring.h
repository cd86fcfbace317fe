// The worker's ring of collectives: the last kRingSize collectives this process entered through
// torch.distributed's Python API (the patches in python/perftracker/patches.py), each with its
// process group, the group's sequence number (ProcessGroup._get_sequence_number_for_group: the
// number torch's Flight Recorder gives it too), op, input sizes and dtype, the user's frame and
// whether it returned. Always on: one call and a fixed-size copy per collective, no allocation.
//
// It lives in static memory so that a fatal signal (a backend's abort on mismatched collectives,
// a segfault) can still write it: the handler formats it with async-signal-safe code only (no
// malloc, no locks, no stdio) into a static buffer, writes it to the path set beforehand, and
// hands the signal on to whoever had it before (Python's faulthandler, the default action).
// The file is a Flight Recorder dump in JSON form (pattern/flight_recorder.h reads both), with
// "version": "perftracker-ring/1". Outside a signal the same formatter writes it through
// PATH.tmp and a rename.
//
// Writers are the threads that call collectives (the GIL serializes them); the signal handler may
// run on another thread while one writes: an entry is marked busy while it is written and the
// handler leaves a busy entry out.
#ifndef PERFTRACKER_WORKER_COLLECTIVE_RING_H_
#define PERFTRACKER_WORKER_COLLECTIVE_RING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace perftracker::worker {

// What one collective call is, as the Python wrapper sees it before calling torch.
struct CollectiveEntry {
  std::string_view group;          // the process group's name ("0")
  std::string_view group_desc;     // "default_pg"
  int64_t seq = -1;                // the group's number for it
  std::string_view op;             // "all_reduce"
  std::string_view backend;        // "gloo"
  const int64_t* sizes = nullptr;  // the input tensor's sizes (null: no tensor)
  size_t dims = 0;
  std::string_view dtype;  // "Float"
  std::string_view file;   // the user's frame
  int line = 0;
  std::string_view function;
};

namespace collective_ring {

// Entries kept: torch's Flight Recorder keeps 2,000 of every collective; this ring holds the
// Python-level ones only (DDP's bucket all-reduces come from C++ and are not seen), and a desync
// or hang is read from the last few. 64 entries x ~400 bytes stays in one 32 KiB static block.
inline constexpr size_t kRingSize = 64;

// Records a collective the caller is about to make; returns its ticket for Returned().
uint64_t Entered(const CollectiveEntry& e, int64_t now_ns);
// The collective of TICKET returned (a synchronous one completed; an async one was enqueued).
void Returned(uint64_t ticket, bool completed);

// The ring as a Flight Recorder JSON dump, oldest first.
std::string DumpJson();
// Writes DumpJson() to PATH through PATH.tmp and a rename.
Status WriteDump(const std::string& path);

// Where the fatal-signal handler writes the ring (copied; at most 1 KiB). Installs the handler
// for SIGABRT, SIGSEGV, SIGBUS, SIGFPE and SIGILL the first time. Empty: the handler writes
// nothing (and still hands the signal on).
Status SetCrashPath(const std::string& path);

// Tests: forget every entry.
void ResetForTest();

}  // namespace collective_ring
}  // namespace perftracker::worker

#endif  // PERFTRACKER_WORKER_COLLECTIVE_RING_H_
