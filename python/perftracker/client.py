"""The worker's side of the socket to the node agent (src/worker/protocol.md): one daemon thread
drains the detector's news, batches iteration times, sends newline-delimited JSON over a
non-blocking Unix socket, and reads the agent's commands. Messages are built and commands
dispatched by protocol.py's names.
"""
import json
import math
import os
import socket
import stat
import struct
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from perftracker import config, identity, news, protocol
from perftracker.collectives import CollectiveRing
from perftracker.cuda_memory import CudaMemory
from perftracker.switch import Switch
from perftracker.window import WindowState

Message = Dict[str, Any]


class AgentClient:
    """One daemon thread: drains the detector's news, batches iteration times, sends newline-
    delimited JSON to the agent over a non-blocking Unix socket, and reads its commands. Also
    appends every message to PERFTRACKER_WORKER_LOG when set (tests, or running without an agent).

    What it works with comes from the collector (hooks.py): the SWITCH (_worker, read at each use:
    tests replace it; turn_off), the WINDOWS it starts and whose ends it reports, the RING of
    collectives it dumps, and for a stacks reply the training thread's id (TRAIN_TID, a getter:
    it is known at the first training event) and LAST_COLLECTIVE.
    """

    MAX_OUT = config.MAX_OUT  # bytes waiting for the socket; beyond that, messages are dropped
    HOLD_MAX_S = config.HOLD_MAX_S  # a window's collection never holds the detector longer

    def __init__(self, switch: Switch, windows: WindowState, ring: CollectiveRing, sock_path: str,
                 log_path: str, period_s: float = config.CLIENT_PERIOD_S, *,
                 train_tid: Callable[[], Optional[int]],
                 last_collective: Callable[[], Optional[Message]]) -> None:
        self._switch = switch
        self._windows = windows
        self._ring = ring
        self._train_tid = train_tid
        self._last_collective = last_collective
        self.sock_path = sock_path
        self.log_path = log_path
        self.period_s = period_s
        self.sock: Optional[socket.socket] = None
        self.next_connect = 0.0
        self.out = bytearray()
        self.inbuf = bytearray()
        self.dropped = 0
        self.lock = threading.Lock()
        # One tick at a time: the exit hook ticks on the training thread while the client thread
        # may be in its own tick, and socket.send() exports `out` without the GIL (a resize of it
        # from the other thread raised BufferError and turned the collector off at exit).
        self.tick_lock = threading.Lock()
        self.extra: List[Message] = []  # messages from other threads (send())
        self.pending_profile: Optional[Tuple[Message, float]] = None  # (command, time received)
        # The window whose collection holds the detector (worker/shift_detector.h): from the
        # window's end until the agent says it uploaded the summary, or HOLD_MAX_S.
        self.held: Optional[Tuple[Any, float]] = None  # (window, monotonic time held)
        self.replies: List[Message] = []  # answers to commands, shipped in the same tick
        self.last_iteration = -1  # the last completed iteration index the detector reported
        self.cuda_memory = CudaMemory()  # the allocator's figures, with each iterations message
        self.refused_profile = False  # a profile command was refused (said once on stderr)
        self.stop = threading.Event()
        # Set by send(): another thread's message (a window's torch trace written, a reply) goes
        # at once rather than at the next period's tick, up to CLIENT_PERIOD_S later: the agent
        # summarizes a window when every rank's traces are in, so the slowest rank's wait was
        # the window's.
        self.wake = threading.Event()
        who = identity.identity()  # the launcher's environment (torchrun, Slurm, MPI)
        self.ident = {"pid": os.getpid(), "rank": who["rank"], "local_rank": who["local_rank"],
                      "world_size": who["world_size"], "host": who["host"],
                      "attempt": who["attempt"]}
        self.thread = threading.Thread(target=self._run, name="perftracker-agent", daemon=True)
        # The agent's commands (protocol.AGENT_TO_WORKER), by type.
        self.handlers: Dict[str, Callable[[Message], None]] = {
            protocol.PROFILE.name: self._on_profile,
            protocol.STOP.name: self._on_stop,
            protocol.UPLOADED.name: self._on_uploaded,
            protocol.STACKS_REQUEST.name: self._on_stacks,
        }

    @property
    def _w(self) -> Any:
        return self._switch.w

    def start(self) -> None:
        self.thread.start()

    def send(self, msg: Message) -> None:
        """Queues MSG and ticks at once (any thread); dropped beyond MAX_EXTRA_MESSAGES."""
        with self.lock:
            if len(self.extra) < config.MAX_EXTRA_MESSAGES:
                self.extra.append(msg)
        self.wake.set()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.wake.wait(self.period_s)
            self.wake.clear()
            if self.stop.is_set():
                return
            try:
                self.tick()
            except Exception as e:
                self._switch.turn_off(e)
                return

    def tick(self, timeout_s: float = -1) -> None:
        """Drains and ships everything pending; also called once at exit (then with a TIMEOUT_S:
        a tick never blocks for long, and one that cannot start in time is skipped)."""
        if not self.tick_lock.acquire(timeout=timeout_s):
            return
        try:
            self._tick()
        finally:
            self.tick_lock.release()

    def _tick(self) -> None:
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

    def _log(self, msgs: List[Message]) -> None:
        if self.log_path and msgs:
            with open(self.log_path, "a") as f:
                for m in msgs:
                    f.write(json.dumps(m) + "\n")

    # ---- the detector's news -> messages ----

    def _messages(self) -> List[Message]:
        items = [news.parse(raw) for raw in self._w.drain()]
        with self.lock:
            msgs, self.extra = self.extra, []
        iters = []
        for n in items:
            if isinstance(n, news.Iteration):
                iters.append([n.index, n.start_ns, n.end_ns, bool(n.clean)])
                self.last_iteration = n.index
            elif isinstance(n, news.WindowEnd):
                msgs.append(self._window_message(n))
            else:
                m = _news_message(n)
                if m is not None:
                    msgs.append(m)
        if iters:
            cuda = self.cuda_memory.read()
            extra = {"cuda": cuda} if cuda is not None else {}
            msgs.insert(0, protocol.make(protocol.ITERATIONS, items=iters, **extra))
        for m in msgs:
            m.update(self.ident)
        return msgs

    def _window_message(self, end: news.WindowEnd) -> Message:
        path = end.path
        rec = self._windows.pop(path)
        if end.done and self.sock is not None:
            # While armed the window excludes its iterations itself; from its end until the
            # agent uploaded the summary, the collection's work slows training.
            self._hold(rec.get("window"))
        m = protocol.make(protocol.PYTHON_TRACE, path=path if end.done else None,
                          window=rec.get("window"), torch=bool(rec.get("torch")))
        if not end.done:
            m["error"] = f"could not write {path}"
        return m

    # ---- the socket ----

    def _io(self, msgs: List[Message]) -> None:
        if self.sock is None and time.monotonic() >= self.next_connect:
            self._connect()
        if self.sock is None:
            self.dropped += len(msgs)
            return
        if not self._ship(msgs):
            return
        try:
            while True:
                chunk = self.sock.recv(config.RECV_CHUNK)
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

    def _ship(self, msgs: List[Message]) -> bool:
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

    def _connect(self) -> None:
        self.next_connect = time.monotonic() + config.RECONNECT_S
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(self.sock_path)
        except OSError:
            s.close()
            return
        why = _foreign_agent(s, self.sock_path)
        if why is not None:
            # Whoever answers there is not this user's agent: nothing goes to it, ever again.
            s.close()
            self.sock_path = ""
            self._switch.turn_off(PermissionError(why))
            return
        self.sock = s
        self.out.clear()
        hello = {**protocol.make(protocol.HELLO, v=protocol.VERSION,
                                 clock_offset_ns=time.time_ns() - time.monotonic_ns()), **self.ident}
        self.out += json.dumps(hello).encode() + b"\n"

    def _close(self) -> None:
        self._release(None)  # no agent, no upload to wait for
        try:
            self.sock.close()
        except OSError:
            pass
        self.sock = None
        self.out.clear()
        self.inbuf.clear()
        self.replies = []

    # ---- the agent's commands ----

    def _command(self, line: bytes) -> None:
        try:
            cmd = json.loads(line)
        except ValueError:
            return
        if not isinstance(cmd, dict):
            return
        kind = cmd.get("type")
        handler = self.handlers.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(cmd)

    def _on_profile(self, cmd: Message) -> None:
        self.pending_profile = (cmd, time.monotonic())
        self._start_profile()
        # A window (a slowdown, `perftracker trigger`): the ring of collectives as it stands, a
        # fixed-size copy (torch's own dump, with its stacks, is kept for a hang and the exit).
        self._ring.dump(with_torch=False)

    def _on_stop(self, cmd: Message) -> None:
        self._w.stop_window()

    def _on_uploaded(self, cmd: Message) -> None:
        self._release(cmd.get("window"))

    def _on_stacks(self, cmd: Message) -> None:
        self.replies.append(self.stacks_reply(cmd.get("request_id")))
        # The job hangs: each rank's collectives, for the sequence diagnosis.
        self._ring.dump(with_torch=True)

    def _start_profile(self) -> None:
        """Starts the pending window once the trace file can be named after the rank (a command
        that arrives before torch.distributed is initialized waits, up to RANK_WAIT_S, then uses
        the pid)."""
        if self.pending_profile is None:
            return
        cmd, since = self.pending_profile
        rank = self.ident["rank"]
        if rank is None and not cmd.get("path") and time.monotonic() - since < config.RANK_WAIT_S:
            return
        self.pending_profile = None
        tag = f"rank-{rank}" if rank is not None else f"pid-{os.getpid()}"
        out = str(cmd.get("path") or os.path.join(str(cmd.get("dir") or config.DEFAULT_TRACE_DIR),
                                                  f"{tag}.python.json"))
        window = cmd.get("window")
        if not isinstance(window, int) or isinstance(window, bool):
            window = None
        iters = _bounded(cmd.get("iters", config.WINDOW_ITERATIONS), config.WINDOW_MOST_ITERATIONS,
                         integer=True)
        max_s = _bounded(cmd.get("max_s", config.WINDOW_MAX_S), config.WINDOW_MOST_S)
        start_iter = cmd.get("start_iter", -1)
        if not isinstance(start_iter, int) or isinstance(start_iter, bool):
            start_iter = -1
        why = None
        if iters is None or max_s is None:
            why = (f"iters {cmd.get('iters')!r} / max_s {cmd.get('max_s')!r} beyond "
                   f"{config.WINDOW_MOST_ITERATIONS} / {config.WINDOW_MOST_S}")
        elif self.sock_path:
            why = _outside_trace_dir(out, self.sock_path)
        ok = False
        if why is None:
            memory_ranks = cmd.get("memory_ranks")
            memory = (rank is not None and isinstance(memory_ranks, list)
                      and len(memory_ranks) <= config.WINDOW_MOST_MEMORY_RANKS
                      and rank in memory_ranks)
            ok = self._windows.start(out, window, int(iters), float(max_s), start_iter,
                                     cmd.get("shapes") is True, memory)
        elif not self.refused_profile:
            self.refused_profile = True  # said once: the agent hears of each in profile_ack
            sys.stderr.write(f"perftracker: profile command refused: {why}\n")
        self.send(protocol.make(protocol.PROFILE_ACK, accepted=bool(ok), path=out, window=window))

    def _hold(self, window: Any) -> None:
        """torch.profiler's export and the agent's summarizing slow training: the iterations
        from the window's end until its upload say nothing about the job. (Those before the
        window starts do: holding from the command on left the trigger blind for dozens of
        iterations, and its reference late, across a fault that began meanwhile.)"""
        self._release(None)
        self._w.hold_detector(True)
        self.held = (window, time.monotonic())

    def _release(self, window: Any) -> None:
        if self.held is not None and (window is None or window == self.held[0]):
            self.held = None
            self._w.hold_detector(False)

    def stacks_reply(self, request_id: Any) -> Message:
        return protocol.make(protocol.STACKS_REPLY, request_id=request_id,
                             iteration=self.last_iteration,
                             threads=thread_stacks(self._train_tid(), skip=(threading.get_ident(),)),
                             last_collective=self._last_collective())


def _foreign_agent(s: socket.socket, sock_path: str) -> Optional[str]:
    """Why the process serving SOCK_PATH is not this user's agent (SO_PEERCRED: its uid is
    neither this process's nor root's), or None when it is."""
    try:
        cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", cred)
    except (OSError, struct.error) as e:
        return f"cannot tell who serves the agent socket {sock_path}: {e}"
    if uid not in (os.geteuid(), 0):
        return (f"the agent socket {sock_path} is served by uid {uid} (pid {pid}), not by this "
                f"user (uid {os.geteuid()}) or root")
    return None


def _trusted(st: os.stat_result) -> bool:
    """Made by this user or root."""
    return st.st_uid in (os.geteuid(), 0)


def _trace_root(sock_path: str) -> Optional[str]:
    """The folder the agent at SOCK_PATH has its workers write to: what the link next to its
    socket names (made by this user or root, in the agent's private folder), else the socket's
    own folder when it is this user's (or root's) and nobody else may write there."""
    link = sock_path + config.TRACE_DIR_LINK_SUFFIX
    try:
        st = os.lstat(link)
        if stat.S_ISLNK(st.st_mode) and _trusted(st):
            return os.path.realpath(link)
    except OSError:
        pass
    folder = os.path.dirname(os.path.abspath(sock_path))
    try:
        st = os.stat(folder)
    except OSError:
        return None
    if _trusted(st) and not st.st_mode & 0o022:
        return os.path.realpath(folder)
    return None


def _outside_trace_dir(out: str, sock_path: str) -> Optional[str]:
    """Why OUT, a trace path an agent's command names, is not one to write: it must lie in the
    agent's trace folder (_trace_root) once links are resolved. None when it does."""
    root = _trace_root(sock_path)
    if root is None:
        return f"no trace folder of this user's next to the agent socket {sock_path}"
    name = os.path.basename(out)
    parent = os.path.realpath(os.path.dirname(os.path.abspath(out)))
    if name in ("", ".", "..") or (parent != root and not parent.startswith(root.rstrip("/") + "/")):
        return f"{out} is outside the agent's trace folder {root}"
    return None


def _bounded(value: Any, most: float, integer: bool = False) -> Optional[float]:
    """VALUE when it is a number in (0, MOST] (a whole one if INTEGER), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or not 0 < value <= most:
        return None
    if integer and value != int(value):
        return None
    return value


def _news_message(n: Optional[news.News]) -> Optional[Message]:
    """The message for one item of _worker.drain() other than iterations and window ends (None:
    a kind this version does not read)."""
    if isinstance(n, news.Learned):
        return protocol.make(protocol.LEARNED, pattern=n.pattern)
    if isinstance(n, news.Relearn):
        return protocol.make(protocol.RELEARN)
    if isinstance(n, news.Slowdown):
        return protocol.make(protocol.TRIGGER, kind="slowdown", iteration=n.index,
                             mean_ns=n.mean_ns, best_ns=n.best_ns)
    if isinstance(n, news.Hang):
        return protocol.make(protocol.TRIGGER, kind="hang", iteration=n.index, now_ns=n.now_ns,
                             mean_ns=n.mean_ns)
    return None


def thread_stacks(train_tid: Optional[int] = None, skip: Iterable[int] = ()) -> List[Message]:
    """Every Python thread's stack, outermost frame first, the training thread (TRAIN_TID, else
    the main thread) first."""
    frames = sys._current_frames()
    try:
        main = train_tid if train_tid is not None else threading.main_thread().ident
        by_ident = {t.ident: t for t in threading.enumerate()}
        out = []
        for ident in sorted(frames, key=lambda i: (i != main, i)):
            if ident in skip:
                continue
            if len(out) >= config.MAX_STACK_THREADS:
                break
            out.append(_thread_entry(frames[ident], by_ident.get(ident), ident, main))
        return out
    finally:
        del frames


def _thread_entry(f: Any, t: Optional[threading.Thread], ident: int, main: Optional[int]) -> Message:
    """One thread of a stacks reply (protocol.STACK_THREAD_FIELDS)."""
    stack = []
    dropped = 0
    while f is not None:
        if len(stack) < config.MAX_STACK_FRAMES:
            stack.append({"file": f.f_code.co_filename, "line": f.f_lineno, "function": f.f_code.co_name})
        else:
            dropped += 1  # the innermost frames are kept: that is where a thread waits
        f = f.f_back
    stack.reverse()
    native = getattr(t, "native_id", None) if t is not None else None
    entry = {"tid": native if native is not None else ident, "name": t.name if t is not None else "",
             "main": ident == main, "frames": stack}
    if dropped:
        entry["frames_dropped"] = dropped
    return entry


def _from_env_or_dist(field: str, getter: str) -> Optional[int]:
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


def _rank() -> Optional[int]:
    return _from_env_or_dist("rank", "get_rank")


def _world_size() -> Optional[int]:
    return _from_env_or_dist("world_size", "get_world_size")
