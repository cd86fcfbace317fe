"""Where a growing rank keeps its tensors, on a torch that records no allocations of its own.

torch.profiler's profile_memory needs Kineto; Debian's torch 1.13 has none, so its memory
window would name only the Python objects the heap sampler draws (worker/heap_sampler.h), never
a tensor. There, while a memory window records, a torch dispatch mode sees every op's outputs on
the training thread, and each new storage (not a view, not one of the op's inputs given back) is
followed whole by the window's heap sampler (_worker.keep_block: at the Python call that ran the
op, under the op's name) until its tensor is freed (a weak reference's callback: forget_block).
What is still alive at the window's end is what the window kept, placed as the sampled heap is
(pattern/python_window.h) and named like profile_memory's records ("train_step ... aten::ones").

Cost: one Python call per op, on the growing rank's memory window only. Bounded: at most
config.MAX_FOLLOWED_TENSORS followed at once. Never raises into training: an internal error stops
the following with one line on stderr; an op's own error is the op's.
"""
import sys
import weakref
from typing import Any, Dict, Optional, Tuple

from perftracker import config

# This file's name is how the summary knows the recorder's frames are not the program's
# (pattern/memory_sites.h kKeptTensorsFile): keep the two in step.


def _tensors(value: Any, torch: Any):
    """The tensors in an op's argument or result (a tensor, or a list or tuple of them)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                yield v


class KeptTensors:
    """Follows the storages the training thread's ops make while a memory window records."""

    def __init__(self, torch: Any, worker: Any) -> None:
        self._torch = torch
        self._w = worker
        self._mode: Any = None
        self._on = False  # following (off after an internal error, the mode still entered)
        # id(weak reference) -> (the reference, kept alive for its callback; storage address)
        self._followed: Dict[int, Tuple[Any, int]] = {}
        self.dropped = 0  # new storages not followed: the bound was reached

    def start(self) -> bool:
        """Enters the dispatch mode on this (the training) thread; False where torch has none."""
        mode_class = _mode_class(self._torch)
        if mode_class is None:
            return False
        # The window's tracer records none of the recorder's calls, nor the ops they run: each
        # op's time stays in the program's call of it, as on a rank that follows nothing (else
        # this rank's ops would read as slow Python beside its peers').
        mute = getattr(self._w, "mute_calls", None)
        if mute is not None:
            for code in _dispatch_entries(self._torch, mode_class):
                mute(code)
        mode = mode_class(self)
        mode.__enter__()
        self._mode, self._on = mode, True
        return True

    def stop(self) -> None:
        """Leaves the dispatch mode and stops following (what was kept is the window's now)."""
        mode, self._mode, self._on = self._mode, None, False
        self._followed.clear()  # their callbacks never run: the references die first
        if mode is not None:
            try:
                mode.__exit__(None, None, None)
            except Exception as e:  # another mode entered over ours and not left
                sys.stderr.write(f"perftracker: tensor following not stopped cleanly: {e!r}\n")

    def follow(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """An op's new storages in OUT are followed (called for each op while the mode is on)."""
        if not self._on:
            return
        try:
            inputs = None
            for t in _tensors(out, self._torch):
                if t._is_view():
                    continue
                addr = t.data_ptr()
                if addr == 0:
                    continue
                if inputs is None:  # an in-place or out= op gives an input back
                    inputs = {a.data_ptr() for v in (*args, *kwargs.values())
                              for a in _tensors(v, self._torch)}
                if addr in inputs:
                    continue
                if len(self._followed) >= config.MAX_FOLLOWED_TENSORS:
                    self.dropped += 1
                    continue
                name = getattr(getattr(func, "_schema", None), "name", None) or str(func)
                if not self._w.keep_block(addr, t.element_size() * t.numel(), func, name):
                    self._on = False  # the window no longer samples: nothing more to follow
                    return
                ref = weakref.ref(t, self._gone)
                self._followed[id(ref)] = (ref, addr)
        except Exception as e:
            sys.stderr.write(f"perftracker: tensor following stopped: {e!r}\n")
            # The mode stays entered until stop(), passing every op through untouched.
            self._on = False
            self._followed.clear()

    def _gone(self, ref: Any) -> None:
        # Any thread, wherever the tensor's last reference went.
        followed = self._followed.pop(id(ref), None)
        if followed is not None:
            try:
                self._w.forget_block(followed[1])
            except Exception:
                pass


_MODE_CLASS: Optional[type] = None


def _dispatch_entries(torch: Any, mode_class: type):
    """The Python functions torch enters first for an op under a dispatch mode: the mode's own
    __torch_dispatch__ and, on torch 1.13, the helper mode that calls it."""
    yield mode_class.__torch_dispatch__.__code__
    helper = getattr(sys.modules.get("torch.utils._python_dispatch"), "_TorchDispatchStackMode",
                     None)
    fn = getattr(helper, "__torch_dispatch__", None)
    if fn is not None and hasattr(fn, "__code__"):
        yield fn.__code__


def _mode_class(torch: Any) -> Optional[type]:
    """The dispatch mode class, made once (torch's TorchDispatchMode), or None without one."""
    global _MODE_CLASS
    if _MODE_CLASS is not None:
        return _MODE_CLASS
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None

    class FollowMode(TorchDispatchMode):
        def __init__(self, recorder: KeptTensors) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            self.recorder.follow(func, args, kwargs, out)
            return out

    _MODE_CLASS = FollowMode
    return _MODE_CLASS
