"""The detector's news, perftracker._worker.drain(), as named tuples: one type per kind, read by
field, never by position. The C++ side makes the raw tuples (src/worker/py/module.cc, Drain);
parse() is the one place that knows their layout, and tests/test_protocol.py holds both to it.
"""
from typing import Any, NamedTuple, Optional, Sequence, Union


class Iteration(NamedTuple):
    """An iteration ended: the detector's index, its span, and whether it fed the trigger."""
    index: int
    start_ns: int
    end_ns: int
    clean: bool


class Slowdown(NamedTuple):
    """The slowdown trigger fired at iteration INDEX: recent mean against the learned best."""
    index: int
    mean_ns: int
    best_ns: int


class Hang(NamedTuple):
    """No iteration ended for too long after iteration INDEX."""
    index: int
    now_ns: int
    mean_ns: int


class Learned(NamedTuple):
    """The detector learned the iteration's pattern (its text form)."""
    pattern: str


class Relearn(NamedTuple):
    """The pattern changed: the detector learns it again."""


class WindowEnd(NamedTuple):
    """A profiling window's file was written (DONE) or could not be (its PATH either way)."""
    done: bool
    path: str


News = Union[Iteration, Slowdown, Hang, Learned, Relearn, WindowEnd]

# The raw tuple's first item -> its type; the rest of the tuple is the type's fields in order.
KINDS = {"iter": Iteration, "slowdown": Slowdown, "hang": Hang, "learned": Learned,
         "relearn": Relearn}


def parse(raw: Sequence[Any]) -> Optional[News]:
    """One item of drain() as its type; None for a kind or a length this version does not read.

    ("iter", 7, 100, 250, True) -> Iteration(index=7, start_ns=100, end_ns=250, clean=True)
    ("window_failed", "/t/w.json") -> WindowEnd(done=False, path="/t/w.json")
    """
    if not raw:
        return None
    kind, fields = raw[0], tuple(raw[1:])
    if kind in ("window_done", "window_failed"):
        return WindowEnd(kind == "window_done", *fields) if len(fields) == 1 else None
    t = KINDS.get(kind)
    if t is None or len(fields) != len(t._fields):
        return None
    return t(*fields)
