"""The in-worker collector's numbers and environment variables, named once.

The window defaults mirror src/base/window_defaults.h (tests/test_protocol.py checks that they
are equal): a `profile` command without `iters` or `max_s` gets the same window the agent, the
server and the launcher would ask for. Everything else here is a bound of the collector's own
(src/worker/protocol.md describes what the agent may rely on).
"""

# ---- profiling windows (src/base/window_defaults.h) ----

# window_defaults::kIterations: iterations a window profiles.
WINDOW_ITERATIONS = 10
# window_defaults::kMaxSeconds: a window's profiling time limit.
WINDOW_MAX_S = 20.0
# window_defaults::kMostIterations, kMostSeconds: a profile command asking for more is refused.
WINDOW_MOST_ITERATIONS = 1000
WINDOW_MOST_S = 600.0
# A profile command's memory_ranks longer than this is refused as malformed (the server lists the
# ranks whose memory grows: a handful).
WINDOW_MOST_MEMORY_RANKS = 100000
# Where a window's trace goes when a command given without an agent (tests) names neither a
# path nor a directory. Over a socket the trace goes only inside the agent's trace folder: the
# folder the link next to its socket (agent socket + TRACE_DIR_LINK_SUFFIX) names, made by the
# agent in its private socket folder (src/agent/socket_sink.h).
DEFAULT_TRACE_DIR = "/tmp"
TRACE_DIR_LINK_SUFFIX = ".traces"
# A profile command that arrives before torch.distributed is initialized waits this long for
# the rank (the file is named after it), then names the file after the pid.
RANK_WAIT_S = 30
# Windows whose python_trace message is still due; older ones are forgotten.
WINDOWS_DUE = 16
# How long the exit hook waits for a window's files (the Python tracer's, torch.profiler's
# export) still being written: a window that ends with the job is still delivered.
EXIT_WAIT_S = 10.0
# The exit hook's poll while torch.profiler exports are still running.
EXIT_POLL_S = 0.05
# While the export thread writes the torch trace in Python (window.write_legacy_trace, about
# 1 us per event where torch has no Kineto), the training thread waits for the GIL up to one
# switch interval (5 ms by default) each time it wants it back; a shorter interval bounds those
# waits. (torch's C++ writer holds the GIL throughout: no interval helps there.)
EXPORT_SWITCH_INTERVAL_S = 0.0005
# A window's collection never holds the detector longer than this (seconds from its end until
# the agent says it uploaded the summary).
HOLD_MAX_S = 120.0
# Tensors a memory window follows at once where torch records no allocations itself
# (kept_tensors.py): the heap sampler's own table holds 64 Ki blocks (worker/heap_sampler.h
# kMaxLive), and a leak shows in a few per iteration.
MAX_FOLLOWED_TENSORS = 65536
# Error text carried in a torch_trace message is cut to this many characters.
MAX_ERROR_CHARS = 500

# ---- the agent client ----

# The daemon thread ships messages and reads commands this often.
CLIENT_PERIOD_S = 0.5
# While the agent is absent, a connection is tried at most this often.
RECONNECT_S = 2.0
# Bytes waiting for the socket (and bytes of unread commands); beyond that, messages are dropped.
MAX_OUT = 1 << 20
# Bytes read from the socket at a time.
RECV_CHUNK = 65536
# Messages other threads queued (send()) between two ticks; beyond that they are dropped.
MAX_EXTRA_MESSAGES = 1000

# ---- hang stacks ----

# Threads in one stacks reply (the training thread first).
MAX_STACK_THREADS = 64
# Frames per thread: a deeper stack keeps its innermost ones, where the thread waits.
MAX_STACK_FRAMES = 100

# ---- the ring of collectives ----

# Point-to-point calls in flight while a group's numbering is learned (collectives.GroupNumbers):
# beyond that, calls whose return was never seen (they raised) are forgotten, and a later one
# teaches it.
MAX_P2P_PENDING = 64

# ---- environment ----

ENV_CONFIG = {  # environment variable -> _worker.install key
    "PERFTRACKER_LEARN_REPEATS": "learn_repeats",
    "PERFTRACKER_WINDOW": "window",
    "PERFTRACKER_SLOWDOWN_RATIO": "slowdown_ratio",
    "PERFTRACKER_WARMUP_ITERATIONS": "warmup_iterations",
    "PERFTRACKER_REFERENCE_ITERATIONS": "reference_iterations",
    "PERFTRACKER_HANG_FACTOR": "hang_factor",
    "PERFTRACKER_HANG_MIN_SECONDS": "hang_min_s",
    "PERFTRACKER_RELEARN_AFTER": "relearn_after",
    "PERFTRACKER_TRACER_MAX_NODES": "tracer_max_nodes",
}
# Kineto's own log level, read by libkineto as torch loads: below it, its "USDT: ...
# profiler_start" and "profiler_stop" lines (each window's start and stop, on every rank) reach
# the job's terminal and a crashed rank's last error lines. Set before torch loads, where the
# user has not set it; KINETO_QUIET_LEVEL is above every level it logs at.
KINETO_LOG_LEVEL_ENV = "KINETO_LOG_LEVEL"
KINETO_QUIET_LEVEL = "6"
# torch.profiler's own warnings a window's profiler gives (torch 2.11: twice a window), kept off
# the job's terminal: they are about the collector's use of the profiler, not the job.
PROFILER_WARNINGS = (r".*Profiler clears events at the end of each cycle",)
# The node agent's socket ({node}: this node's name, identity.agent_socket).
AGENT_SOCKET_ENV = "PERFTRACKER_AGENT_SOCKET"
# Every message is also appended here ({pid}: the process id): tests, or running without an agent.
WORKER_LOG_ENV = "PERFTRACKER_WORKER_LOG"
# "PID:RANK" of the process that runs the collector, inherited by the processes it starts.
OWNER_ENV = "PERFTRACKER_RANK_OWNER"
# Where each rank's ring of collectives and torch's Flight Recorder dump go (set by `perftracker
# run`: REPORT_DIR/collectives): rank_R.ring.json at a fatal signal, at exit and on a hang;
# rank_R.fr.pkl (torch's own dump, where its Flight Recorder records) at exit and on a hang.
COLLECTIVES_DIR_ENV = "PERFTRACKER_COLLECTIVES_DIR"
# Where a rank's CUDA allocator snapshot goes when it runs out of GPU memory (set by `perftracker
# run`: REPORT_DIR/memory): rank_R.cuda_oom.pickle (oom.py).
MEMORY_DIR_ENV = "PERFTRACKER_MEMORY_DIR"
