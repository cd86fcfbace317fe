// Merges two summaries of one rank's one window: the Python tracer's trace (whose ProfilerStep
// markers own the iterations) and torch.profiler's trace of the same window (or of its first
// iterations), written side by side by the worker. The two profilers keep separate clocks, so
// nothing is aligned in time:
// the secondary trace's functions and GPU figures are re-based on the primary's iterations.
// The secondary's CPU ops on the training thread are marked in_python when the primary's
// Python frames cover that thread: their time is already in those frames' self times.
#ifndef PERFTRACKER_PATTERN_MERGE_H_
#define PERFTRACKER_PATTERN_MERGE_H_

#include "pattern/pattern.h"

namespace perftracker::pattern {

// Adds to PRIMARY every function of SECONDARY whose Key() PRIMARY lacks (PRIMARY's figures win
// where both saw a function), with per-iteration figures over PRIMARY's iterations; takes
// SECONDARY's GPU breakdown when PRIMARY has none, rank-level facts PRIMARY lacks, and its
// iterations when PRIMARY has none, and its memory and memory sites. SECONDARY's Python frames
// are left out where PRIMARY's cover the training thread. Where the two split the window into
// as many iterations and SECONDARY kept every one PRIMARY did (a window's torch trace leaves no
// warm-up out: Summarizer::LeaveWarmupIn), an added function's per-iteration values are moved
// onto PRIMARY's iterations; otherwise they stay SECONDARY's own. read_stats are summed;
// functions stay sorted by per_iter_us, descending. A SECONDARY that spans a part of PRIMARY's
// window (torch.profiler records a window's first iterations: base/window_defaults.h
// kTorchProfilerIterations) keeps its own per-iteration means: its totals are spread over its
// own iterations, or over as many of PRIMARY's as it spans when it found none.
void MergeWindowSummary(RankSummary* primary, const RankSummary& secondary);

}  // namespace perftracker::pattern

#endif  // PERFTRACKER_PATTERN_MERGE_H_
