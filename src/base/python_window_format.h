// The Python tracer's window file, "perftracker.python_window/1" (src/worker/protocol.md): its
// schema, the layout of its arrays, its histogram's buckets and how to recognise one. The one
// home of the format: the writer (worker/window_file.h) and the one reader
// (pattern/python_window.h, which the summary and the Perfetto export both use) take every
// part of it from here; the reader's size cap is limits::kMaxPythonWindowFile.
//   {"schema":"perftracker.python_window/1","pid":1,"tid":1,"start_ns":0,"end_ns":9,
//    "iterations":[[index, start_ns, end_ns]], "names":[...],
//    "nodes":[[parent, name, gc, count, total_ns, self_ns, min_ns, max_ns, sum_sq_ns,
//              hist_offset, [hist...], [[iteration, calls, inclusive_ns, self_ns]]]],
//    "long_calls":[[node, start_ns, end_ns]], "stats":{"calls":N, ...}}
// and, in a window that sampled the Python heap (a growing rank's memory window), the sampled
// allocations still live at its end by node and iteration (worker/heap_sampler.h):
//    "kept_memory":{"sample_bytes":65536, "samples":N, "dropped":N,
//                   "cells":[[node, iteration, bytes, samples(, op)]]}
// (iteration -1: made outside the window's iterations; bytes: the samples' weights; op, where
// present: the name of the torch op whose tensors were followed whole, where the torch records
// no allocations of its own: python/perftracker/kept_tensors.py).
#ifndef PERFTRACKER_BASE_PYTHON_WINDOW_FORMAT_H_
#define PERFTRACKER_BASE_PYTHON_WINDOW_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace perftracker::python_window {

inline constexpr char kSchema[] = "perftracker.python_window/1";
// Any version of the file starts with its schema; a reader recognises the family first, then
// refuses a version it does not read with one line.
inline constexpr std::string_view kSchemaFamily = "perftracker.python_window/";

// Node 0 is the root of the call tree, node 1 the tracer's overflow node: calls of stacks first
// seen past the node cap, or deeper than the depth cap, are counted there.
inline constexpr size_t kRootNode = 0;
inline constexpr size_t kOtherNode = 1;
inline constexpr char kOtherName[] = "<other: tracer node or depth cap reached>";

// Positions in a node's array.
enum NodeSlot : size_t {
  kParent,
  kName,
  kGc,
  kCount,
  kTotalNs,
  kSelfNs,
  kMinNs,
  kMaxNs,
  kSumSqNs,
  kHistOffset,
  kHist,
  kCells,
  kNodeSlots
};
// Positions in an iteration's, an iteration cell's and a long call's arrays.
enum IterationSlot : size_t {
  kIterationIndex,
  kIterationStartNs,
  kIterationEndNs,
  kIterationSlots
};
enum CellSlot : size_t { kCellIteration, kCellCalls, kCellInclusiveNs, kCellSelfNs, kCellSlots };
enum LongCallSlot : size_t { kLongCallNode, kLongCallStartNs, kLongCallEndNs, kLongCallSlots };
enum KeptCellSlot : size_t {
  kKeptNode,
  kKeptIteration,
  kKeptBytes,
  kKeptSamples,
  kKeptCellSlots,  // without the optional op
  kKeptOp = kKeptCellSlots
};

// The histogram: four buckets per power of two, bucket b starting at 2^(b/4) * (1 + (b%4)/4)
// ns; buckets 0-3 hold 0-3 ns exactly (4-7 stay empty). Any quantile comes back within ~12% of
// a real value, and the writer finds a bucket without a logarithm.
//   HistogramBucket(5) == 9; HistogramLowerEdge(9) == 5; HistogramLowerEdge(13) == 10
int HistogramBucket(int64_t ns);
double HistogramLowerEdge(int bucket);
// A node's histogram starts at most at kMaxHistogramOffset and ends before kMaxHistogramEnd:
// 2^64 ns is bucket 256.
inline constexpr int64_t kMaxHistogramOffset = 256;
inline constexpr size_t kMaxHistogramEnd = 300;

// True when HEAD (a file's first bytes) starts a Python window file of any version.
bool LooksLikePythonWindow(std::string_view head);

}  // namespace perftracker::python_window

#endif  // PERFTRACKER_BASE_PYTHON_WINDOW_FORMAT_H_
