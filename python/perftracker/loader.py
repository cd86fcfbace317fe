"""DataLoader worker processes, as the node agent sees them: each worker process keeps the time
its batches take in the dataset (__getitem__ / __getitems__ / the iterable's next) and in the
collate function in a small shared file, which the agent reads at a window's start and end
(src/agent/loader_stats.h reads the same layout). The Python tracer follows only the training
thread: without this, a rank that waits for its loader workers shows only the wait.

The file is `loader-<pid>` in the folder of the agent's socket, made by the worker process at
its first batch: only where that folder is private to the job's user (as the agent makes it),
created afresh (O_EXCL, never through a link), and never once the collector turned itself off. It outlives the worker, so that a window that
ends as the workers exit (the job's end, an epoch's end) still reads their last count; the agent
removes the files of workers that are gone when the next window begins. Layout, little-endian, 512 bytes:

  0   4s   magic b"PTLW"
  4   u32  version (1)
  8   u64  sequence: odd while the counters below are being written (the agent reads again)
  16  u64  batches
  24  u64  nanoseconds in the dataset
  32  u64  nanoseconds in the collate function
  40  128s the dataset function's name, NUL-padded ("TensorDataset.__getitem__ (dataset.py:208)")
  168 128s the collate function's name

In the training process the same fetch wrapper has a second job (UnrecordedFetch): while a
window's torch.profiler records, a batch is fetched with torch's RecordFunction off, so that the
profiler neither records nor, at its stop, processes the collate's tiny ops.

Nothing here may harm training: any error turns the recording off in that process, and the
batch is fetched as without it.
"""
import functools
import mmap
import os
import struct
import time
from typing import Any, Callable, Optional

from perftracker import config, identity
from perftracker.files import create_private_file, private_folder

MAGIC = b"PTLW"
VERSION = 1
SIZE = 512
NAME_BYTES = 128
_HEADER = struct.Struct("<4sI")
_COUNTERS = struct.Struct("<QQQQ")  # sequence, batches, dataset ns, collate ns
_COUNTERS_AT = 8
_NAMES_AT = 40


def function_name(fn: Any, method: str = "__call__") -> str:
    """'Qualname (file:line)' of a function or a callable object, for the agent's report.

    >>> function_name(len)
    'len'
    """
    target = getattr(fn, "func", fn)  # functools.partial
    qual = getattr(target, "__qualname__", None)
    code = getattr(target, "__code__", None)
    if qual is None:  # an instance: its class's method
        qual = f"{type(target).__qualname__}.{method}"
        code = getattr(getattr(type(target), method, None), "__code__", None)
    if code is not None:
        return f"{qual} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
    return qual


def stats_dir(environ=None) -> str:
    """The folder of this job's agent socket, where worker files go ('' without an agent)."""
    environ = os.environ if environ is None else environ
    sock = environ.get(config.AGENT_SOCKET_ENV, "")
    return os.path.dirname(identity.agent_socket(sock, environ)) if sock else ""


def stop_recording() -> None:
    """The collector turned itself off: this process (and the workers it forks from now on)
    writes no more counters."""
    _RECORDER.off = True


class WorkerStats:
    """One DataLoader worker process's counters in its shared file."""

    def __init__(self, path: str, dataset_fn: str, collate_fn: str) -> None:
        self.path = path
        fd = create_private_file(path)
        try:
            os.ftruncate(fd, SIZE)
            self._mm = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self.seq = self.batches = self.dataset_ns = self.collate_ns = 0
        _HEADER.pack_into(self._mm, 0, MAGIC, VERSION)
        for k, name in enumerate((dataset_fn, collate_fn)):
            raw = name.encode("utf-8", "replace")[:NAME_BYTES - 1]
            self._mm[_NAMES_AT + k * NAME_BYTES:_NAMES_AT + k * NAME_BYTES + len(raw)] = raw

    def add(self, dataset_ns: int, collate_ns: int) -> None:
        self.batches += 1
        self.dataset_ns += dataset_ns
        self.collate_ns += collate_ns
        self.seq += 1  # odd: being written
        _COUNTERS.pack_into(self._mm, _COUNTERS_AT, self.seq, self.batches, self.dataset_ns,
                            self.collate_ns)
        self.seq += 1
        struct.pack_into("<Q", self._mm, _COUNTERS_AT, self.seq)


class _Recorder:
    """This process's recording: made at the first batch of a worker process."""

    def __init__(self) -> None:
        self.stats: Optional[WorkerStats] = None
        self.off = False
        self.pid = 0

    def stats_for(self, fetcher: Any, dataset_method: str) -> Optional[WorkerStats]:
        if self.off:
            return None
        if self.stats is not None and self.pid == os.getpid():
            return self.stats
        try:
            folder = stats_dir()
            if not folder or not _in_worker():
                return None
            if not private_folder(folder):
                self.off = True
                return None
            self.pid = os.getpid()
            path = os.path.join(folder, f"loader-{self.pid}")
            dataset = fetcher.dataset
            if dataset_method == "__getitem__" and getattr(dataset, "__getitems__", None):
                dataset_method = "__getitems__"  # torch 2.x fetches a batch in one call then
            self.stats = WorkerStats(path, function_name(dataset, dataset_method),
                                     function_name(getattr(fetcher, "collate_fn", None)))
            return self.stats
        except Exception:
            self.off = True
            return None


_RECORDER = _Recorder()


def _in_worker() -> bool:
    import sys
    worker = sys.modules.get("torch.utils.data._utils.worker")
    return worker is not None and getattr(worker, "_worker_info", None) is not None


class UnrecordedFetch:
    """While a window's torch.profiler records (window.py sets `enable_record_function` at its
    start, None at its stop), a batch fetched in the training process runs with torch's
    RecordFunction off on its thread: the dataset's indexing and the collate's stacking are
    hundreds of tiny ops a batch (select, unsqueeze, as_strided: leaving them out took the demo
    job's window from 7,065 recorded events to 3,175), each of which torch's profiler pays for while recording and again, on the
    training thread, when it stops. Nothing reads them: the Python tracer still sees the fetch
    and its functions, torch's enumerate(DataLoader) range is outside the fetch, and worker
    processes are not profiled."""

    def __init__(self) -> None:
        self.enable_record_function: Optional[Callable[[bool], None]] = None

    def call(self, orig: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        enable = self.enable_record_function
        if enable is None:
            return orig(*args, **kwargs)
        enable(False)
        try:
            return orig(*args, **kwargs)
        finally:
            enable(True)


UNRECORDED_FETCH = UnrecordedFetch()


def _timed_fetch(orig: Callable[..., Any], dataset_method: str) -> Callable[..., Any]:
    @functools.wraps(orig)
    def fetch(self, *args, **kwargs):
        stats = _RECORDER.stats_for(self, dataset_method) if _in_worker() else None
        if stats is None:
            return UNRECORDED_FETCH.call(orig, self, *args, **kwargs)
        collate = self.collate_fn
        spent = [0]

        def timed_collate(data):
            t = time.perf_counter_ns()
            try:
                return collate(data)
            finally:
                spent[0] += time.perf_counter_ns() - t

        t0 = time.perf_counter_ns()
        self.collate_fn = timed_collate
        try:
            return orig(self, *args, **kwargs)
        finally:
            self.collate_fn = collate
            total = time.perf_counter_ns() - t0
            try:
                stats.add(max(0, total - spent[0]), spent[0])
            except Exception:
                _RECORDER.off = True

    fetch._perftracker = True
    return fetch


def patch_fetchers(mod: Any) -> None:
    """Times the fetch of torch's map-style and iterable dataset fetchers (torch.utils.data.
    _utils.fetch) in DataLoader worker processes; elsewhere the wrapper calls through, unrecorded
    by torch's profiler during a window (UnrecordedFetch)."""
    for cls_name, method in (("_MapDatasetFetcher", "__getitem__"), ("_IterableDatasetFetcher", "__iter__")):
        cls = getattr(mod, cls_name, None)
        fetch = getattr(cls, "fetch", None) if cls is not None else None
        if fetch is None or getattr(fetch, "_perftracker", False):
            continue
        cls.fetch = _timed_fetch(fetch, method)
