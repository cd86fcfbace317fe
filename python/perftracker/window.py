"""The profiling window as the Python side sees it: which window the C++ side may arm next,
the windows whose python_trace message is still due, and torch.profiler around an armed window's
first iterations (started and stopped on the training thread, its trace written on a thread of
its own once the window ended). While it records, the training process's batch fetch goes
unrecorded (loader.UnrecordedFetch), and where torch has it the profiler keeps the trace alone
(trace_only_config): less for its stop to do.

The C++ side (perftracker._worker) arms and ends windows and runs the Python tracer; this state
is the one WindowState instance the collector owns (hooks.py), not module globals.
"""
import collections
import contextlib
import functools
import json
import os
import sys
import threading
import warnings
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from perftracker import config, files, kept_tensors, loader, protocol
from perftracker.torch_lazy import without_lazy_inductor
from perftracker.switch import Switch

# A window's record: {"path": its Python trace, "window": the agent's id or None,
# "torch": whether torch.profiler started for it}.
WindowRecord = Dict[str, Any]

# _worker's edge codes from on_loader_next / on_optimizer_step / on_marker (EventEdge in
# src/worker/window_control.h).
ARMED = 1
ENDED = 2
# The window goes on, but torch.profiler's part of it is done: it records only a window's first
# iterations (base/window_defaults.h kTorchProfilerIterations says why; a memory window's records
# them all).
TORCH_DONE = 3


class WindowState:
    """What the globals of the single-module collector held: the window the next arm belongs to,
    the windows still due, the running torch profiler and the exports in flight."""

    def __init__(self, switch: Switch, send: Callable[[Dict[str, Any]], None]) -> None:
        # _worker is the switch's w, read each time: enable(), a fork and tests change it. SEND
        # queues a message for the agent (dropped while there is no agent client).
        self._switch = switch
        self._send = send
        self.profiler: Any = None  # torch profiler of the current window, if any
        self.profiler_rec: Optional[WindowRecord] = None  # the window record of that profiler
        # A memory window's tensor following where torch records no allocations itself.
        self.kept: Optional[kept_tensors.KeptTensors] = None
        self.out: Optional[str] = None  # python-trace path of the current window
        self.rec: Optional[WindowRecord] = None  # the current window's record in `due`
        # Windows whose python_trace message is still due.
        self.due: Deque[WindowRecord] = collections.deque(maxlen=config.WINDOWS_DUE)
        self.exports = 0  # torch.profiler exports running
        # A stopped profiler's export waiting for its window's end (_end_profiler says why):
        # (write, out, window).
        self.export_due: Optional[Tuple[Callable[[str], None], str, Optional[int]]] = None
        self._exports_lock = threading.Lock()
        self._saved_interval: Optional[float] = None  # the switch interval before the exports

    # ---- the agent client's side ----

    def start(self, out: str, window: Optional[int], iters: int, max_s: float,
              start_iter: int, shapes: bool = False, memory: bool = False) -> bool:
        """Asks the C++ side for a window writing OUT (SHAPES: torch.profiler records the ops'
        input shapes; MEMORY: every allocation and free with the Python stack around it);
        False when it refuses (another window is pending or open)."""
        rec = {"path": out, "window": window, "torch": False, "shapes": shapes,
               "memory": memory}
        prev = (self.out, self.rec)
        self.out, self.rec = out, rec  # before the training thread can arm it
        # MEMORY: the Python heap is sampled too (Python objects, which profile_memory does not
        # see: worker/heap_sampler.h).
        ok = (self._switch.w.start_window(iters, max_s, out, start_iter, True) if memory else
              self._switch.w.start_window(iters, max_s, out, start_iter))
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
        """ARMED: the C++ side armed a profiling window on this thread; TORCH_DONE: the window
        goes on without torch.profiler; ENDED: it ended one.

        A window whose torch.profiler started says "torch": true in its python_trace message,
        and then always gets a torch_trace message: the trace's path, or path null and the error.
        """
        torch = sys.modules.get("torch")
        if code == ARMED and torch is not None and self.profiler is None:
            self._start_profiler(torch)
        elif code in (TORCH_DONE, ENDED) and self.profiler is not None:
            self._end_profiler()
        if code == ENDED:
            self._start_due_export()

    def _start_profiler(self, torch: Any) -> None:
        rec = self.profiler_rec = self.rec
        shapes = bool(rec.get("shapes")) if rec is not None else False
        # This rank's memory grows: record where (profile_memory's allocations, placed by
        # with_stack's Python frames: pattern/memory_sites.h). Only this rank pays for it.
        memory = bool(rec.get("memory")) if rec is not None else False
        try:
            kineto = getattr(torch.autograd, "kineto_available", lambda: False)()
            if kineto:
                acts = [torch.profiler.ProfilerActivity.CPU]
                # GPU kernels, copies and NCCL only where this process already uses CUDA (never
                # initialize CUDA from the collector).
                cuda = getattr(torch, "cuda", None)
                if cuda is not None and cuda.is_available() and cuda.is_initialized():
                    acts.append(torch.profiler.ProfilerActivity.CUDA)
                # Input shapes only where the server asks (a window that explains a slowdown:
                # server/window.h WindowSpec::record_shapes says why not in the baseline); the
                # diagnosis compares them (more work: diagnose/causes.h MoreWorkRule).
                # trace_only cannot give Python stacks (torch 2.13 drops it with a warning).
                self.profiler = torch.profiler.profile(
                    activities=acts, record_shapes=shapes, profile_memory=memory,
                    with_stack=memory, **({} if memory else trace_only_config(torch)))
            else:
                # The legacy export writes no memory records: a memory window follows the
                # tensors the training thread's ops make itself (kept_tensors.py).
                self.profiler = torch.autograd.profiler.profile(record_shapes=shapes)
            with quiet_profiler(), without_lazy_inductor(torch):
                self.profiler.__enter__()
            if memory and not kineto:
                self._follow_tensors(torch)
            if memory:
                # with_stack installed torch's Python tracer over the window's: both see the
                # thread's calls again (the window's tracer places the sampled heap).
                chain = getattr(self._switch.w, "chain_profile", None)
                if chain is not None:
                    chain()
            if rec is not None:
                rec["torch"] = True
            autograd = getattr(torch._C, "_autograd", None)
            loader.UNRECORDED_FETCH.enable_record_function = getattr(
                autograd, "_enable_record_function", None)
        except Exception as e:
            self.profiler = self.profiler_rec = None
            sys.stderr.write(f"perftracker: torch profiler not started: {e!r}\n")

    def _follow_tensors(self, torch: Any) -> None:
        kept = kept_tensors.KeptTensors(torch, self._switch.w)
        try:
            if kept.start():
                self.kept = kept
        except Exception as e:
            sys.stderr.write(f"perftracker: tensors not followed: {e!r}\n")

    def _stop_following(self) -> None:
        kept, self.kept = self.kept, None
        if kept is not None:
            kept.stop()

    def _end_profiler(self) -> None:
        self._stop_following()
        loader.UNRECORDED_FETCH.enable_record_function = None
        prof, self.profiler = self.profiler, None
        rec, self.profiler_rec = self.profiler_rec, None
        path = rec.get("path") if rec is not None else None
        out = (path or self.out or f"/tmp/perftracker-{os.getpid()}") + ".torch.json"
        window = rec.get("window") if rec is not None else None
        try:
            with quiet_profiler():
                write = stop_profiler(prof)
        except Exception as e:
            sys.stderr.write(f"perftracker: torch profiler stop failed: {e!r}\n")
            self.torch_failed(window, f"torch profiler stop failed: {e!r}")
            return
        # Writing the trace is slow: not on the training thread, and not while the window's
        # Python tracer still records (the writer holds the GIL: 17-93 ms a window, measured on
        # torch 2.13), so that its iterations after torch.profiler's are the job's own.
        self.export_due = (write, out, window)

    def holds_torch_trace(self) -> bool:
        """Whether torch.profiler runs, or its stopped trace waits for the window's end: what a
        collector turning itself off, or a job ending inside a window, must drop."""
        return self.profiler is not None or self.export_due is not None

    def _start_due_export(self) -> None:
        due, self.export_due = self.export_due, None
        if due is not None:
            threading.Thread(target=self.export, args=due, daemon=True,
                             name="perftracker-export").start()

    def drop_profiler(self) -> None:
        """The collector turned itself off with torch.profiler running: stop it (on the training
        thread, which started it) and drop what it recorded, or it would record, and grow, for
        the rest of the job. A trace already stopped and waiting for its window's end goes too."""
        self._stop_following()
        loader.UNRECORDED_FETCH.enable_record_function = None
        self.export_due = None  # its window never ends: the agent takes the Python trace alone
        prof, self.profiler, self.profiler_rec = self.profiler, None, None
        if prof is None:
            return
        try:
            prof.__exit__(None, None, None)
        except Exception:
            pass

    def torch_failed(self, window: Optional[int], error: str) -> None:
        self._send(protocol.make(protocol.TORCH_TRACE, path=None, window=window,
                                 error=error[:config.MAX_ERROR_CHARS]))

    # ---- the export thread ----

    def export(self, write: Callable[[str], None], out: str,
               window: Optional[int] = None) -> None:
        w = self._switch.w
        if w is not None:
            w.hold_detector(True)  # the export slows training: its iterations say nothing
        with self._exports_lock:
            if self.exports == 0:
                self._saved_interval = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved_interval, config.EXPORT_SWITCH_INTERVAL_S))
            self.exports += 1
        try:
            self._export_now(write, out, window)
        finally:
            with self._exports_lock:
                self.exports -= 1
                if self.exports == 0:
                    sys.setswitchinterval(self._saved_interval)
            w = self._switch.w
            if w is not None:
                w.hold_detector(False)

    def _export_now(self, write: Callable[[str], None], out: str, window: Optional[int]) -> None:
        try:
            # torch's writer opens the file as it finds it (a link planted there would take the
            # trace wherever it points): it is made afresh here first, never through a link,
            # and torch writes into that.
            os.close(files.create_private_file(out + ".tmp"))
            write(out + ".tmp")
            os.replace(out + ".tmp", out)
            # The window's Python trace, written by the C++ side meanwhile, goes in the same
            # message round (the send wakes the agent client): both are what the agent waits for.
            w = self._switch.w
            if w is not None:
                w.wait_writers(config.CLIENT_PERIOD_S)
            self._send(protocol.make(protocol.TORCH_TRACE, path=out, window=window))
        except Exception as e:
            sys.stderr.write(f"perftracker: torch trace export failed: {e!r}\n")
            self.torch_failed(window, f"torch trace export failed: {e!r}")


@contextlib.contextmanager
def quiet_profiler() -> Any:
    """torch.profiler's warnings about the collector's own use of it (config.PROFILER_WARNINGS)
    stay off the job's terminal while it starts or stops; every other warning passes."""
    with warnings.catch_warnings():
        for message in config.PROFILER_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        yield


def trace_only_config(torch: Any) -> Dict[str, Any]:
    """torch.profiler.profile's experimental_config asking for the trace alone, where this torch
    has it (trace_only: torch 2.13 has it): its stop then builds no events for Python to read, which
    nothing here reads (the trace is written by torch's C++ writer). Measured on torch 2.13, 10
    iterations of a model of many small ops: the stop on the training thread took 79-111 ms
    against 139-145 ms. {} where this torch does not know it."""
    try:
        return {"experimental_config": torch._C._profiler._ExperimentalConfig(trace_only=True)}
    except Exception:
        return {}


def stop_profiler(prof: Any) -> Callable[[str], None]:
    """Stops torch's profiler on the training thread and returns what writes its trace (a Chrome
    JSON file at the path it is given), to be called on another thread.

    Stopping must happen on the thread that started it. What torch does after the stop is the
    window's cost to training: older versions' __exit__ parses every recorded event into Python
    objects on the spot (tens of us per event: seconds on a busy window, which stalls training and
    competes for the GIL afterwards). So the stop here is torch's own disable call, and the trace
    is written from its raw result: by torch's C++ writer where Kineto is present, else by
    legacy_trace_writer (the format torch's legacy export writes, without building its event
    tree). Where torch's own stop is already lazy (torch 2.x: it parses only when events are
    read), its __exit__ is kept; anything unexpected falls back to __exit__ and torch's export.
    """
    ag = sys.modules.get("torch.autograd.profiler")
    inner = getattr(prof, "profiler", prof)  # torch.profiler.profile wraps an autograd profile
    autograd_profile = getattr(ag, "profile", None) if ag is not None else None
    disable = getattr(ag, "_disable_profiler", None) if ag is not None else None
    if (autograd_profile is None or type(inner) is not autograd_profile or not callable(disable)
            or not getattr(inner, "enabled", False)):
        prof.__exit__(None, None, None)
        return prof.export_chrome_trace
    if callable(getattr(autograd_profile, "_ensure_function_events", None)) and inner is not prof:
        # torch.profiler.profile over a lazy autograd profile: its stop parses nothing, and its
        # export is torch's C++ writer.
        prof.__exit__(None, None, None)
        return prof.export_chrome_trace
    if getattr(inner, "use_cuda", False):
        sys.modules["torch"].cuda.synchronize()  # as torch's __exit__: kernels in flight count
    results = disable()
    # The profile objects are dropped without their __exit__ (it would stop a stopped profiler
    # and parse): marked stopped, so that nothing else tries.
    inner.enabled = False
    if callable(getattr(results, "save", None)):
        return results.save
    return functools.partial(write_legacy_trace, results)


# Names torch's own legacy parse leaves out (torch.autograd.profiler_util._filter_name).
_FILTERED = frozenset(["[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
                       "profiler::_record_function_enter_new", "profiler::_record_function_exit",
                       "aten::is_leaf", "aten::output_nr", "aten::_version"])


def write_legacy_trace(results: Any, path: str) -> None:
    """Writes RESULTS (a torch profiler result without Kineto) as torch's legacy
    export_chrome_trace does: a JSON list of complete events, times in us from the trace start,
    pid "CPU functions", tid the thread. About 1 us of Python per event where torch's parse and
    tree take 20-30 (torch 1.13, measured); names are JSON-escaped (torch's writer does not)."""
    torch = sys.modules.get("torch")
    demangle = getattr(getattr(torch, "_C", None), "_demangle", None)
    start = results.trace_start_us()
    names: Dict[str, Optional[str]] = {}  # raw name -> its JSON text, None when left out
    parts: List[str] = []
    events = list(results.events())
    shapes = None
    if events and callable(getattr(events[0], "shapes", None)):
        shapes = lambda ev: ev.shapes()  # noqa: E731
    for e in events:
        raw = e.name()
        text = names.get(raw, "")
        if text == "":
            if raw in _FILTERED:
                text = None
            else:
                name = demangle(raw) if demangle is not None and len(raw) > 1 else raw
                text = json.dumps(name)
            names[raw] = text
        if text is None:
            continue
        # record_shapes: torch's legacy export leaves the shapes out; the diagnosis compares
        # them between ranks (more work), so they go in as Kineto names them.
        dims = shapes(e) if shapes is not None else None
        args = '{"Input Dims": %s}' % json.dumps(dims) if dims and any(dims) else "{}"
        parts.append('{"name": %s, "ph": "X", "ts": %d, "dur": %d, "tid": %d, '
                     '"pid": "CPU functions", "args": %s}'
                     % (text, e.start_us() - start, e.duration_us(), e.start_thread_id(), args))
    with open(path, "w") as f:
        f.write("[")
        f.write(", ".join(parts))
        f.write("]")
