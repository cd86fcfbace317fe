"""The collector's switch: perftracker._worker once enabled, and whether an internal error turned
the collector off. One Switch, made by the collector (hooks.py) and handed to each part (the torch
patches, the ring of collectives, the windows, the agent client), which reads both at each use:
enable() sets `w`, a fork turns the switch off, and tests replace `w`. The parts get what else
they need (the windows, the ring, callables) from hooks.py too, never the collector itself.
"""
import sys
from typing import Any


class Switch:
    """`w`: perftracker._worker once enabled (None before); `off`: set on the first internal
    error (or in a forked child), after which every part goes straight to what it wraps."""

    __slots__ = ("w", "off")

    def __init__(self) -> None:
        self.w: Any = None
        self.off = False

    def turn_off(self, err: BaseException) -> None:
        """The first internal error: the collector goes off, says so in one line on stderr, and
        the C++ side stops too. Later calls do nothing."""
        if self.off:
            return
        self.off = True
        try:
            from perftracker import loader  # its DataLoader workers' counters stop too
            loader.stop_recording()
        except Exception:
            pass
        try:
            sys.stderr.write(f"perftracker: worker collector turned off: {err!r}\n")
            if self.w is not None:
                self.w.disable()  # the C++ side stops too (and disarms its tracer), without a 2nd line
        except Exception:
            pass
