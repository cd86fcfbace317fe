"""Feeds perftracker._worker from torch and talks to the node agent (see src/worker/protocol.md).

Rules (the collector must never harm training):
  * the training thread only calls the C++ fast entry points; messages, files and the socket are
    handled by one daemon thread;
  * the socket is non-blocking; when the agent is absent or slow, messages are dropped and the
    connection is retried now and then;
  * any internal error turns the collector off and prints one line to stderr.
"""
import collections
import functools
import gc
import json
import os
import socket
import sys
import threading
import time

from perftracker import identity

_w = None            # perftracker._worker once enabled
_client = None       # AgentClient
_off = False         # set on the first internal error
_tls = threading.local()
_profiler = None     # torch profiler of the current window, if any
_window_out = None   # python-trace path of the current window
_window_rec = None   # the current window's record in _windows: {"path", "window", "torch"}
_windows = collections.deque(maxlen=16)  # windows whose python_trace message is still due
_train_tid = None    # threading.get_ident() of the thread that calls the loader/optimizer hooks
_last_coll = None    # [op, count, file, line, start_monotonic, end_monotonic or None]
_coll_count = 0      # wrapped collective calls so far (outermost ones)
_profiler_rec = None  # the window record of the running torch profiler
MAX_STACK_THREADS = 64
MAX_STACK_FRAMES = 100

ENV_CONFIG = {  # environment variable -> _worker.install key
    "PERFTRACKER_LEARN_REPEATS": "learn_repeats",
    "PERFTRACKER_WINDOW": "window",
    "PERFTRACKER_SLOWDOWN_RATIO": "slowdown_ratio",
    "PERFTRACKER_WARMUP_ITERATIONS": "warmup_iterations",
    "PERFTRACKER_REFERENCE_ITERATIONS": "reference_iterations",
    "PERFTRACKER_HANG_FACTOR": "hang_factor",
    "PERFTRACKER_RELEARN_AFTER": "relearn_after",
    "PERFTRACKER_TRACER_MAX_NODES": "tracer_max_nodes",
}


# "PID:RANK" of the process that runs the collector, inherited by the processes it starts.
OWNER_ENV = "PERFTRACKER_RANK_OWNER"


def is_helper_of_a_rank(environ=os.environ, pid=None):
    """True in a Python process started by a collected rank with the same RANK (a spawned
    DataLoader worker, a subprocess): it must not report as if it were the rank. A rank that
    learns its RANK only from torch.distributed cannot mark its helpers this way."""
    owner = environ.get(OWNER_ENV, "")
    if not owner:
        return False
    owner_pid, _, owner_rank = owner.partition(":")
    # An owner without a RANK is a launcher-like Python (a script that starts its ranks with
    # multiprocessing): its children are the ranks, not its helpers.
    mine = identity.identity(environ, hostname="")["rank"]
    return owner_rank != "" and owner_pid != str(pid if pid is not None else os.getpid()) and \
        owner_rank == ("" if mine is None else str(mine))


def _turn_off(err):
    global _off
    if _off:
        return
    _off = True
    try:
        sys.stderr.write(f"perftracker: worker collector turned off: {err!r}\n")
        if _w is not None:
            _w.disable()  # the C++ side stops too (and disarms its tracer), without a 2nd line
    except Exception:
        pass


# ---- events from the training thread ----

def _edge(code):
    """1: the C++ side armed a profiling window on this thread; 2: it ended one.

    A window whose torch.profiler started says "torch": true in its python_trace message, and
    then always gets a torch_trace message: the trace's path, or path null and the error.
    """
    global _profiler, _profiler_rec
    torch = sys.modules.get("torch")
    if code == 1 and torch is not None and _profiler is None:
        rec = _profiler_rec = _window_rec
        try:
            kineto = getattr(torch.autograd, "kineto_available", lambda: False)()
            if kineto:
                acts = [torch.profiler.ProfilerActivity.CPU]
                # GPU kernels, copies and NCCL only where this process already uses CUDA (never
                # initialize CUDA from the collector).
                cuda = getattr(torch, "cuda", None)
                if cuda is not None and cuda.is_available() and cuda.is_initialized():
                    acts.append(torch.profiler.ProfilerActivity.CUDA)
                _profiler = torch.profiler.profile(activities=acts)
            else:
                _profiler = torch.autograd.profiler.profile()
            _profiler.__enter__()
            if rec is not None:
                rec["torch"] = True
        except Exception as e:
            _profiler = _profiler_rec = None
            sys.stderr.write(f"perftracker: torch profiler not started: {e!r}\n")
    elif code == 2 and _profiler is not None:
        prof, _profiler = _profiler, None
        rec, _profiler_rec = _profiler_rec, None
        path = rec.get("path") if rec is not None else None
        out = (path or _window_out or f"/tmp/perftracker-{os.getpid()}") + ".torch.json"
        window = rec.get("window") if rec is not None else None
        try:
            finish = _stop_profiler(prof)
        except Exception as e:
            sys.stderr.write(f"perftracker: torch profiler stop failed: {e!r}\n")
            _torch_failed(window, f"torch profiler stop failed: {e!r}")
            return
        # Parsing the events and exporting them is slow: not on the training thread.
        threading.Thread(target=_export, args=(prof, out, window, finish), daemon=True,
                         name="perftracker-export").start()


def _drop_profiler():
    """The collector turned itself off with torch.profiler running: stop it (on the training
    thread, which started it) and drop what it recorded, or it would record, and grow, for the
    rest of the job."""
    global _profiler, _profiler_rec
    prof, _profiler, _profiler_rec = _profiler, None, None
    try:
        prof.__exit__(None, None, None)
    except Exception:
        pass


def _torch_failed(window, error):
    if _client is not None:
        _client.send({"type": "torch_trace", "path": None, "window": window, "error": error[:500]})


def _stop_profiler(prof):
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

    def finish():
        prof.kineto_results = results
        parsed = prof._parse_kineto_results(results)
        prof.function_events = ag.EventList(parsed, use_cuda=prof.use_cuda, profile_memory=prof.profile_memory,
                                            with_flops=prof.with_flops)
        prof.function_events._build_tree()
    return finish


# While the export thread parses torch's events (pure Python, tens of ms per thousand events),
# the training thread waits for the GIL up to one switch interval (5 ms by default) each time it
# wants it back; a shorter interval bounds those waits.
EXPORT_SWITCH_INTERVAL_S = 0.0005
_exports = 0
_exports_lock = threading.Lock()


def _export(prof, out, window=None, finish=None):
    global _exports
    if _w is not None:
        _w.hold_detector(True)  # the export slows training: its iterations say nothing
    with _exports_lock:
        if _exports == 0:
            _export.saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(_export.saved_interval, EXPORT_SWITCH_INTERVAL_S))
        _exports += 1
    try:
        _export_now(prof, out, window, finish)
    finally:
        with _exports_lock:
            _exports -= 1
            if _exports == 0:
                sys.setswitchinterval(_export.saved_interval)
        if _w is not None:
            _w.hold_detector(False)


def _export_now(prof, out, window, finish):
    try:
        if finish is not None:
            finish()
        prof.export_chrome_trace(out + ".tmp")
        os.replace(out + ".tmp", out)
        if _client is not None:
            _client.send({"type": "torch_trace", "path": out, "window": window})
    except Exception as e:
        sys.stderr.write(f"perftracker: torch trace export failed: {e!r}\n")
        _torch_failed(window, f"torch trace export failed: {e!r}")


def on_loader_next():
    global _train_tid
    if _off:
        if _profiler is not None:
            _drop_profiler()
        return
    if _train_tid is None:
        _train_tid = threading.get_ident()
    try:
        code = _w.on_loader_next()
        if code:
            _edge(code)
    except Exception as e:
        _turn_off(e)


def on_optimizer_step():
    global _train_tid
    if _off:
        if _profiler is not None:
            _drop_profiler()
        return
    if _train_tid is None:
        _train_tid = threading.get_ident()
    try:
        code = _w.on_optimizer_step()
        if code:
            _edge(code)
    except Exception as e:
        _turn_off(e)


# ---- torch patches (applied when torch's modules are imported) ----

def _patch_dataloader(mod):
    cls = getattr(mod, "_BaseDataLoaderIter", None)
    if cls is None or getattr(cls.__next__, "_perftracker", False):
        return
    orig = cls.__next__

    @functools.wraps(orig)
    def __next__(self):
        on_loader_next()
        return orig(self)

    __next__._perftracker = True
    cls.__next__ = __next__


def _wrap_step(cls):
    step = cls.__dict__.get("step")
    if step is None or getattr(step, "_perftracker", False):
        return

    @functools.wraps(step)
    def wrapped(self, *args, **kwargs):
        # A subclass's step calling super().step() is one optimizer step, not two.
        if getattr(_tls, "in_step", False):
            return step(self, *args, **kwargs)
        _tls.in_step = True
        try:
            return step(self, *args, **kwargs)
        finally:
            _tls.in_step = False
            on_optimizer_step()

    wrapped._perftracker = True
    cls.step = wrapped


def _patch_optimizer(mod):
    opt = getattr(mod, "Optimizer", None)
    if opt is None or getattr(opt, "_perftracker", False):
        return
    opt._perftracker = True
    register = getattr(mod, "register_optimizer_step_post_hook", None)
    if register is not None:  # torch >= 2.0
        register(lambda o, a, k: on_optimizer_step())
        return
    orig_init = opt.__init__

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        # torch 1.13 wraps the class's step for its profiler in __init__; wrap after it. Wrap the
        # class that defines step (a subclass may inherit it).
        for c in type(self).__mro__:
            if "step" in c.__dict__ and c is not opt:
                try:
                    _wrap_step(c)
                except Exception as e:
                    _turn_off(e)
                break

    opt.__init__ = __init__


# torch.distributed's Python-level collectives (whichever the torch version has). DDP's gradient
# all-reduce runs from C++ inside backward() and is not seen here.
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "broadcast", "reduce", "barrier", "all_to_all", "all_to_all_single", "send", "recv", "isend",
               "irecv", "gather", "scatter", "monitored_barrier")


def _caller(torch_dir):
    """(file, line) of the first frame outside torch's own package."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(torch_dir):
        f = f.f_back
    if f is None:
        return "?", 0
    return f.f_code.co_filename, f.f_lineno


def _wrap_collective(name, fn, torch_dir):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        global _last_coll, _coll_count
        if _off or getattr(_tls, "in_coll", False):  # nested: the outermost call is the one
            return fn(*args, **kwargs)
        rec = None
        try:
            _coll_count += 1
            file, line = _caller(torch_dir)
            rec = [name, _coll_count, file, line, time.monotonic(), None]
            _last_coll = rec
        except Exception as e:
            _turn_off(e)
        _tls.in_coll = True
        try:
            return fn(*args, **kwargs)
        finally:
            _tls.in_coll = False
            if rec is not None:
                rec[5] = time.monotonic()

    wrapped._perftracker = True
    return wrapped


def _patch_distributed(mod):
    """Wraps the collectives of torch.distributed.distributed_c10d, and the names torch.distributed
    re-exported from it when that was already imported."""
    torch_dir = os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__))) + os.sep
    pub = sys.modules.get("torch.distributed")
    for name in COLLECTIVES:
        fn = getattr(mod, name, None)
        if fn is None or not callable(fn) or getattr(fn, "_perftracker", False):
            continue
        w = _wrap_collective(name, fn, torch_dir)
        setattr(mod, name, w)
        if pub is not None and getattr(pub, name, None) is fn:
            setattr(pub, name, w)


def last_collective():
    """The last collective called through torch.distributed's Python API, as the stacks reply
    carries it, or None."""
    rec = _last_coll
    if rec is None:
        return None
    op, count, file, line, start, end = tuple(rec)
    return {"op": op, "count": count, "file": file, "line": line, "in_progress": end is None,
            "seconds": round((time.monotonic() if end is None else end) - start, 6)}


def thread_stacks(skip=()):
    """Every Python thread's stack, outermost frame first, the training thread first."""
    frames = sys._current_frames()
    try:
        main = _train_tid if _train_tid is not None else threading.main_thread().ident
        by_ident = {t.ident: t for t in threading.enumerate()}
        out = []
        for ident in sorted(frames, key=lambda i: (i != main, i)):
            if ident in skip:
                continue
            if len(out) >= MAX_STACK_THREADS:
                break
            f = frames[ident]
            stack = []
            dropped = 0
            while f is not None:
                if len(stack) < MAX_STACK_FRAMES:
                    stack.append({"file": f.f_code.co_filename, "line": f.f_lineno, "function": f.f_code.co_name})
                else:
                    dropped += 1  # the innermost frames are kept: that is where a thread waits
                f = f.f_back
            stack.reverse()
            t = by_ident.get(ident)
            native = getattr(t, "native_id", None) if t is not None else None
            entry = {"tid": native if native is not None else ident, "name": t.name if t is not None else "",
                     "main": ident == main, "frames": stack}
            if dropped:
                entry["frames_dropped"] = dropped
            out.append(entry)
        return out
    finally:
        del frames


_TARGETS = {"torch.utils.data.dataloader": _patch_dataloader, "torch.optim.optimizer": _patch_optimizer,
            "torch.distributed.distributed_c10d": _patch_distributed}


class _PostImportFinder:
    """Applies the patches right after torch's modules load (sitecustomize runs before torch)."""

    def find_spec(self, name, path, target=None):
        patch = _TARGETS.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                orig_exec = spec.loader.exec_module

                def exec_module(module, _orig=orig_exec, _patch=patch):
                    _orig(module)
                    try:
                        _patch(module)
                    except Exception as e:
                        _turn_off(e)

                spec.loader.exec_module = exec_module
                return spec
        return None


def _install_patches():
    for name, patch in _TARGETS.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())


# ---- agent client and log ----

class AgentClient:
    """One daemon thread: drains the detector's news, batches iteration times, sends newline-
    delimited JSON to the agent over a non-blocking Unix socket, and reads its commands. Also
    appends every message to PERFTRACKER_WORKER_LOG when set (tests, or running without an agent).
    """

    MAX_OUT = 1 << 20  # bytes waiting for the socket; beyond that, messages are dropped

    def __init__(self, sock_path, log_path, period_s=0.5):
        self.sock_path = sock_path
        self.log_path = log_path
        self.period_s = period_s
        self.sock = None
        self.next_connect = 0.0
        self.out = bytearray()
        self.inbuf = bytearray()
        self.dropped = 0
        self.lock = threading.Lock()
        self.extra = []  # messages from other threads (send())
        self.pending_profile = None  # (command, time received)
        # The window whose collection holds the detector (worker/shift_detector.h): from the
        # window's end until the agent says it uploaded the summary, or HOLD_MAX_S.
        self.held = None  # (window, monotonic time held)
        self.replies = []  # answers to commands, shipped in the same tick
        self.last_iteration = -1  # the last completed iteration index the detector reported
        self.stop = threading.Event()
        who = identity.identity()  # the launcher's environment (torchrun, Slurm, MPI)
        self.ident = {"pid": os.getpid(), "rank": who["rank"], "local_rank": who["local_rank"],
                      "world_size": who["world_size"], "host": who["host"]}
        self.thread = threading.Thread(target=self._run, name="perftracker-agent", daemon=True)

    def start(self):
        self.thread.start()

    def send(self, msg):
        with self.lock:
            if len(self.extra) < 1000:
                self.extra.append(msg)

    def _run(self):
        while not self.stop.wait(self.period_s):
            try:
                self.tick()
            except Exception as e:
                _turn_off(e)
                return

    def tick(self):
        """Drains and ships everything pending; also called once at exit."""
        if self.ident["rank"] is None:
            self.ident["rank"] = _rank()
        if self.ident["world_size"] is None:
            self.ident["world_size"] = _world_size()
        self._start_profile()
        if self.held is not None and time.monotonic() - self.held[1] > self.HOLD_MAX_S:
            self._release(None)
        msgs = self._messages()
        self._log(msgs)
        if self.sock_path:
            self._io(msgs)

    def _log(self, msgs):
        if self.log_path and msgs:
            with open(self.log_path, "a") as f:
                for m in msgs:
                    f.write(json.dumps(m) + "\n")

    def _messages(self):
        news = _w.drain()
        with self.lock:
            msgs, self.extra = self.extra, []
        iters = []
        for n in news:
            if n[0] == "iter":
                iters.append([n[1], n[2], n[3], bool(n[4])])
                self.last_iteration = n[1]
            elif n[0] == "learned":
                msgs.append({"type": "learned", "pattern": n[1]})
            elif n[0] == "relearn":
                msgs.append({"type": "relearn"})
            elif n[0] == "slowdown":
                msgs.append({"type": "trigger", "kind": "slowdown", "iteration": n[1], "mean_ns": n[2],
                             "best_ns": n[3]})
            elif n[0] == "hang":
                msgs.append({"type": "trigger", "kind": "hang", "iteration": n[1], "now_ns": n[2],
                             "mean_ns": n[3]})
            elif n[0] in ("window_done", "window_failed"):
                rec = _pop_window(n[1])
                if n[0] == "window_done" and self.sock is not None:
                    # While armed the window excludes its iterations itself; from its end until
                    # the agent uploaded the summary, the collection's work slows training.
                    self._hold(rec.get("window"))
                m = {"type": "python_trace", "path": n[1] if n[0] == "window_done" else None,
                     "window": rec.get("window"), "torch": bool(rec.get("torch"))}
                if n[0] == "window_failed":
                    m["error"] = f"could not write {n[1]}"
                msgs.append(m)
        if iters:
            msgs.insert(0, {"type": "iterations", "items": iters})
        for m in msgs:
            m.update(self.ident)
        return msgs

    def _io(self, msgs):
        if self.sock is None and time.monotonic() >= self.next_connect:
            self._connect()
        if self.sock is None:
            self.dropped += len(msgs)
            return
        if not self._ship(msgs):
            return
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    self._close()
                    return
                self.inbuf += chunk
                if len(self.inbuf) > self.MAX_OUT:
                    self.inbuf.clear()  # a runaway peer: forget it rather than grow
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close()
            return
        while b"\n" in self.inbuf:
            line, _, rest = bytes(self.inbuf).partition(b"\n")
            self.inbuf = bytearray(rest)
            self._command(line)
        if self.replies and self.sock is not None:
            replies, self.replies = self.replies, []
            for m in replies:
                m.update(self.ident)
            self._log(replies)
            self._ship(replies)

    def _ship(self, msgs):
        """Queues msgs (dropped beyond MAX_OUT) and sends what the socket takes now; False when
        the connection broke."""
        data = b"".join(json.dumps(m, separators=(",", ":")).encode() + b"\n" for m in msgs)
        if len(self.out) + len(data) > self.MAX_OUT:
            self.dropped += len(msgs)
        else:
            self.out += data
        try:
            while self.out:
                n = self.sock.send(self.out)
                del self.out[:n]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close()
            return False
        return True

    def _connect(self):
        self.next_connect = time.monotonic() + 2.0
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(self.sock_path)
        except OSError:
            s.close()
            return
        self.sock = s
        self.out.clear()
        hello = {"type": "hello", "v": 1, "clock_offset_ns": time.time_ns() - time.monotonic_ns(), **self.ident}
        self.out += json.dumps(hello).encode() + b"\n"

    def _close(self):
        self._release(None)  # no agent, no upload to wait for
        try:
            self.sock.close()
        except OSError:
            pass
        self.sock = None
        self.out.clear()
        self.inbuf.clear()
        self.replies = []

    def _start_profile(self):
        """Starts the pending window once the trace file can be named after the rank (a command
        that arrives before torch.distributed is initialized waits, up to 30 s, then uses the pid).
        """
        global _window_out, _window_rec
        if self.pending_profile is None:
            return
        cmd, since = self.pending_profile
        rank = self.ident["rank"]
        if rank is None and not cmd.get("path") and time.monotonic() - since < 30:
            return
        self.pending_profile = None
        tag = f"rank-{rank}" if rank is not None else f"pid-{os.getpid()}"
        out = str(cmd.get("path") or os.path.join(str(cmd.get("dir") or "/tmp"), f"{tag}.python.json"))
        window = cmd.get("window")
        if not isinstance(window, int) or isinstance(window, bool):
            window = None
        rec = {"path": out, "window": window, "torch": False}
        prev = (_window_out, _window_rec)
        _window_out, _window_rec = out, rec  # before the training thread can arm it
        ok = _w.start_window(int(cmd.get("iters", 10)), float(cmd.get("max_s", 20.0)), out,
                             int(cmd.get("start_iter", -1)))
        if ok:
            _windows.append(rec)
        else:
            _window_out, _window_rec = prev  # refused: another window is pending or open
        self.send({"type": "profile_ack", "accepted": bool(ok), "path": out, "window": window})

    def _command(self, line):
        try:
            cmd = json.loads(line)
        except ValueError:
            return
        if not isinstance(cmd, dict):
            return
        if cmd.get("type") == "profile":
            self.pending_profile = (cmd, time.monotonic())
            self._start_profile()
        elif cmd.get("type") == "stop":
            _w.stop_window()
        elif cmd.get("type") == "uploaded":
            self._release(cmd.get("window"))
        elif cmd.get("type") == "stacks":
            self.replies.append(self.stacks_reply(cmd.get("request_id")))

    HOLD_MAX_S = 120.0  # a window's collection never holds the detector longer than this

    def _hold(self, window):
        """torch.profiler's export and the agent's summarizing slow training: the iterations
        from the window's end until its upload say nothing about the job. (Those before the
        window starts do: holding from the command on left the trigger blind for dozens of
        iterations, and its reference late, across a fault that began meanwhile.)"""
        self._release(None)
        _w.hold_detector(True)
        self.held = (window, time.monotonic())

    def _release(self, window):
        if self.held is not None and (window is None or window == self.held[0]):
            self.held = None
            _w.hold_detector(False)

    def stacks_reply(self, request_id):
        return {"type": "stacks", "request_id": request_id, "iteration": self.last_iteration,
                "threads": thread_stacks(skip=(threading.get_ident(),)), "last_collective": last_collective()}


def _pop_window(path):
    """The record of the window whose file is `path` (the oldest such), or {} when unknown."""
    for rec in _windows:
        if rec["path"] == path:
            _windows.remove(rec)
            return rec
    return {}


def _from_env_or_dist(field, getter):
    """FIELD from the launcher's environment (identity.py), else torch.distributed's value once
    initialized (mp.spawn sets no env)."""
    v = identity.identity(hostname="")[field]
    if v is not None:
        return v
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return getattr(dist, getter)()
    except Exception:
        pass
    return None


def _rank():
    return _from_env_or_dist("rank", "get_rank")


def _world_size():
    return _from_env_or_dist("world_size", "get_world_size")


def _env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


_pid = None  # the process the collector was enabled in


def _forked_child():
    """os.fork() child (a DataLoader worker, a user's fork): it is not the rank. The collector
    goes quiet without a word: no agent client (its thread did not survive the fork, and its
    socket is the parent's connection), no exit hook, no windows."""
    global _off, _client
    _off = True
    _client = None
    try:
        if _w is not None:
            _w.disable()
    except Exception:
        pass


# How long the exit hook waits for a window's files (the Python tracer's, torch.profiler's
# export) still being written: a window that ends with the job is still delivered.
EXIT_WAIT_S = 10.0


def _at_exit():
    try:
        if _w is not None and os.getpid() == _pid:
            end = time.monotonic() + EXIT_WAIT_S
            _w.wait_writers(EXIT_WAIT_S)
            while _exports and time.monotonic() < end:
                time.sleep(0.05)
    except Exception:
        pass
    try:
        if _client is not None and not _off and os.getpid() == _pid:
            # The detector's state at the end: the agent logs it (why a slowdown did or did not
            # fire), and so does the worker log.
            _client.send({"type": "stats", **_w.stats()})
            _client.tick()
    except Exception:
        pass


def enable(config=None):
    """Installs the detector, the torch patches and the agent client. Idempotent."""
    global _w, _client
    if _w is not None:
        return not _off
    from perftracker import _worker
    cfg = {}
    for env, key in ENV_CONFIG.items():
        if os.environ.get(env):
            cfg[key] = float(os.environ[env])
    cfg.update(config or {})
    _worker.install(cfg)
    _w = _worker
    _install_patches()
    if _worker.gc_event not in gc.callbacks:
        # A C function: costs one thread-local read per collection unless a window is armed.
        gc.callbacks.append(_worker.gc_event)
    log = os.environ.get("PERFTRACKER_WORKER_LOG", "")
    if log:
        log = log.replace("{pid}", str(os.getpid()))
    _client = AgentClient(identity.agent_socket(os.environ.get("PERFTRACKER_AGENT_SOCKET", "")), log)
    _client.start()
    global _pid
    _pid = os.getpid()
    # Python processes this one starts with the same RANK (multiprocessing spawn workers, a
    # subprocess) inherit this and stay off: only the rank itself reports (sitecustomize.py).
    mine = identity.identity(hostname="")["rank"]
    os.environ[OWNER_ENV] = f"{_pid}:{'' if mine is None else mine}"
    os.register_at_fork(after_in_child=_forked_child)
    import atexit
    atexit.register(_at_exit)
    return True
