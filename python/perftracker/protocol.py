"""The worker <-> node agent messages (src/worker/protocol.md), defined once.

Each message type is its "type" name and the fields it may carry. The worker builds every
message it sends with make(), which refuses a field its type does not declare, and dispatches
the agent's commands by these names (client.py). tests/test_protocol.py holds the C++ side to
the same list both ways: the types and fields src/agent/worker_message.cc parses, and the
commands src/agent/socket_sink.cc sends.

A type may carry fields the C++ agent does not use (it does not read them, or never sends
them): `agent_skips` names them, so that the check stays exact. A type the agent neither parses
nor sends says `agent_uses=False`.
"""
from typing import Any, Dict, NamedTuple, Tuple


class MessageType(NamedTuple):
    name: str                      # the "type" field
    fields: Tuple[str, ...] = ()   # every other field it may carry (identity aside)
    agent_skips: Tuple[str, ...] = ()  # fields the C++ agent does not read / never sends
    agent_uses: bool = True        # False: the C++ agent neither parses nor sends this type
    open: bool = False             # may carry more fields than `fields` (stats)


# hello's "v".
VERSION = 1

# The worker's identity, on every worker -> agent message. attempt: torchrun's restart count
# (identity.attempt).
IDENTITY = ("pid", "rank", "local_rank", "world_size", "host", "attempt")

# ---- worker -> agent ----

HELLO = MessageType("hello", ("v", "clock_offset_ns"))
# items: [[index, start_ns, end_ns, clean], ...]; cuda (once the job initialized CUDA):
# [allocated, reserved, peak allocated] bytes of its caching allocator (cuda_memory.py).
ITERATIONS = MessageType("iterations", ("items", "cuda"))
LEARNED = MessageType("learned", ("pattern",))
RELEARN = MessageType("relearn")
# slowdown: iteration, mean_ns, best_ns; hang: iteration, now_ns, mean_ns.
TRIGGER = MessageType("trigger", ("kind", "iteration", "mean_ns", "best_ns", "now_ns"),
                      agent_skips=("now_ns",))
TRIGGER_KINDS = ("slowdown", "hang")
PROFILE_ACK = MessageType("profile_ack", ("accepted", "path", "window"))
PYTHON_TRACE = MessageType("python_trace", ("path", "window", "torch", "error"))
TORCH_TRACE = MessageType("torch_trace", ("path", "window", "error"))
STACKS_REPLY = MessageType("stacks", ("request_id", "iteration", "threads", "last_collective"))
# The detector's state at exit: every key of perftracker._worker.stats(); these the agent logs.
STATS = MessageType("stats", ("reference_ns", "threshold_ns", "recent_ns", "iterations",
                              "slowdowns", "hangs"), open=True)

# The objects inside a stacks reply.
STACK_THREAD_FIELDS = ("tid", "name", "main", "frames", "frames_dropped")
STACK_THREAD_AGENT_SKIPS = ("frames_dropped",)
STACK_FRAME_FIELDS = ("file", "line", "function")
LAST_COLLECTIVE_FIELDS = ("op", "count", "file", "line", "in_progress", "seconds")

WORKER_TO_AGENT = (HELLO, ITERATIONS, LEARNED, RELEARN, TRIGGER, PROFILE_ACK, PYTHON_TRACE,
                   TORCH_TRACE, STACKS_REPLY, STATS)

# ---- agent -> worker ----

# iters and max_s default to config.WINDOW_ITERATIONS / WINDOW_MAX_S; start_iter -1 is "next";
# the file is `path`, or `dir`/rank-R.python.json (this agent always sends dir); memory_ranks
# (only when some rank records its allocations) lists the ranks that do.
PROFILE = MessageType("profile", ("iters", "max_s", "start_iter", "shapes", "memory_ranks", "dir",
                                  "path", "window"),
                      agent_skips=("path",))
# Ends the current window now (or cancels a pending one); for tools that talk to the socket:
# the agent lets a window run its course.
STOP = MessageType("stop", agent_uses=False)
STACKS_REQUEST = MessageType("stacks", ("request_id",))
UPLOADED = MessageType("uploaded", ("window",))

AGENT_TO_WORKER = (PROFILE, STOP, STACKS_REQUEST, UPLOADED)


def make(mtype: MessageType, **fields: Any) -> Dict[str, Any]:
    """{"type": mtype.name, **fields} in that order; a field MTYPE does not declare is a bug
    here, not something to send."""
    if not mtype.open:
        unknown = [f for f in fields if f not in mtype.fields]
        if unknown:
            raise ValueError(f"{mtype.name} message has no field {unknown[0]!r}")
    return {"type": mtype.name, **fields}
