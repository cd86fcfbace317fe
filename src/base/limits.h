// Bounds on what a file or a peer may declare, checked before anything is allocated for it.
// Every reader (traces, summaries, worker messages, uploads) takes its limits from here, so a
// number that decides how much memory untrusted input can ask for is named once, with why.
#ifndef PERFTRACKER_BASE_LIMITS_H_
#define PERFTRACKER_BASE_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace perftracker::limits {

// Ranks in one job. The largest training jobs run ~100,000 GPUs; ten times that leaves room
// and still keeps a per-rank table of a declared world size to a few MB.
inline constexpr int kMaxWorldSize = 1 << 20;

// True for a rank number a job of kMaxWorldSize ranks can have.
inline constexpr bool ValidRank(int64_t rank) { return rank >= 0 && rank < kMaxWorldSize; }
inline constexpr bool ValidWorldSize(int64_t n) { return n >= 1 && n <= kMaxWorldSize; }

// A launcher's restart count of its workers (torchrun's TORCHELASTIC_RESTART_COUNT): a job is
// restarted a handful of times, a runaway one thousands; a larger number is not believed.
inline constexpr int kMaxAttempt = 1 << 20;
inline constexpr bool ValidAttempt(int64_t n) { return n >= 0 && n <= kMaxAttempt; }

// The inflated body of one rank's summary. Real ones are 50-400 KB (a few hundred functions,
// a few thousand Python call-stack nodes); 16 MiB is forty times the largest seen, and bounds
// what a small compressed file (a zstd bomb) can make a reader hold.
inline constexpr size_t kMaxSummaryPayload = 16u << 20;

// What one decoded summary may hold in memory (its strings, functions, per-iteration values):
// real ones hold 1-3 MB. The decoder charges every allocation to this before making it, so a
// body that names one long string a million times is refused instead of expanding.
inline constexpr size_t kMaxSummaryMemory = 64u << 20;

// A summary file or upload as stored (compressed): the payload cap plus the header.
inline constexpr size_t kMaxSummaryFile = kMaxSummaryPayload + 64;

// A Flight Recorder dump (torch's _dump_fr_trace, pickle or JSON): its default ring of 2,000
// collectives with their stacks is 2-6 MB; 64 MiB holds ten times the largest ring with deep
// stacks and bounds what one rank's file can make the reader hold.
inline constexpr size_t kMaxPickleBytes = 64u << 20;
inline constexpr size_t kMaxFlightRecorderDump = kMaxPickleBytes;

// What one dump's entries may become once read (their strings, sizes and frames, as the reader
// copies them): a real dump of 2,000 collectives with deep stacks becomes 5-15 MB. A pickle
// refers to a memoized value for two bytes a reference and each entry copies what it refers to
// (measured: two dumps of 9.7 MB that asked for ~2 TB aborted the reader), so the copy is
// charged before it is made: 64 MiB a dump, 256 MiB for all the dumps of one analysis.
inline constexpr size_t kMaxFlightRecorderExpanded = 64u << 20;
inline constexpr size_t kMaxFlightRecorderSetExpanded = 256u << 20;

// Values one pickle may make (each is ~64 bytes in the reader's arena): a 2,000-entry dump has
// ~250,000; 4M of them is 256 MB at most, whatever the file's opcodes ask for.
inline constexpr size_t kMaxPickleNodes = 1u << 22;

// Events a trace may make `perftracker show`'s critical path keep (pattern/rank_critical_path.h;
// ~64 bytes each): a real GPU trace of ten steps holds 50,000-500,000 of the CPU ops, CUDA calls
// and kernels it keeps; 2M of them is 128 MB at most, and a trace past it gets no path, noted.
inline constexpr size_t kMaxCriticalPathEvents = 1u << 21;

// Trace JSON (trace/): the deepest nesting accepted, far past any trace, bounds the scanner's
// bracket stack on a hostile file; a quote followed by more whitespace than the lookahead is
// taken to end its string (the repair of unescaped quotes looks no further).
inline constexpr size_t kMaxJsonDepth = 1024;
inline constexpr size_t kMaxQuoteLookahead = 1 << 16;
// Unknown event categories counted by name (ReadStats::unknown_cats): enough for the few a real
// trace holds, while a file full of made-up ones cannot grow the stats without bound.
inline constexpr size_t kMaxUnknownCategories = 64;
// Finding categories a diagnosis reader does not know, named in its note (report/diagnosis_reader):
// a newer writer adds one or two; a file of made-up ones cannot make the note long.
inline constexpr size_t kMaxUnknownFindingCategoriesNamed = 8;

// A worker's line to its agent (agent/socket_sink.h, agent/worker_message.h): the line itself,
// then its contents. Strings (paths, names, reasons) longer than kMaxWorkerString are cut; a
// batch holds at most kMaxWorkerItems iterations (0.5 s of them); a stacks reply at most
// kMaxStackThreads threads of kMaxStackFrames frames (the innermost kept).
inline constexpr size_t kMaxWorkerLine = 1 << 20;
inline constexpr size_t kMaxWorkerString = 4096;
inline constexpr size_t kMaxWorkerItems = 10000;
inline constexpr size_t kMaxStackThreads = 256;
inline constexpr size_t kMaxStackFrames = 256;
// A memory figure a worker reports (the CUDA allocator's bytes): 1 PiB, far above any device's
// memory; more is a corrupt line, dropped.
inline constexpr double kMaxMemoryBytes = 1125899906842624.0;

// An HTTP request to /metrics: a request line and headers fit in this; more is not a scraper.
inline constexpr size_t kMaxHttpRequest = 8 << 10;

// The Python tracer's window file (base/python_window_format.h), read whole: the tracer's caps
// (64 K nodes, 64 K long calls) keep it under ~40 MB; a file far beyond that is not one of ours.
inline constexpr size_t kMaxPythonWindowFile = 512u << 20;

}  // namespace perftracker::limits

#endif  // PERFTRACKER_BASE_LIMITS_H_
