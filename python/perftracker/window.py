"""The profiling window as the Python side sees it: which window the C++ side may arm next,
the windows whose python_trace message is still due, and torch.profiler around an armed window
(started and stopped on the training thread, its trace exported on a thread of its own).

The C++ side (perftracker._worker) arms and ends windows and runs the Python tracer; this state
is the one WindowState instance the collector owns (hooks.py), not module globals.
"""
import collections
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Optional

from perftracker import config, protocol

if TYPE_CHECKING:
    from perftracker.hooks import Collector

# A window's record: {"path": its Python trace, "window": the agent's id or None,
# "torch": whether torch.profiler started for it}.
WindowRecord = Dict[str, Any]

# _worker's edge codes from on_loader_next / on_optimizer_step.
ARMED = 1
ENDED = 2


class WindowState:
    """What the globals of the single-module collector held: the window the next arm belongs to,
    the windows still due, the running torch profiler and the exports in flight."""

    def __init__(self, collector: "Collector") -> None:
        # w and client come from the collector each time: enable(), a fork and tests change them.
        self._collector = collector
        self.profiler: Any = None  # torch profiler of the current window, if any
        self.profiler_rec: Optional[WindowRecord] = None  # the window record of that profiler
        self.out: Optional[str] = None  # python-trace path of the current window
        self.rec: Optional[WindowRecord] = None  # the current window's record in `due`
        # Windows whose python_trace message is still due.
        self.due: Deque[WindowRecord] = collections.deque(maxlen=config.WINDOWS_DUE)
        self.exports = 0  # torch.profiler exports running
        self._exports_lock = threading.Lock()
        self._saved_interval: Optional[float] = None  # the switch interval before the exports

    # ---- the agent client's side ----

    def start(self, out: str, window: Optional[int], iters: int, max_s: float,
              start_iter: int) -> bool:
        """Asks the C++ side for a window writing OUT; False when it refuses (another window is
        pending or open)."""
        rec = {"path": out, "window": window, "torch": False}
        prev = (self.out, self.rec)
        self.out, self.rec = out, rec  # before the training thread can arm it
        ok = self._collector.w.start_window(iters, max_s, out, start_iter)
        if ok:
            self.due.append(rec)
        else:
            self.out, self.rec = prev
        return ok

    def pop(self, path: str) -> WindowRecord:
        """The record of the window whose file is PATH (the oldest such), or {} when unknown."""
        for rec in self.due:
            if rec["path"] == path:
                self.due.remove(rec)
                return rec
        return {}

    # ---- the training thread's side ----

    def edge(self, code: int) -> None:
        """ARMED: the C++ side armed a profiling window on this thread; ENDED: it ended one.

        A window whose torch.profiler started says "torch": true in its python_trace message,
        and then always gets a torch_trace message: the trace's path, or path null and the error.
        """
        torch = sys.modules.get("torch")
        if code == ARMED and torch is not None and self.profiler is None:
            self._start_profiler(torch)
        elif code == ENDED and self.profiler is not None:
            self._end_profiler()

    def _start_profiler(self, torch: Any) -> None:
        rec = self.profiler_rec = self.rec
        try:
            kineto = getattr(torch.autograd, "kineto_available", lambda: False)()
            if kineto:
                acts = [torch.profiler.ProfilerActivity.CPU]
                # GPU kernels, copies and NCCL only where this process already uses CUDA (never
                # initialize CUDA from the collector).
                cuda = getattr(torch, "cuda", None)
                if cuda is not None and cuda.is_available() and cuda.is_initialized():
                    acts.append(torch.profiler.ProfilerActivity.CUDA)
                self.profiler = torch.profiler.profile(activities=acts)
            else:
                self.profiler = torch.autograd.profiler.profile()
            self.profiler.__enter__()
            if rec is not None:
                rec["torch"] = True
        except Exception as e:
            self.profiler = self.profiler_rec = None
            sys.stderr.write(f"perftracker: torch profiler not started: {e!r}\n")

    def _end_profiler(self) -> None:
        prof, self.profiler = self.profiler, None
        rec, self.profiler_rec = self.profiler_rec, None
        path = rec.get("path") if rec is not None else None
        out = (path or self.out or f"/tmp/perftracker-{os.getpid()}") + ".torch.json"
        window = rec.get("window") if rec is not None else None
        try:
            finish = stop_profiler(prof)
        except Exception as e:
            sys.stderr.write(f"perftracker: torch profiler stop failed: {e!r}\n")
            self.torch_failed(window, f"torch profiler stop failed: {e!r}")
            return
        # Parsing the events and exporting them is slow: not on the training thread.
        threading.Thread(target=self.export, args=(prof, out, window, finish), daemon=True,
                         name="perftracker-export").start()

    def drop_profiler(self) -> None:
        """The collector turned itself off with torch.profiler running: stop it (on the training
        thread, which started it) and drop what it recorded, or it would record, and grow, for
        the rest of the job."""
        prof, self.profiler, self.profiler_rec = self.profiler, None, None
        try:
            prof.__exit__(None, None, None)
        except Exception:
            pass

    def torch_failed(self, window: Optional[int], error: str) -> None:
        client = self._collector.client
        if client is not None:
            client.send(protocol.make(protocol.TORCH_TRACE, path=None, window=window,
                                      error=error[:config.MAX_ERROR_CHARS]))

    # ---- the export thread ----

    def export(self, prof: Any, out: str, window: Optional[int] = None,
               finish: Optional[Callable[[], None]] = None) -> None:
        w = self._collector.w
        if w is not None:
            w.hold_detector(True)  # the export slows training: its iterations say nothing
        with self._exports_lock:
            if self.exports == 0:
                self._saved_interval = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved_interval, config.EXPORT_SWITCH_INTERVAL_S))
            self.exports += 1
        try:
            self._export_now(prof, out, window, finish)
        finally:
            with self._exports_lock:
                self.exports -= 1
                if self.exports == 0:
                    sys.setswitchinterval(self._saved_interval)
            w = self._collector.w
            if w is not None:
                w.hold_detector(False)

    def _export_now(self, prof: Any, out: str, window: Optional[int],
                    finish: Optional[Callable[[], None]]) -> None:
        try:
            if finish is not None:
                finish()
            prof.export_chrome_trace(out + ".tmp")
            os.replace(out + ".tmp", out)
            client = self._collector.client
            if client is not None:
                client.send(protocol.make(protocol.TORCH_TRACE, path=out, window=window))
        except Exception as e:
            sys.stderr.write(f"perftracker: torch trace export failed: {e!r}\n")
            self.torch_failed(window, f"torch trace export failed: {e!r}")


def stop_profiler(prof: Any) -> Optional[Callable[[], None]]:
    """Stops torch's profiler on the training thread and returns what finishes it elsewhere.

    Stopping must happen on the thread that started it, but torch's __exit__ also parses every
    recorded event into Python objects, which takes seconds on a busy window and stalls training
    (the detectors then see a hang). Where torch's autograd profiler exposes the two halves,
    only the stop runs here; the parse runs in the returned function, on the export thread.
    Anything else falls back to __exit__ here.
    """
    ag = sys.modules.get("torch.autograd.profiler")
    split = (ag is not None and type(prof) is getattr(ag, "profile", None)
             and callable(getattr(ag, "_disable_profiler", None))
             and callable(getattr(prof, "_parse_kineto_results", None))
             and callable(getattr(ag, "EventList", None))
             and not getattr(prof, "use_cuda", True) and getattr(prof, "enabled", False))
    if not split:
        prof.__exit__(None, None, None)
        return None
    results = ag._disable_profiler()

    def finish() -> None:
        prof.kineto_results = results
        parsed = prof._parse_kineto_results(results)
        prof.function_events = ag.EventList(parsed, use_cuda=prof.use_cuda,
                                            profile_memory=prof.profile_memory,
                                            with_flops=prof.with_flops)
        prof.function_events._build_tree()
    return finish
