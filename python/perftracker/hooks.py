"""Feeds perftracker._worker from torch and talks to the node agent (see src/worker/protocol.md).

Rules (the collector must never harm training):
  * the training thread only calls the C++ fast entry points; messages, files and the socket are
    handled by one daemon thread;
  * the socket is non-blocking; when the agent is absent or slow, messages are dropped and the
    connection is retried now and then;
  * any internal error turns the collector off and prints one line to stderr.

This module is the entry point: enable(), the training thread's events and the collector's state
(one RankMonitor, the in-worker collector). The parts: patches.py (torch), window.py (profiling
windows), client.py (the agent's socket), protocol.py (the messages), config.py (the numbers). The
RankMonitor hands each part what it works with (the switch.py Switch: _worker and on/off; the
windows, the ring, callables), never itself: no part imports this module (tests/test_package.py).
"""
import gc
import os
import threading
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional

from perftracker import config, identity, protocol
from perftracker.client import AgentClient, thread_stacks as _thread_stacks
from perftracker.config import (ENV_CONFIG, EXIT_WAIT_S, EXPORT_SWITCH_INTERVAL_S,
                                MAX_STACK_FRAMES, MAX_STACK_THREADS, OWNER_ENV)
from perftracker.oom import OomSnapshot
from perftracker.patches import COLLECTIVES, TorchPatches
from perftracker.switch import Switch
from perftracker.window import WindowState

# What other code uses from here (sitecustomize.py, tests, bench), and the names the single-module
# collector had (the numbers now live in config.py, the collectives in patches.py).
__all__ = ["enable", "on_loader_next", "on_optimizer_step", "on_marker", "is_helper_of_a_rank", "last_collective",
           "thread_stacks", "RankMonitor", "AgentClient", "OWNER_ENV", "ENV_CONFIG", "COLLECTIVES",
           "EXIT_WAIT_S", "EXPORT_SWITCH_INTERVAL_S", "MAX_STACK_FRAMES", "MAX_STACK_THREADS"]


def is_helper_of_a_rank(environ: Mapping[str, str] = os.environ, pid: Optional[int] = None) -> bool:
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


class RankMonitor:
    """The collector of this process: perftracker._worker once enabled and whether an internal
    error turned it all off (its switch, which every part shares), the agent client, the windows
    and the torch patches."""

    def __init__(self) -> None:
        self.switch = Switch()  # w: perftracker._worker once enabled; off: on the first internal error
        self.client: Optional[AgentClient] = None
        self.train_tid: Optional[int] = None  # the thread that calls the loader/optimizer hooks
        self.pid: Optional[int] = None  # the process the collector was enabled in
        self.windows = WindowState(self.switch, self._send)
        self.patches = TorchPatches(self.switch, self.on_loader_next, self.on_optimizer_step)
        self.oom = OomSnapshot()  # the CUDA allocator's state if this rank runs out of GPU memory

    # The switch's two fields, as the collector's own (tests and bench/ read them; tests replace w).
    @property
    def w(self) -> Any:
        return self.switch.w

    @w.setter
    def w(self, w: Any) -> None:
        self.switch.w = w

    @property
    def off(self) -> bool:
        return self.switch.off

    @off.setter
    def off(self, off: bool) -> None:
        self.switch.off = off

    def turn_off(self, err: BaseException) -> None:
        self.switch.turn_off(err)

    def _send(self, msg: Dict[str, Any]) -> None:
        """Queues MSG for the agent; dropped while there is no client (not enabled, a fork)."""
        client = self.client
        if client is not None:
            client.send(msg)

    # ---- events from the training thread ----

    def on_loader_next(self) -> None:
        self._training_event(False)

    def on_optimizer_step(self) -> None:
        self._training_event(True)

    def on_marker(self) -> None:
        """perftracker.step(): the user's end of an iteration."""
        if self.switch.w is None:
            return  # the collector is not on in this process
        self._training_event(None)

    def _training_event(self, step: Optional[bool]) -> None:
        """A DataLoader next() (STEP False), an optimizer step() (True) or a marker (None) on the
        training thread: the C++ detector's edge, if any, opens or closes a window."""
        if self.switch.off:
            if self.windows.holds_torch_trace():
                self.windows.drop_profiler()
            return
        if self.train_tid is None:
            self.train_tid = threading.get_ident()
        try:
            code = (self.switch.w.on_marker() if step is None else
                    self.switch.w.on_optimizer_step() if step else self.switch.w.on_loader_next())
            if code:
                self.windows.edge(code)
            self.oom.tick()
        except Exception as e:
            self.switch.turn_off(e)

    # ---- lifetime ----

    def enable(self, config_: Optional[Dict[str, float]] = None) -> bool:
        if self.w is not None:
            return not self.off
        from perftracker import _worker
        cfg = {}
        for env, key in ENV_CONFIG.items():
            if os.environ.get(env):
                cfg[key] = float(os.environ[env])
        cfg.update(config_ or {})
        _worker.install(cfg)
        self.switch.w = _worker
        self.patches.install()
        if _worker.gc_event not in gc.callbacks:
            # A C function: costs one thread-local read per collection unless a window is armed.
            gc.callbacks.append(_worker.gc_event)
        log = os.environ.get(config.WORKER_LOG_ENV, "")
        if log:
            log = log.replace("{pid}", str(os.getpid()))
        self.client = AgentClient(self.switch, self.windows, self.patches.ring,
                                  identity.agent_socket(os.environ.get(config.AGENT_SOCKET_ENV, "")), log,
                                  train_tid=lambda: self.train_tid,
                                  last_collective=self.patches.last_collective)
        self.client.start()
        self.pid = os.getpid()
        # Python processes this one starts with the same RANK (multiprocessing spawn workers, a
        # subprocess) inherit this and stay off: only the rank itself reports (sitecustomize.py).
        mine = identity.identity(hostname="")["rank"]
        os.environ[OWNER_ENV] = f"{self.pid}:{'' if mine is None else mine}"
        os.register_at_fork(after_in_child=self.forked_child)
        import atexit
        atexit.register(self.at_exit)
        return True

    def forked_child(self) -> None:
        """os.fork() child (a DataLoader worker, a user's fork): it is not the rank. The collector
        goes quiet without a word: no agent client (its thread did not survive the fork, and its
        socket is the parent's connection), no exit hook, no windows."""
        self.switch.off = True
        self.client = None
        try:
            if self.w is not None:
                self.w.disable()
        except Exception:
            pass

    def at_exit(self) -> None:
        try:
            if (self.w is not None and os.getpid() == self.pid
                    and self.windows.holds_torch_trace()
                    and threading.get_ident() == self.train_tid):
                # The job ends inside a window: stop the tracer and torch's profiler here, while
                # the interpreter is whole (torch 2.13 crashes in its teardown with a profiler
                # still running: exit code 139 instead of the job's own). A torch trace already
                # stopped is dropped with it, as the window's Python trace is.
                self.w.stop_window()
                self.windows.drop_profiler()
        except Exception:
            pass
        try:
            if self.w is not None and os.getpid() == self.pid:
                end = time.monotonic() + EXIT_WAIT_S
                self.w.wait_writers(EXIT_WAIT_S)
                while self.windows.exports and time.monotonic() < end:
                    time.sleep(config.EXIT_POLL_S)
        except Exception:
            pass
        try:
            if self.w is not None and not self.off and os.getpid() == self.pid:
                # Every rank's last collectives, for the sequence diagnosis of how the job ended
                # (a rank that raised, or its peers after a crash, still get here).
                self.patches.ring.dump(with_torch=True)
        except Exception:
            pass
        try:
            if self.client is not None and not self.off and os.getpid() == self.pid:
                # The detector's state at the end: the agent logs it (why a slowdown did or did
                # not fire), and so does the worker log.
                self.client.send(protocol.make(protocol.STATS, **self.w.stats()))
                self.client.tick(timeout_s=EXIT_WAIT_S)
        except Exception:
            pass


_collector = RankMonitor()

# The training thread's events (the torch patches call the same methods).
on_loader_next = _collector.on_loader_next
on_optimizer_step = _collector.on_optimizer_step
on_marker = _collector.on_marker


def enable(config: Optional[Dict[str, float]] = None) -> bool:
    """Installs the detector, the torch patches and the agent client. Idempotent; True if on."""
    return _collector.enable(config)


def last_collective() -> Optional[Dict[str, Any]]:
    """The last collective called through torch.distributed's Python API, as the stacks reply
    carries it, or None."""
    return _collector.patches.last_collective()


def thread_stacks(skip: Iterable[int] = ()) -> List[Dict[str, Any]]:
    """Every Python thread's stack, outermost frame first, the training thread first."""
    return _thread_stacks(_collector.train_tid, skip)


def _turn_off(err: BaseException) -> None:
    _collector.turn_off(err)


def _patch_distributed(mod: Any) -> None:
    _collector.patches.patch_distributed(mod)
