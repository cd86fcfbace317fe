// Every number the diagnosis decides with, named once, with the reason for its value: the one
// place to read or change a threshold (LevelDB's db/dbformat.h keeps its policy numbers the same
// way). docs/diagnosis.md describes each of them; policy_test.cc fails when one is missing there.
//
// The table drives the constants (diagnose::policy::kName), and the list of names, values and
// reasons that tests and `perftracker diagnose --list-policy` read. Options users tune per run
// (DiagnoseOptions) take their defaults from here.
#ifndef PERFTRACKER_DIAGNOSE_POLICY_H_
#define PERFTRACKER_DIAGNOSE_POLICY_H_

#include <cstddef>

namespace perftracker::diagnose::policy {

// X(name, value, unit, reason)
#define PT_DIAGNOSIS_POLICY(X)                                                                     \
  /* Peer comparison (subset problems). */                                                         \
  X(kMinRelative, 0.10, "ratio",                                                                   \
    "an outlier is at least 10% above its peers' median: closer is within run-to-run variation")   \
  X(kMinAbsMs, 0.5, "ms per iteration",                                                            \
    "an outlier costs at least 0.5 ms per iteration: less is not worth a finding")                 \
  X(kMinFraction, 0.05, "share of the iteration",                                                  \
    "an outlier costs at least 5% of the iteration: below it a shared host's scheduling moves "    \
    "single functions of healthy ranks, and a 5% slowdown is the trigger's smallest")              \
  X(kMadK, 5.0, "robust z",                                                                        \
    "an outlier is 5 MAD-scales above its peers: rare for noise even among thousands of ranks")    \
  X(kLeaveOneOutMax, 16, "ranks",                                                                  \
    "groups up to 16 ranks compare each rank with the others only; in larger ones a single rank "  \
    "barely moves the median")                                                                     \
  X(kTwoRankGap, 0.25, "ratio",                                                                    \
    "with two ranks one must be 25% above the other: there is no majority to vote with")           \
  X(kExtraCallsRatio, 1.1, "ratio", "more calls than the peers is at least 10% more...")           \
  X(kExtraCallsAbs, 0.5, "calls per iteration",                                                    \
    "...and half a call per iteration more: counts differ by one across window edges")             \
  X(kCulpritShareOfTop, 0.1, "share of the top excess",                                            \
    "functions with a tenth of the biggest self-time excess are named with it...")                 \
  X(kCulpritShareNonOutlier, 0.25, "share of the top excess",                                      \
    "...a quarter when they are not outliers themselves")                                          \
  X(kOpWorkShareOfPython, 0.5, "share of the Python culprits' excess",                             \
    "a rank named for Python frames computes more, not slow Python, when the torch ops inside "    \
    "its frames grew by half their excess: a builtin calling an op (<built-in method mm>) holds "  \
    "the op's time")                                                                               \
  X(kWaitExplainsShare, 0.5, "ratio",                                                              \
    "a candidate that waits longer than half its own excess is waiting for another candidate")     \
  X(kEarlyArrivalShare, 0.5, "share of the extra collective time",                                 \
    "a rank whose own work is short of its peers' by half its extra collective time arrived "      \
    "early and waited for them: its link is not slow")                                             \
  X(kLateMemberShare, 0.5, "share of a group's wait",                                              \
    "a collective-group member waiting under half the group's extra wait arrived late")            \
  X(kBackedUpRelative, 0.1, "share of the largest queue",                                          \
    "connections hold a tenth of the largest queue to count as backed up too")                     \
  X(kMinSignificance, 3.0, "standard errors",                                                      \
    "a collective-time difference (a late arrival) must exceed 3 standard errors "                 \
    "of the window's iteration-to-iteration noise, on top of its size gates: less is what noise "  \
    "does in 1 window of 100")                                                                     \
  X(kMinSignificanceTimingOnly, 4.0, "standard errors",                                            \
    "a rank slower with equal calls, or a link slower by its collective times alone, must stand "  \
    "4 standard errors out: a shared host's scheduler slows one process for many iterations in a " \
    "row, so the noise is underestimated (measured: clean 4-rank jobs on 2 busy cores reached "    \
    "3.1-3.2 at 6-7% of an iteration, a clean Trainer job's all-reduce 3.7; injected stragglers "  \
    "8.5-14)")                                                                                     \
  X(kGroupSimilarity, 0.85, "share of functions",                                                  \
    "ranks sharing 85% of their significant functions are peers (the same role)")                  \
  X(kMergeSimilarity, 0.75, "share of functions",                                                  \
    "a rank left alone joins the group it resembles most if it shares 75% of its functions")       \
  X(kLateWaitShareOfCollective, 0.5, "share of the collective time",                               \
    "a late arrival without a slower function makes its peers wait half their collective time "    \
    "more: collective time is mostly waiting and carries every peer's noise")                      \
  X(kLateWaitShareOfIteration, 0.10, "share of the iteration",                                     \
    "a late arrival without a slower function costs 10% of the iteration at least")                \
  X(kSignificantShare, 0.01, "share of the iteration",                                             \
    "a function of 1% of an iteration or more takes part in comparisons: it decides which "        \
    "functions make two ranks' signatures alike and which count toward a rank's general "          \
    "slowness; cheaper ones are what any rank does now and then")                                  \
  X(kReferenceMinRelativeScale, 0.02, "of the peers' median",                                      \
    "the spread an outlier is measured against is at least 2% of the peers' median: identical "    \
    "peers (a MAD of 0) would make any difference infinitely significant")                         \
  X(kReferenceMinScaleUs, 20.0, "us",                                                              \
    "and at least 20 us: below it a profiler's own timestamps and a function's entry jitter")      \
  X(kGenerallySlowerRatio, 1.1, "x the peers' self time",                                          \
    "a function counts as slower on the rank when it takes 10% more than its peers' reference "    \
    "(kMinRelative's threshold): enough of them, alike, make the rank slower at everything")       \
  /* Expected-pattern rules (problems on every rank). */                                           \
  X(kLoaderShare, 0.10, "share of the step",                                                       \
    "a data loader above 10% of the step is too slow: a healthy one prefetches behind compute")    \
  X(kLoaderAllowance, 0.01, "share of the step", "what a healthy data loader may cost")            \
  X(kSyncShare, 0.02, "share of the step",                                                         \
    "synchronizing calls (.item(), cuda synchronize) above 2% of the step are needless waits")     \
  X(kGpuIdleShare, 0.15, "share of the step",                                                      \
    "a GPU idle over 15% of the step behind CPU work is CPU-bound")                                \
  X(kTinyKernelUs, 10.0, "us", "kernels under 10 us are dominated by their launch cost")           \
  X(kTinyKernelCalls, 100.0, "calls per iteration",                                                \
    "over 100 tiny kernels per iteration make a launch-bound phase")                               \
  X(kLaunchOverheadUs, 5.0, "us", "CPU cost of one kernel launch, when the trace does not say")    \
  X(kDispatchUs, 5.0, "us",                                                                        \
    "CPU cost of dispatching one eager op around its launch (parsing, dispatcher, allocator): "    \
    "5-20 us published; the low end keeps the estimate a floor")                                   \
  X(kLargeMessageBytes, 1048576, "bytes",                                                          \
    "collectives of 1 MiB and more reach their link's bandwidth (smaller ones are latency-bound)") \
  X(kFarBelow, 0.25, "ratio", "bus bandwidth under 25% of the expected is far below it")           \
  X(kFlatCv, 0.5, "coefficient of variation",                                                      \
    "collective durations varying less than 50% are a capped link, not waiting")                   \
  X(kExpectedBusbwGbps, 50.0, "GB/s",                                                              \
    "bus bandwidth a large collective should reach (NVLink-scale, one node); PCIe-only and "       \
    "cross-node jobs lower it with --expected-busbw")                                              \
  /* Link localization. */                                                                         \
  X(kNicShare, 0.8, "share of groups",                                                             \
    "a node's NIC is slow when 80% of its cross-node groups are slow")                             \
  X(kNvlinkShare, 0.5, "share of groups",                                                          \
    "a node's NVLink is slow when half of its intra-node groups are slow")                         \
  X(kMinPeerInstances, 3, "group instances",                                                       \
    "a collective is compared across instances of its kind only with 3 or more: with two, "        \
    "neither can be voted the odd one")                                                            \
  X(kMinInstanceScaleUs, 20, "us",                                                                 \
    "the spread of instance values is at least 20 us: identical instances must not turn "          \
    "microsecond noise into a slow link")                                                          \
  X(kInstanceShareOfReference, 0.02, "share of the collective",                                    \
    "a slow instance exceeds 2% of what the collective takes on healthy ranks (the group's "       \
    "median member damps single-rank noise, so less than one function's threshold)...")            \
  X(kInstanceShareOfIteration, 0.01, "share of the iteration",                                     \
    "...and 1% of the iteration; the node's finding adds its instances up")                        \
  X(kMaxLinkFunctions, 3, "functions", "a link finding names at most 3 of the slowed collectives") \
  X(kBackedUpBytes, 16384, "bytes", "a TCP connection holding 16 KiB unacknowledged is backed up") \
  X(kLeanBytes, 4096, "bytes",                                                                     \
    "with one backed-up pair, connections holding 4 KiB say which of its two ranks is slow")       \
  X(kLeanMargin, 1.25, "ratio",                                                                    \
    "...when the queues touching one of them are 1.25x those touching the other")                  \
  X(kBackedUpRankBytes, 65536, "bytes",                                                            \
    "a slow link holds 64 KiB on the connections touching its rank: on loopback a peer "           \
    "descheduled for a moment leaves ~40 KiB, a link capped at 100 Mbit/s 130 KiB (measured)")     \
  X(kBackedUpShare, 0.65, "share of the backed-up bytes",                                          \
    "a rank's link is slow when 65% of the job's backed-up bytes touch it: every link of a ring "  \
    "backed up alike gives each rank 50%; a 100 Mbit/s cap on one rank of 4 gave it 71-100% "      \
    "(backpressure spreads around the ring, more on some runs than others)")                       \
  X(kOversubscribed, 1.0, "runnable threads per core",                                             \
    "a host with more runnable threads than cores (mean over the window) is oversubscribed: "      \
    "its ranks take turns on the CPUs, which alone blames none of them")                           \
  /* Causes from the OS's evidence (diagnose/causes.h). */                                         \
  X(kMinQuotaPeriods, 10, "scheduling periods",                                                    \
    "a cgroup's throttled share needs 10 periods (1 s at the default 100 ms) to mean anything")    \
  X(kThrottledShare, 0.2, "share of periods",                                                      \
    "a quota that throttles a rank in a fifth of its periods slows it measurably; a quota met "    \
    "now and then at a burst does not")                                                            \
  X(kThrottledPeersAtMost, 0.5, "of the rank's share",                                             \
    "peers throttled half as often or more share the limit: it is not this rank's cause")          \
  X(kQuotaTighter, 0.5, "of the peers' median quota",                                              \
    "a rank whose own quota is half its peers' or less is held by its own limit even where the "   \
    "peers are throttled too (measured: a 4-rank job in a 0.7-CPU cgroup, as in a container "      \
    "with a CPU limit, throttled in 64% of its periods; one rank moved to 0.05 CPUs, 100%)")       \
  X(kRunQueueWaitRatio, 1.5, "x the peers' wait per CPU second",                                   \
    "on a shared host every rank waits for a CPU; one denied it waits half as long again per "     \
    "second of its own CPU as its peers' median (measured: healthy ranks of a 4-rank job on 2 "    \
    "cores wait 1.65-2.03 s per CPU second, a rank held to 0.1 CPUs 6.3)")                         \
  X(kRunQueueWaitAtLeast, 0.05, "s per CPU second",                                                \
    "a wait for a CPU that rose but stays under 5% of the ranks' own CPU time is no contention: "  \
    "it cannot explain a slowdown (measured on an H200 host with 16 idle cores: 3.9e-5 -> 8.1e-5 " \
    "s per CPU second, 2.1x, while a needless sync slowed the step; named cpu_contention)")        \
  X(kRunQueueAloneRatio, 2.0, "x the peers' wait per CPU second",                                  \
    "a rank that no slower function names is denied the CPU only when it waits twice its peers' "  \
    "median per second of CPU (measured: a rank sharing its core with a busy process 2.7-2.9x; "   \
    "healthy ranks of a 4-rank job on 2 cores within 1.25x of each other)")                        \
  X(kRunQueueExplainsShare, 0.3, "of the finding's impact",                                        \
    "the extra run-queue wait must be at least 30% of what the rank loses per iteration to be "    \
    "its cause")                                                                                   \
  X(kGpuClockPeersShare, 0.85, "of the peers' median SM clock",                                    \
    "a GPU at 85% of its peers' SM clock or less, with a reason NVML says slows it, is "           \
    "throttled; "                                                                                  \
    "boost clocks of healthy GPUs of one model differ by a few percent")                           \
  X(kIoMinBytesPerIteration, 1048576, "bytes per iteration",                                       \
    "a MiB per iteration to or from storage is a checkpoint or a flushed log on the training "     \
    "thread; a few KiB of logging is no stall")                                                    \
  X(kIoPeersRatio, 4, "x the peers' median",                                                       \
    "a rank that moves four times its peers' storage bytes does I/O they do not; ranks that all "  \
    "write alike are no cause of one rank's slowness")                                             \
  X(kLoaderWorkersRatio, 4, "x the peers' median time per batch",                                  \
    "DataLoader worker processes that take four times their peers' time per batch (in the "        \
    "dataset or the collate function) make a different loader: a slow decode, a slow disk, a "     \
    "sleeping transform; batch-to-batch jitter stays within 2x")                                   \
  X(kLoaderMinBatches, 3, "batches",                                                               \
    "a rank's workers must make three batches in the window for a time per batch to mean "         \
    "anything (a window profiles ten iterations)")                                                 \
  X(kLoaderWaitExplainsShare, 0.3, "of the finding's impact",                                      \
    "the training thread's extra wait for data must be at least 30% of what the rank loses per "   \
    "iteration for its loader workers to be the cause")                                            \
  X(kLoaderHandOffShare, 0.5, "of the training thread's wait per iteration",                       \
    "DataLoader worker processes whose own work per batch is under half the training thread's "    \
    "wait are not slow at it: the batch waits for their CPU time or in the hand-off between "      \
    "processes (measured: 0.7 ms of work, 7.5 ms of wait, 4 ranks x 2 workers on 2 cores)")        \
  X(kMoreWorkRatio, 1.25, "x the peers' data input of the same call",                              \
    "the same call with one input (its data) a quarter larger than on the peers, the others "      \
    "alike, is more work (data skew, padding, uneven shards): beyond a length's jitter between "   \
    "batches")                                                                                     \
  X(kMoreWorkSameCalls, 1.25,                                                                      \
    "x, either way, between the rank's and its peers' calls per "                                  \
    "iteration",                                                                                   \
    "larger inputs are the same work on more data only where the rank and its peers make the "     \
    "same calls: an op called over 1.25x as often on one side serves other call sites there (a "   \
    "straggler's extra aten::mm beside the model's backward ones; aten::fill_ of a leak's buffer " \
    "against the peers' small fills)")                                                             \
  X(kMoreWorkExplainsShare, 0.3, "of the finding's impact",                                        \
    "the larger inputs' extra time must be at least 30% of what the rank loses per iteration to "  \
    "be its cause")                                                                                \
  X(kMoreWorkElementsAtLeast, 1.05, "x the peers' mean input elements per call",                   \
    "more data per call shows in the mean over all calls too, whichever shape took the most "      \
    "time: a throttled rank's costliest shape can differ from its peers' with the same calls "     \
    "on the same inputs")                                                                          \
  /* Memory growth: a rank's RSS over the run (diagnose/memory_growth.h) */                        \
  X(kMemoryWarmupIterations, 20, "iterations",                                                     \
    "allocators, caches and the first batches grow a process's memory at the start; the growth "   \
    "after them is the job's")                                                                     \
  X(kMemoryMinIterations, 50, "iterations",                                                        \
    "a leak is growth sustained over 50 iterations after the warm-up, not one allocation")         \
  X(kMemoryMinGrowthBytes, 33554432, "bytes",                                                      \
    "below 32 MiB over that span a process's memory moves by itself (allocator arenas, a "         \
    "DataLoader's prefetched batches)")                                                            \
  X(kMemoryRisingShare, 0.7, "of the intervals between samples",                                   \
    "a leak grows between most samples; an allocator that settles after a large step is flat or "  \
    "falls between them")                                                                          \
  X(kMemoryHalvesShare, 0.5, "of the overall growth rate",                                         \
    "a leak grows alike throughout the span, so each half grows at half the overall rate at "      \
    "least; a warm-up ramp or a profiling window's buffers grow in one part (measured: a healthy " \
    "rank steps up 27 MiB in its baseline window, then creeps by a MiB)")                          \
  X(kMemoryProfileSettleIterations, 20, "iterations after a profiling window",                     \
    "a window's trace is exported and summarized after its last iteration (measured: 1-3 s, up "   \
    "to 60 iterations of 45 ms on 2 shared cores; the export's memory is its biggest part): "      \
    "samples until 20 iterations after it are perftracker's memory, not the job's; a later one "   \
    "still inside the export only lowers the level after it")                                      \
  X(kMemoryAboveRangeShare, 0.5, "of the range the rank's memory moved in before",                 \
    "samples come by time, not by step: a sawtooth (a cache filled and emptied) aliases into "     \
    "slow ramps whose highs creep up on its true peak (measured: +0.6 MiB an iteration named on "  \
    "a 320 MiB sawtooth sampled every ~30 iterations); a leak leaves the range it moved in behind" \
    ", a creeping high stays within half of it")                                                   \
  X(kMemoryOutgrowSwing, 1.0, "of the most the rank's memory moved between two reports",           \
    "a leak grows past the range the job's memory moves in by itself: a cache filled and emptied " \
    "faster than the reports come, whose allocator keeps ever more of what it frees for seconds "  \
    "(measured: glibc, a 300 MiB sawtooth of 0.5 s, RSS highs rising 110-130 MiB over 70-220 "     \
    "iterations, in 3 of 12 runs named a leak); a leak's own move between two reports is what "    \
    "it grew in one interval, and a tail of three samples or more outgrows it")                    \
  X(kMemoryRiseOfExpected, 0.25, "of the growth the rate gives an interval",                       \
    "a rise between two samples counts when it is a quarter of what the rate gives their "         \
    "interval: a page more is no rise")                                                            \
  /* Memory in a trace's own records (profile_memory; diagnose/trace_memory.h) */                  \
  X(kTraceMemoryMinIterations, 4, "steady iterations",                                             \
    "a level that rises over three intervals in a row or more is growth; fewer iterations show "   \
    "one allocation, not a rate")                                                                  \
  X(kKeptMemoryShare, 0.5, "of the profiled iterations",                                           \
    "a place that kept memory in half of the profiled iterations or more is where memory grows; "  \
    "a healthy job keeps memory once (optimizer state made on its first step) or in the last "     \
    "iteration only (gradients the next step frees), which is not counted")                        \
  X(kMemoryPeakRise, 0.1, "of the reference's peak",                                               \
    "a peak within 10% of the reference's is the same batch, model and allocator moving by "       \
    "themselves (fragmentation, a different order of frees); more is a change worth naming")       \
  X(kMemoryPeakMinBytes, 67108864, "bytes",                                                        \
    "below 64 MiB a peak's rise is a buffer or two, not what brings a rank to its limit")          \
  /* The temporal differential: a window against the job's baseline (diagnose/since_baseline.h) */ \
  X(kBaselineSlowdown, 0.05, "of the baseline's iteration",                                        \
    "a window within 5% of the baseline's iteration has nothing to explain; the slowdown "         \
    "trigger fires at 5%, and its window must say what changed (measured: every rank held to a "   \
    "shared half CPU ran 16% slower unprofiled, 5.5% slower in the profiled windows)")             \
  X(kBaselineSampleRanks, 64, "ranks",                                                             \
    "the baseline's patterns are kept for 64 ranks spread over the job: a change on every rank "   \
    "shows on any of them, and a 100,000-rank job keeps no more than that")                        \
  X(kBaselineOsRanksShare, 0.75, "of the ranks",                                                   \
    "the run queue says something else runs on every rank's host only when three in four ranks "   \
    "wait markedly longer than in the baseline (measured: of two ranks, the one sharing its core " \
    "with a busy process went 0.71 -> 1.66 s per CPU second, its peer 0.60 -> 0.63; their median " \
    "rose 1.7x)")                                                                                  \
  X(kEchoSlack, 1.25, "x the rise that a slow rank explains",                                      \
    "a rise on every rank in the frames that enclose the waits is a named slow rank's echo up to " \
    "a quarter more than the iteration's rise or the rank's cost: a function's mean and the "      \
    "iterations' median are other samples of the same window (measured: run_backward +93.9 "       \
    "ms/iter on every rank beside a throttled rank costing 90.4)")                                 \
  /* The healthy rate: each rank's unprofiled iterations (diagnose/healthy_rate.h) */              \
  X(kHealthyWarmupIterations, 10, "iterations",                                                    \
    "an attempt's first 10 iterations (first batches, caches, lazy initialisation, compilation) "  \
    "say nothing of its healthy rate")                                                             \
  X(kHealthyAfterWindow, 5, "iterations",                                                          \
    "the iterations right after a profiling window wait for its stop and export (on torch 2.13 "   \
    "two steps at 3x the median, measured): they are the window's cost, not the job's rate")       \
  X(kHealthyMinPoints, 10, "points",                                                               \
    "a rate needs 10 unprofiled points (iterations, or bucket means in a long run) at least")      \
  X(kHealthyMinSeconds, 2.0, "seconds",                                                            \
    "a faster level the job held for less than 2 s right after its warm-up is its start, not its " \
    "healthy rate: the host is still settling (the other ranks' and the collector's start, page "  \
    "cache, CPU frequency; measured: a clean 4-rank job on 2 shared cores ran 12.0 ms an "         \
    "iteration for its first 0.5 s after warm-up, then 15.1 ms to its end, and was named 1.25x "   \
    "slower than healthy); a fault there is present from the start, the peers' to name")           \
  X(kLatestSteps, 10, "iterations",                                                                \
    "the job's level right before a window is the median of its last 10 unprofiled iterations: "   \
    "a triggered window follows 15 slow ones at least (the detector's 20-iteration median above "  \
    "its level 5 in a row), and a median of 10 ignores a GC pause or a checkpoint")                \
  X(kChangeMinSegment, 5, "points",                                                                \
    "a level the job changed to lasts 5 points at least: fewer is a hiccup (a checkpoint, a "      \
    "collection), not a new rate")                                                                 \
  X(kChangeNoiseZ, 4.0, "standard errors",                                                         \
    "a change of level stands 4 standard errors (of the two levels' medians, from the points' "    \
    "spread) out of the noise: a shared host drifts, and the search tries every split")            \
  X(kStraddleRanksShare, 0.5, "of the ranks",                                                      \
    "a baseline window straddles a change when half its ranks' profiled iterations step up "       \
    "within it: a change on every rank slows every rank of a synchronous job, and profiled "       \
    "iterations are too noisy to ask all of them")                                                 \
  X(kHealthyRiseAtLeast, 0.10, "of the healthy rate",                                              \
    "a slowdown from the healthy rate that no profiled function or OS figure names is a finding, " \
    "and opens a window of the server's own, from 10%: timing alone on a shared host drifts by "   \
    "5% (kBaselineSlowdown)")                                                                      \
  X(kAllThrottledShare, 0.5, "share of periods",                                                   \
    "a quota that throttles a rank in most of its scheduling periods holds it back every step: a " \
    "healthy job meets its quota now and then at a burst, not in most periods")                    \
  X(kAllIoStallShare, 0.10, "of the window",                                                       \
    "every rank moving megabytes to storage while the host's tasks waited for storage a tenth of " \
    "the window (PSI 'some') stalls on it: a healthy step waits for no disk, and logs or small "   \
    "files stall the host well under 1%")                                                          \
  X(kAllOsRanksShare, 0.75, "of the ranks",                                                        \
    "an all-rank cause from the OS alone holds on three in four ranks (one rank's is the peer "    \
    "comparison's)")                                                                               \
  X(kCostSlack, 1.25, "x the loss it is bounded by",                                               \
    "a finding may claim a quarter more than the iteration's rise or the rank's own excess: the "  \
    "figures are other samples of the same window (kEchoSlack's measurement)")                     \
  X(kHostDriftSlack, 1.25, "x the CPU calls' drift",                                               \
    "a builtin C call slower by up to a quarter more than the host's CPU calls are (per call) is " \
    "the same drift: its own time is C work, timed with the Python tracer's overhead around it")   \
  X(kArrivalNoiseSigmas, 3, "robust standard deviations",                                          \
    "a rank whose collective wait is within 3 robust standard deviations of its group's median "   \
    "arrives with the group in the what-if replay: beyond it, one rank in a thousand of a "        \
    "noise-only group (a normal's 3-sigma tail)")                                                  \
  X(kWhatIfOverclaim, 1.5, "x the replay's saving",                                                \
    "a rule's figure over 1.5 times what the replay says fixing it gives is shown as such: the "   \
    "two measure the same window, and within half again they are the same loss seen twice")        \
  X(kBaselineMaxFindings, 3, "findings",                                                           \
    "at most the 3 largest changes since the baseline are listed: the rest are their echoes")      \
  /* Confidence of findings (0-1, in perftracker.diagnosis/1). */                                  \
  X(kConfidenceExtraCalls, 0.9, "confidence",                                                      \
    "more calls than the peers: a difference in the program, not in timing")                       \
  X(kConfidenceRule, 0.8, "confidence", "an expected-pattern rule measured on every rank")         \
  X(kConfidenceOsEvidence, 0.85, "confidence",                                                     \
    "the kernel's own accounting (a throttled quota, run-queue wait) names the cause")             \
  X(kConfidenceTimingOnly, 0.6, "confidence",                                                      \
    "equal calls, longer time, beyond the noise: slower device, host or input")                    \
  X(kConfidenceLateArrival, 0.4, "confidence",                                                     \
    "peers wait for the rank but no profiled function says why (unknown cause)")                   \
  X(kConfident, 0.5, "confidence",                                                                 \
    "findings at or above this are confident and always listed before the others")                 \
  /* Run diff. */                                                                                  \
  X(kNewFunctionFloorUs, 10.0, "us per iteration",                                                 \
    "a function new in TEST below 10 us per iteration is not worth listing")                       \
  X(kMaxNewOrGone, 20, "functions", "at most 20 new or gone functions are listed one by one")      \
  X(kDiffNoiseZ, 3.0, "standard errors",                                                           \
    "a function's change between runs must stand out of both runs' own iteration-to-iteration "    \
    "variation")                                                                                   \
  X(kDiffMinRelative, 0.05, "of the function's time",                                              \
    "a change of under 5% of a function's own time is not worth reading")                          \
  X(kDiffMinUs, 100.0, "us per iteration",                                                         \
    "nor one of under 0.1 ms per iteration, however steady the runs")                              \
  X(kDiffCallRatio, 2.0, "x",                                                                      \
    "a call count that doubles or halves is a change of the program, reported whatever its time "  \
    "between two runs; since the baseline window (the same program) it must cost "                 \
    "kNewFunctionShare")                                                                           \
  X(kDiffMinCallDelta, 1.0, "calls per iteration",                                                 \
    "and it must change by at least one call per iteration")                                       \
  X(kDiffOwnShare, 0.5, "of the change",                                                           \
    "a straggler's own wait grew under half as much as its peers' (they wait for it, not it "      \
    "for them)")                                                                                   \
  X(kDiffEchoShare, 0.25, "of the extra compute",                                                  \
    "peers that wait longer by a quarter of a rank's extra compute (beyond their own rise) wait "  \
    "for it (DDP overlaps "                                                                        \
    "part of the wait with their own backward: 38-57% measured on 4 gloo ranks)")                  \
  X(kNewFunctionShare, 0.001, "share of the iteration",                                            \
    "a function new in TEST or gone from it is listed from a thousandth of the iteration (or "     \
    "kNewFunctionFloorUs): a change of the program is worth naming even when small")               \
  X(kDiffRankShare, 0.5, "of the change's threshold",                                              \
    "a rank took part in a change when its own change goes the same way by half the threshold "    \
    "the whole change had to pass")                                                                \
  X(kDiffCallsChanged, 0.1, "of the base's calls per iteration",                                   \
    "a call count that moved by a tenth (of at least one call) is called out in the change's "     \
    "text: fewer is a window edge")                                                                \
  X(kSpreadExplainedShare, 0.5, "of the iteration's change",                                       \
    "an iteration slower by more than the named functions explain, by half, is a slowdown "        \
    "spread thinly over many functions and gets a finding of its own")

#define PT_POLICY_CONSTANT(name, value, unit, reason) inline constexpr double name = value;
PT_DIAGNOSIS_POLICY(PT_POLICY_CONSTANT)
#undef PT_POLICY_CONSTANT

struct Entry {
  const char* name;  // "kMinRelative"
  double value;
  const char* unit;
  const char* reason;
};

#define PT_POLICY_ENTRY(name, value, unit, reason) {#name, value, unit, reason},
inline constexpr Entry kTable[] = {PT_DIAGNOSIS_POLICY(PT_POLICY_ENTRY)};
#undef PT_POLICY_ENTRY
inline constexpr size_t kTableSize = sizeof(kTable) / sizeof(kTable[0]);

}  // namespace perftracker::diagnose::policy

#endif  // PERFTRACKER_DIAGNOSE_POLICY_H_
