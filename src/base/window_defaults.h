// What a profiling window is when nobody says otherwise, the most one may be, how far ahead of
// its trigger it starts, how long a slowdown must last to ask for one (the worker's trigger) and
// when a silence is a hang that opens one: named once here for the server's
// scheduler, the launcher's and server's flags, the agent's commands to workers and (mirrored in
// python/perftracker/config.py, checked by tests/test_protocol.py) the Python collector.
#ifndef PERFTRACKER_BASE_WINDOW_DEFAULTS_H_
#define PERFTRACKER_BASE_WINDOW_DEFAULTS_H_

namespace perftracker::window_defaults {

// Iterations a window profiles: enough for a median that one odd iteration does not move
// (a data-loader stall every few steps still shows), few enough that the profiler's overhead
// touches a fraction of a percent of a long run.
inline constexpr int kIterations = 10;

// Of a window's iterations, torch.profiler records only the first this many (the Python tracer
// records them all; a memory window's profiler records all of its own: it places allocations).
// torch.profiler is nearly all of a window's cost on torch 2.x, and its stop and trace save
// hold the GIL for work that grows with the events recorded (measured on torch 2.13, a 4-rank
// Hugging Face Trainer job of 50 ms steps on 2 cores: with torch.profiler off the window cost
// nothing beyond the noise; over 10 iterations its stop took 95-166 ms a rank and its save 59-93,
// over 3 iterations 24-33 and 17-21). Four keep a mean of three besides the profiler's own first
// iteration and a noise figure for the torch figures (collective waits, CPU ops, kernels); the
// ten iterations' times and Python functions stay the tracer's.
inline constexpr int kTorchProfilerIterations = 4;

// A window's profiling time limit: ten iterations of a slow job (2 s each) fit; a window on a
// job that slowed to a crawl or hung ends anyway, with the iterations it got.
inline constexpr double kMaxSeconds = 20;

// The most a profile command may ask of a worker (issue 26: a worker used to take any number, so
// whoever could send one could keep a rank traced for good). The agent clamps its commands to
// these and the worker refuses a command beyond them. A hundred times the default iterations is
// still a sample of a long run and bounds the tracer's per-iteration cells; ten minutes covers
// a thousand iterations of 0.6 s.
inline constexpr int kMostIterations = 1000;
inline constexpr double kMostSeconds = 600;

// A window opens at least this long after the trigger that asked for it: the command must reach
// every rank of the job, through its agent, before they all reach the window's first iteration.
inline constexpr double kLeadSeconds = 2.0;

// A slowdown fires only once it lasted this long (and the trigger's `sustain` iterations): one
// shorter is over before the window it would open begins (kLeadSeconds), so the window profiles
// a healthy job, says "no findings", and its cooldown then hides a real fault for a minute. A VM
// shifts by 4-6% for about a second at a time by itself (measured: a quiet 2-rank job of 53 ms
// steps, iteration times in two modes, 52 and 56 ms; its 20-iteration median above the trigger's
// +3% for 8-18 iterations in a row, three times in 17 s, where the 5-iteration sustain fired on
// them; seen as the first trigger of the clean runs of test_worker_detector and test_online_run).
inline constexpr double kSlowdownSustainSeconds = kLeadSeconds;

// A hang: a rank with no iteration boundary for kHangFactor times its mean iteration, and for
// at least kHangMinSeconds. The factor alone called every 50 ms hiccup of a 10 ms GPU step a hang
// (an H200 job: 44 hang triggers in 50 s, each a stacks collection on every rank); a Python GC
// pause, an epoch's new DataLoader iterator or a throttled period is well under the floor, and a
// rank that stays silent past it is still named seconds into a real hang (a collective waits
// minutes before NCCL's watchdog ends it).
inline constexpr double kHangFactor = 5.0;
inline constexpr double kHangMinSeconds = 2.0;

}  // namespace perftracker::window_defaults

#endif  // PERFTRACKER_BASE_WINDOW_DEFAULTS_H_
