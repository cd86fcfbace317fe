// Work that only a person reads later (a window's summaries, its diagnosis and pages, a Python
// tracer file) must not slow the training on the same node: the threads that do it run at the
// lowest CPU priority, so that the kernel gives training every core it wants and this work the
// rest. Only threads that hold nothing training waits for may be lowered: a thread that holds
// the Python GIL at low priority would make the training thread wait for the scheduler to run
// it (priority inversion), so Python code is never lowered.
//   BecomeBackgroundThread("pt-publish");  // first thing in the background thread's body
#ifndef PERFTRACKER_BASE_BACKGROUND_H_
#define PERFTRACKER_BASE_BACKGROUND_H_

#include "base/status.h"

namespace perftracker {

// The nice value of background threads: the lowest priority. Under full load such a thread gets
// about 1.5% of a core per busy training thread beside it (the kernel's weights: 15 for nice 19,
// 1024 for nice 0), and every idle cycle; a window's post-processing on a 4-rank CPU job is tens
// of ms of CPU, so it still completes within seconds there, and at once where cores are idle
// (a GPU job's CPUs mostly are).
inline constexpr int kBackgroundNice = 19;

// Names the calling thread NAME (at most 15 characters: what top -H and /proc show) and lowers
// it (not the process) to kBackgroundNice. On Linux a nice value is per thread; raising it back
// needs privileges, so only threads that do nothing else call this.
Status BecomeBackgroundThread(const char* name);

// The calling thread's nice value (for tests).
int ThisThreadNice();

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_BACKGROUND_H_
