"""The in-worker collector (perftracker._worker + python/perftracker) on a real torch DDP job:
it learns the iteration, counts it right, stays quiet on a clean run, fires on a straggler,
profiles a window when the agent asks, and never changes the job's result when the agent is
missing or dies."""
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

BUILD = os.path.dirname(os.path.abspath(ptest.BIN))
PYDIR = os.path.join(BUILD, "python")
# Every detector number is the default: learning takes M iterations, then the slowdown trigger
# skips 10 iterations of warm-up and measures its reference on the next 50 (worker/
# shift_detector.h), so the straggler starts at iteration 100 (90 after learning).
ITERS = 160
M = 10  # learn_repeats: iterations before the sequence is adopted (not reported)
FAULT_AT = 100
# Every step of the clean and the straggler jobs also waits 30 ms (as a GPU-bound step waits for
# its kernels): a step lasts ~40 ms on torch 2.13, as a bare step did on Debian's 1.13, which
# these tests were tuned for, and its time is quiet on shared cores. Without the wait a 2.13 step
# lasts 3-8 ms: the trigger's 20-step median spans ~0.1 s, and any other process here that takes
# a core that long moves it (under load the clean run fired in 2 of 9 runs, 1 of 9 with the wait,
# where the detector measured its noise at +5-15% instead of +8-140%). The straggler costs about
# half a step (FAULT_MS).
STEP_SLEEP_MS = 30
FAULT_MS = 20


def built():
    return os.path.isdir(os.path.join(PYDIR, "perftracker")) and \
        glob.glob(os.path.join(PYDIR, "perftracker", "_worker*.so"))


def env_with(**kw):
    env = dict(os.environ)
    for k in [k for k in env if k.startswith("PERFTRACKER_")]:
        if k != "PERFTRACKER_BIN":
            del env[k]
    env["PYTHONPATH"] = os.pathsep.join([PYDIR, os.path.join(ptest.SOURCE, "python")])
    env.update(kw)
    return env


def window_nodes(path):
    """A Python window file (perftracker.python_window/1) and its nodes by call-stack path:
    {(outermost name, ..., name): [parent, name, gc, count, total_ns, self_ns, min_ns, max_ns,
    sum_sq, hist_offset, hist, cells]}; cells are [iteration, calls, inclusive_ns, self_ns]."""
    with open(path) as f:
        doc = json.load(f)
    names, paths, out = doc["names"], [(), ("<other>",)], {}
    for i, n in enumerate(doc["nodes"]):
        if i < 2:
            continue
        paths.append(paths[n[0]] + (names[n[1]],))
        out[paths[i]] = n
    return doc, out


def train(env, *args, timeout=120):
    cmd = [ptest.TORCH_PYTHON, os.path.join(ptest.SOURCE, "examples", "train_ddp.py"), "--nproc", "2",
           "--iters", str(ITERS), "--step-sleep-ms", str(STEP_SLEEP_MS), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def read_logs(pattern):
    """Per worker process (rank) log: (messages, iteration items)."""
    out = {}
    for path in glob.glob(pattern):
        with open(path) as f:
            msgs = [json.loads(line) for line in f]
        iters = [i for m in msgs if m["type"] == "iterations" for i in m["items"]]
        if iters:  # the launcher process sees no iterations
            out[msgs[-1]["rank"] if msgs[-1]["rank"] is not None else path] = (msgs, iters)
    return out


class FakeAgent(threading.Thread):
    """Accepts workers, asks each for a profiling window, then dies mid-run."""

    def __init__(self, path, trace_dir, die_after_s, die_after_windows=2):
        super().__init__(daemon=True)
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(8)
        self.srv.settimeout(0.2)
        self.trace_dir = trace_dir
        self.die_after_s = die_after_s
        self.die_after_windows = die_after_windows
        self.received = []
        self.conns = []

    def run(self):
        import time
        end = time.monotonic() + self.die_after_s
        while time.monotonic() < end and \
                sum(m["type"] == "python_trace" for m in self.received) < self.die_after_windows:
            try:
                c, _ = self.srv.accept()
            except socket.timeout:
                pass
            else:
                c.settimeout(0.2)
                cmd = {"type": "profile", "iters": 5, "max_s": 20, "start_iter": 5, "dir": self.trace_dir,
                       "window": 3}
                c.sendall((json.dumps(cmd) + "\n").encode())
                self.conns.append([c, b""])
            for conn in self.conns:
                try:
                    conn[1] += conn[0].recv(65536)
                except (socket.timeout, OSError):
                    continue
                *lines, conn[1] = conn[1].split(b"\n")
                msgs = [json.loads(x) for x in lines if x.strip()]
                self.received += msgs
                for m in msgs:  # as a real agent does once it uploaded the window's summary
                    if m["type"] == "python_trace":
                        conn[0].sendall((json.dumps({"type": "uploaded", "window": m["window"]}) + "\n").encode())
        self.died_ns = time.monotonic_ns()  # CLOCK_MONOTONIC, the workers' clock too
        for c, _ in self.conns:  # the agent dies: connections drop, the socket disappears
            c.close()
        self.srv.close()


class Listener(threading.Thread):
    """An agent socket that only listens: every message any worker sends, in `messages`."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = path
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(8)
        self.srv.settimeout(0.1)
        self.messages = []
        self.done = threading.Event()

    def run(self):
        conns = []
        while not self.done.is_set():
            try:
                c, _ = self.srv.accept()
                c.settimeout(0.05)
                conns.append([c, b""])
            except socket.timeout:
                pass
            for conn in conns:
                try:
                    data = conn[0].recv(65536)
                except (socket.timeout, OSError):
                    continue
                conn[1] += data
                *lines, conn[1] = conn[1].split(b"\n")
                self.messages += [json.loads(x) for x in lines if x.strip()]
        for c, _ in conns:
            c.close()
        self.srv.close()

    def stop(self):
        self.done.set()
        self.join(5)


class StacksAgent(threading.Thread):
    """Accepts workers and, on request(), asks each for its stacks."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(8)
        self.srv.settimeout(0.1)
        self.received = []
        self.conns = []
        self.asks = []
        self.stop = False

    def request(self, request_id):
        self.asks.append(request_id)

    def run(self):
        while not self.stop:
            try:
                c, _ = self.srv.accept()
                c.settimeout(0.05)
                self.conns.append([c, b""])
            except socket.timeout:
                pass
            while self.asks:
                line = (json.dumps({"type": "stacks", "request_id": self.asks.pop(0)}) + "\n").encode()
                for c, _ in self.conns:
                    try:
                        c.sendall(line)
                    except OSError:
                        pass
            for conn in self.conns:
                try:
                    conn[1] += conn[0].recv(1 << 20)
                except (socket.timeout, OSError):
                    continue
                *lines, conn[1] = conn[1].split(b"\n")
                self.received += [json.loads(x) for x in lines if x.strip()]
        for c, _ in self.conns:
            c.close()
        self.srv.close()


# One process, a gloo group of world size 1: collectives through the wrappers, their results
# and errors, a stacks request while the main thread waits at a known line, the wrapper's cost.
COLLECTIVE_SCRIPT = """
import json, os, sys, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
out = {}
t = torch.arange(4.0)
dist.all_reduce(t)  # ALL_REDUCE_LINE
out["all_reduce"] = t.tolist()
g = [torch.zeros(4)]
dist.all_gather(g, t * 2)
out["all_gather"] = g[0].tolist()
b = torch.ones(3)
dist.broadcast(b, 0)
out["broadcast"] = b.tolist()
dist.barrier()
try:
    dist.all_reduce([1, 2])
except Exception as e:
    out["error"] = [type(e).__name__, str(e)]
out["name"] = [dist.all_reduce.__name__, dist.all_reduce.__module__, dist.all_reduce.__doc__ is not None]
out["wrapped"] = bool(getattr(dist.all_reduce, "_perftracker", False))
out["same_in_c10d"] = dist.all_reduce is dist.distributed_c10d.all_reduce
if out["wrapped"]:
    from perftracker import hooks
    w = dist.all_reduce
    hooks._patch_distributed(dist.distributed_c10d)  # idempotent
    out["idempotent"] = dist.all_reduce is w and dist.distributed_c10d.all_reduce is w
    x = torch.zeros(1)
    raw = w.__wrapped__
    for f in (raw, w):
        f(x)
    n = 3000
    t0 = time.perf_counter()
    for _ in range(n):
        raw(x)
    t1 = time.perf_counter()
    for _ in range(n):
        w(x)
    t2 = time.perf_counter()
    out["wrapper_us"] = ((t2 - t1) - (t1 - t0)) / n * 1e6
    out["call_us"] = (t1 - t0) / n * 1e6
    # What the wrapper adds, counted rather than timed: the Python functions it enters and the
    # C functions it calls per collective (a loaded CI machine makes any time bound flaky).
    seen = {"call": 0, "c_call": 0}
    files = set()

    def count(frame, event, arg):
        if event in seen:
            seen[event] += 1
            if event == "call":
                files.add(os.path.basename(frame.f_code.co_filename))

    def calls_of(f, k=50):
        seen.update(call=0, c_call=0)
        files.clear()
        sys.setprofile(count)
        for _ in range(k):
            f(x)
        sys.setprofile(None)
        return {e: c / k for e, c in seen.items()}, set(files)

    (plain, plain_files), (wrapped, wrapped_files) = calls_of(raw), calls_of(w)
    out["wrapper_calls"] = {e: wrapped[e] - plain[e] for e in seen}
    out["wrapper_files"] = sorted(wrapped_files - plain_files)
    dist.all_reduce(t)  # LAST_LINE
print(json.dumps(out), flush=True)


def wait_for_the_agent(flag):
    # One line, and only C calls in it (os.path.exists is Python code: a stack taken inside it
    # would end in genericpath), so the stack ends here whenever it is taken.
    while not os.access(flag, os.F_OK): time.sleep(0.02)  # WAIT_LINE  # noqa: E701


if len(sys.argv) > 2:
    wait_for_the_agent(sys.argv[2])
dist.destroy_process_group()
"""


@unittest.skipUnless(ptest.torch_available(), "needs /usr/bin/python3 with torch")
@unittest.skipUnless(built(), "perftracker._worker not built (build dir python/)")
class Collectives(unittest.TestCase):
    def test_wrappers_keep_results_and_stacks_show_the_script(self):
        import time
        tmp = tempfile.mkdtemp(prefix="pt_coll_")
        script = os.path.join(tmp, "coll.py")
        with open(script, "w") as f:
            f.write(COLLECTIVE_SCRIPT)
        lines = COLLECTIVE_SCRIPT.splitlines()

        def line_of(tag):
            return [i for i, x in enumerate(lines) if tag in x][0] + 1

        def run(env, *extra):
            return subprocess.Popen([ptest.TORCH_PYTHON, script, os.path.join(tmp, "init-%d" % len(extra)), *extra],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        plain = run(env_with())
        out, err = plain.communicate(timeout=60)
        self.assertEqual(plain.returncode, 0, err)
        base = json.loads(out)
        self.assertFalse(base["wrapped"])

        sock = os.path.join(tmp, "agent.sock")
        flag = os.path.join(tmp, "go")
        agent = StacksAgent(sock)
        agent.start()
        p = run(env_with(PERFTRACKER_ENABLE="1", PERFTRACKER_AGENT_SOCKET=sock), flag)
        try:
            got = json.loads(p.stdout.readline())
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not agent.conns:
                time.sleep(0.05)
            agent.request(9)
            reply = None
            while time.monotonic() < deadline and reply is None:
                time.sleep(0.05)
                reply = next((m for m in agent.received if m["type"] == "stacks"), None)
        finally:
            open(flag, "w").close()
            out, err = p.communicate(timeout=30)
            agent.stop = True
            agent.join()
        self.assertEqual(p.returncode, 0, err)
        self.assertNotIn("perftracker", err)
        # The wrappers change nothing: results, errors, names; and they are in place everywhere.
        self.assertTrue(got["wrapped"] and got["same_in_c10d"] and got["idempotent"], got)
        for k in ("all_reduce", "all_gather", "broadcast", "error", "name"):
            self.assertEqual(got[k], base[k], k)
        # Bounded work per call, counted (torch 2.13: 16 Python calls, 24 C calls): the wrapper,
        # its record, the caller lookup, the ring's enter, group and exit (6), and the c10d
        # lookups enter makes (is_initialized, the default group); nothing outside perftracker's
        # patches and the ring, and torch.distributed: no logging, no profiler, no I/O.
        self.assertLessEqual(got["wrapper_calls"]["call"], 20, got)
        self.assertLessEqual(got["wrapper_calls"]["c_call"], 32, got)
        self.assertLessEqual(set(got["wrapper_files"]), {"patches.py", "collectives.py", "distributed_c10d.py",
                                                         "_opaque_base.py"}, got)
        print(f"\ncollective wrapper: {got['wrapper_us']:.2f} us per call, {got['wrapper_calls']} "
              f"(an unwrapped world-size-1 all_reduce: {got['call_us']:.1f} us)", file=sys.stderr)

        self.assertIsNotNone(reply, agent.received)
        self.assertEqual(reply["request_id"], 9)
        self.assertEqual(reply["pid"], p.pid)
        self.assertEqual(reply["iteration"], -1)
        for k in ("rank", "local_rank", "world_size", "host"):
            self.assertIn(k, reply)
        main = [t for t in reply["threads"] if t["main"]]
        self.assertEqual(len(main), 1, reply["threads"])
        self.assertEqual(main[0]["name"], "MainThread")
        self.assertEqual([t["name"] for t in reply["threads"]].count("perftracker-agent"), 0)
        frames = [(os.path.realpath(f["file"]), f["line"], f["function"]) for f in main[0]["frames"]]
        self.assertEqual(frames[-1][0], os.path.realpath(script))
        self.assertEqual(frames[-1][2], "wait_for_the_agent")
        self.assertEqual(frames[-1][1], line_of("WAIT_LINE"))
        self.assertEqual(frames[-2][:2], (os.path.realpath(script), line_of("wait_for_the_agent(sys.argv[2])")))
        lc = reply["last_collective"]
        self.assertEqual((lc["op"], os.path.realpath(lc["file"]), lc["line"], lc["in_progress"]),
                         ("all_reduce", os.path.realpath(script), line_of("LAST_LINE"), False))
        # 5 wrapped calls before the timing (the failing one and the barrier included), 1 + n in
        # it and 50 counted (the unwrapped function is not counted), then the last one.
        self.assertEqual(lc["count"], 5 + 1 + 3000 + 50 + 1)
        self.assertGreaterEqual(lc["seconds"], 0)


@unittest.skipUnless(ptest.torch_available(), "needs /usr/bin/python3 with torch")
@unittest.skipUnless(built(), "perftracker._worker not built (build dir python/)")
class WorkerDetector(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pt_worker_")
        cls.baseline = train(env_with())
        assert cls.baseline.returncode == 0, cls.baseline.stderr[-2000:]

    def test_a_clean_run_learns_counts_and_stays_quiet(self):
        # Timing on a shared machine can be disturbed from outside (another job doubling the
        # iteration time is a real slowdown): a run with a trigger is repeated, twice at most
        # (seen in .ci/run at ecfad4a: two runs in a row fired on a +6% drift of this VM, then
        # three of three alone passed, one on its second run).
        for attempt in range(3):
            triggers = self.clean_once(f"clean{attempt}")
            if not triggers:
                break
        self.assertEqual(triggers, [])

    def clean_once(self, tag):
        log = os.path.join(self.tmp, tag + "-{pid}.jsonl")
        p = train(env_with(PERFTRACKER_ENABLE="1", PERFTRACKER_WORKER_LOG=log,
                           PERFTRACKER_AGENT_SOCKET=os.path.join(self.tmp, "nowhere", "agent.sock")))
        # The agent socket points nowhere: training's result and output are unchanged.
        self.assertEqual(p.returncode, self.baseline.returncode, p.stderr[-2000:])
        self.assertEqual(p.stdout, self.baseline.stdout)
        self.assertNotIn("perftracker", p.stderr)
        logs = read_logs(os.path.join(self.tmp, tag + "-*.jsonl"))
        self.assertEqual(sorted(logs), [0, 1], logs.keys())
        triggers = []
        for rank, (msgs, iters) in logs.items():
            learned = [m for m in msgs if m["type"] == "learned"]
            self.assertEqual([m["pattern"] for m in learned], ["DO"], rank)
            # Numbered by the steps before each (the first after learning follows M of them); the
            # last one never completes (no iteration starts after it).
            self.assertEqual(len(iters), ITERS - M - 1, rank)
            self.assertEqual([i[0] for i in iters], list(range(M, ITERS - 1)))
            self.assertTrue(all(i[2] > i[1] for i in iters))
            triggers += [m for m in msgs if m["type"] == "trigger"]
        return triggers

    def test_b_straggler_fires_and_a_dying_agent_gets_a_window(self):
        for attempt in range(2):  # as in test_a: one repeat when disturbed from outside
            missed = self.straggler_once(f"slow{attempt}")
            if not missed:
                break
        self.assertEqual(missed, [], "ranks without a slowdown trigger after the fault")

    def straggler_once(self, tag):
        # The profiling window (iterations 5-9 after learning) slows those iterations; they feed
        # neither the warm-up nor the reference of the slowdown trigger.
        log = os.path.join(self.tmp, tag + "-{pid}.jsonl")
        sock = os.path.join(self.tmp, tag + ".sock")
        traces = os.path.join(self.tmp, tag + "-traces")
        os.makedirs(traces)
        work, per = ptest.fault_work_for(FAULT_MS)
        print(f"\n{tag}: --fault-work {work} ({per:.2f} ms per matmul)", file=sys.stderr)
        agent = FakeAgent(sock, traces, die_after_s=60.0)
        agent.start()
        p = train(env_with(PERFTRACKER_ENABLE="1", PERFTRACKER_WORKER_LOG=log, PERFTRACKER_AGENT_SOCKET=sock),
                  "--fault", "straggler", "--fault-start", str(FAULT_AT), "--fault-rank", "0",
                  "--fault-work", str(work))
        agent.join()
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual(p.stdout, self.baseline.stdout)
        self.assertNotIn("perftracker", p.stderr)
        logs = read_logs(os.path.join(self.tmp, tag + "-*.jsonl"))
        self.assertEqual(sorted(logs), [0, 1])
        missed = []
        for rank, (msgs, iters) in logs.items():
            trig = [m for m in msgs if m["type"] == "trigger" and m["kind"] == "slowdown"]
            for t in trig:  # the recent median against the reference, above the 3% floor at least
                self.assertGreater(t["mean_ns"], t["best_ns"] * 1.03)
            # DDP keeps the ranks in step, so every rank's detector sees the straggler.
            if not [t for t in trig if t["iteration"] >= FAULT_AT]:
                missed.append(rank)
                stats = [m for m in msgs if m["type"] == "stats"]
                print(f"\n{tag}: rank {rank} missed the slowdown; its triggers: {trig}; detector at "
                      f"exit: {stats}", file=sys.stderr)
            # The agent died mid-run and training went on: iterations ended after its death.
            self.assertGreater(iters[-1][2], agent.died_ns, rank)
            self.assertEqual(len(iters), ITERS - M - 1, rank)
        # The agent heard from both workers before it died and asked each for a window.
        self.assertTrue({m["pid"] for m in agent.received if m["type"] == "iterations"}, agent.received[:3])
        acks = [m for m in agent.received if m["type"] == "profile_ack"]
        self.assertTrue(acks and all(a["accepted"] and a["window"] == 3 for a in acks), agent.received[-5:])
        # python_trace echoes the window and says a torch trace follows; the torch trace (in the
        # worker's log: the agent may be gone by then) names the window too.
        for rank, (msgs, _) in logs.items():
            pt = [m for m in msgs if m["type"] == "python_trace"]
            self.assertEqual([(m["window"], m["torch"]) for m in pt], [(3, True)], rank)
            tt = [m for m in msgs if m["type"] == "torch_trace"]
            self.assertEqual([(m["window"], m["path"]) for m in tt], [(3, pt[0]["path"] + ".torch.json")], rank)
        files = sorted(glob.glob(os.path.join(traces, "rank-*.python.json")))
        self.assertEqual([os.path.basename(f) for f in files], ["rank-0.python.json", "rank-1.python.json"])
        d = ptest.analyze(files)
        self.assertIn("2 ranks", d["_text"].replace("(world size 2)", ""), d["_text"])
        self.assertTrue(glob.glob(os.path.join(traces, "rank-*.python.json.torch.json")))
        return missed

    def test_c_hang_is_reported_while_the_job_hangs(self):
        import signal
        import time
        log = os.path.join(self.tmp, "hang-{pid}.jsonl")
        sock = os.path.join(self.tmp, "hang.sock")
        agent = StacksAgent(sock)
        agent.start()
        # --log-every 1: rank 1 waits in the script's explicit dist.all_reduce of the loss.
        cmd = [ptest.TORCH_PYTHON, os.path.join(ptest.SOURCE, "examples", "train_ddp.py"), "--nproc", "2",
               "--iters", str(ITERS), "--fault", "hang", "--fault-start", "30", "--fault-rank", "0",
               "--log-every", "1"]
        p = subprocess.Popen(cmd, env=env_with(PERFTRACKER_ENABLE="1", PERFTRACKER_WORKER_LOG=log,
                                               PERFTRACKER_AGENT_SOCKET=sock),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        hung = {}
        stacks = {}
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(hung) < 2:
                time.sleep(0.5)
                for rank, (msgs, _) in read_logs(os.path.join(self.tmp, "hang-*.jsonl")).items():
                    h = [m for m in msgs if m["type"] == "trigger" and m["kind"] == "hang"]
                    # A loaded machine can stall one iteration past 5x the mean: look for the hang
                    # at the iteration where rank 0 blocks.
                    h = [m for m in h if m["iteration"] == 30]
                    if h:
                        hung[rank] = h[0]
            # While the job hangs, the agent asks every worker for its stacks.
            agent.request(1)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(stacks) < 2:
                time.sleep(0.2)
                # The launcher process (mp.spawn's parent, rank None) answers too.
                stacks = {m["rank"]: m for m in agent.received
                          if m["type"] == "stacks" and m["request_id"] == 1 and m["rank"] is not None}
        finally:
            os.killpg(p.pid, signal.SIGKILL)  # the job's own process group (start_new_session)
            p.wait()
            agent.stop = True
            agent.join()
        # Both ranks stop: rank 0 sleeps, rank 1 waits in the all-reduce.
        self.assertEqual(sorted(hung), [0, 1], hung)
        for h in hung.values():
            self.assertGreater(h["now_ns"], 0)
        self.assertEqual(sorted(stacks), [0, 1], agent.received[-4:])
        script = os.path.join(ptest.SOURCE, "examples", "train_ddp.py")
        for rank, s in stacks.items():
            self.assertEqual(s["iteration"], 29, rank)  # the last one that completed
            main = [t for t in s["threads"] if t["main"]]
            self.assertEqual(len(main), 1, s["threads"])
            self.assertNotIn("perftracker-agent", [t["name"] for t in s["threads"]])
            fns = [(os.path.realpath(f["file"]), f["function"]) for f in main[0]["frames"]]
            self.assertIn((script, "train_step"), fns, rank)
            self.assertEqual(fns[0][1], "<module>")  # outermost first
        # Rank 0 blocks in hang_forever(); rank 1 waits in the all-reduce the script called.
        f0 = stacks[0]["threads"][[t["main"] for t in stacks[0]["threads"]].index(True)]["frames"]
        self.assertEqual(f0[-1]["function"], "hang_forever", f0[-3:])
        lc0, lc1 = stacks[0]["last_collective"], stacks[1]["last_collective"]
        self.assertFalse(lc0["in_progress"])
        self.assertEqual(lc1["op"], "all_reduce")
        self.assertTrue(lc1["in_progress"])
        self.assertEqual(lc1["count"], lc0["count"] + 1)
        self.assertEqual(os.path.realpath(lc1["file"]), script)
        with open(script) as f:
            self.assertIn("dist.all_reduce(", f.read().splitlines()[lc1["line"] - 1])
        self.assertGreater(lc1["seconds"], 0.5)


@unittest.skipUnless(built(), "perftracker._worker not built (build dir python/)")
class WorkerModule(unittest.TestCase):
    """The extension alone, without torch: tracer window file, containment."""

    def run_py(self, code):
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", code], capture_output=True, text=True, env=env_with(), timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def test_a_job_that_ends_inside_a_window_exits_cleanly(self):
        # The last iterations of a job are profiled and the process exits with torch.profiler
        # running: the exit hook stops it (torch 2.13 crashed in its teardown, exit code 139) and
        # the Python window is still written.
        out = os.path.join(tempfile.mkdtemp(prefix="pt_exitwin_"), "rank-0.python.json")
        p = self.run_py(f"""
import torch
from perftracker import hooks
hooks.enable()
m = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(800, 32)), batch_size=8)
for i, (x,) in enumerate(dl):
    if i == 35:
        assert hooks._collector.windows.start({out!r}, None, 10, 20.0, -1)
    m(x).sum().backward(); opt.step(); opt.zero_grad()
    if i == 40:
        break
assert hooks._collector.w.stats()["window_armed"]
""")
        self.assertNotIn("Fatal", p.stderr)
        self.assertTrue(os.path.exists(out), p.stderr)

    def test_a_heap_sampling_window_says_where_python_objects_are_kept(self):
        # remember() keeps 1 MiB of floats a step; scratch() makes 20,000 dicts a step and lets
        # them go. The window samples the heap (sample_heap): what is kept is placed at
        # remember(), its callers as the stack, and what was let go is not.
        out = os.path.join(tempfile.mkdtemp(prefix="pt_win_"), "rank-0.python.json")
        self.run_py(f"""
import time
from perftracker import _worker as w
assert w.install({{"window": 5}})
history = []
def remember(step):
    history.append([float(i) for i in range(2 ** 20 // 32)])
def scratch():
    return len([dict(a=i) for i in range(20000)])
def step(it):
    scratch()
    remember(it)
for it in range(40):
    w.on_loader_next()
    if it == 20:
        assert w.start_window(10, 30.0, {out!r}, -1, True)
    step(it)
    w.on_optimizer_step()
for _ in range(100):
    if w.stats()["files_written"]: break
    time.sleep(0.05)
w.uninstall()
""")
        with open(out) as f:
            kept = json.load(f)["kept_memory"]
        self.assertEqual(kept["sample_bytes"], 65536)
        self.assertEqual(kept["dropped"], 0)
        d = ptest.analyze([out])
        memory = d["job"]["memory"]
        self.assertEqual([m["device"] for m in memory], ["cpu"])
        k = memory[0]["kept"][0]
        self.assertRegex(k["function"], r"\(\d+\): remember$")
        self.assertEqual(k["op"], "Python objects")
        self.assertRegex(k["stack"][-1], r"\(\d+\): step$")
        self.assertEqual(k["kept_iterations"], 9)
        self.assertAlmostEqual(k["bytes_per_iteration"] / 2 ** 20, 1, delta=0.35)
        # What was let go is not where memory is kept: not in half the iterations or more, the
        # product's own bar for a place (diagnose/policy.h kKeptMemoryShare). Once in a CI run
        # scratch() was listed as keeping 7 KB in 1 of 9 iterations (0 of 30 runs here): likely
        # a sampled dict that CPython parked in its free list for reuse, which no free the
        # sampler sees ends.
        self.assertFalse([x for x in memory[0]["kept"] if x["function"].endswith("scratch")
                          and x["kept_iterations"] >= 0.5 * x["counted_iterations"]], memory)

    def test_window_writes_an_aggregate_analyze_reads(self):
        out = os.path.join(tempfile.mkdtemp(prefix="pt_win_"), "rank-0.python.json")
        self.run_py(f"""
import time
from perftracker import _worker as w
assert w.install({{"window": 5}})
def leaf(i): return i * i
def work(n): return sum(leaf(i) for i in range(n))
for it in range(30):
    w.on_loader_next()
    if it == 12:
        assert w.start_window(5, 10.0, {out!r})
    work(300)
    w.on_optimizer_step()
for _ in range(100):
    if w.stats()["files_written"]: break
    time.sleep(0.05)
s = w.stats()
assert s["windows_done"] == 1 and s["files_written"] == 1 and not s["window_armed"], s
w.uninstall()
""")
        doc, nodes = window_nodes(out)
        self.assertEqual(doc["schema"], "perftracker.python_window/1")
        self.assertEqual(len(doc["iterations"]), 5)
        # Identity is the call stack: leaf below the generator below sum() below work().
        leaf = [n for path, n in nodes.items() if path[-1].endswith(": leaf")]
        self.assertEqual(len(leaf), 1, list(nodes))
        path = [p for p, n in nodes.items() if n is leaf[0]][0]
        self.assertTrue(path[-4].endswith(": work") and "sum" in path[-3] and "genexpr" in path[-2], path)
        self.assertEqual(leaf[0][3], 5 * 300)  # count
        self.assertEqual([c[1] for c in leaf[0][11]], [300] * 5)  # calls per iteration
        d = ptest.analyze([out])
        self.assertIn("5 iterations", d["_text"])

    def test_no_call_is_lost_at_a_high_call_rate(self):
        # 200,000 calls per iteration (a tokenizer, a metric loop): every one is counted.
        out = os.path.join(tempfile.mkdtemp(prefix="pt_win_"), "rank-0.python.json")
        calls = 200000
        self.run_py(f"""
import time
from perftracker import _worker as w
assert w.install({{}})
def tok(i): return i
def batch(n):
    for i in range(n):
        tok(i)
for it in range(20):
    w.on_loader_next()
    if it == 12:
        assert w.start_window(5, 60.0, {out!r})
    if it >= 12:
        batch({calls})
    w.on_optimizer_step()
for _ in range(200):
    if w.stats()["files_written"]: break
    time.sleep(0.05)
s = w.stats()
assert s["files_written"] == 1 and s["tracer_other_calls"] == 0, s
""")
        doc, nodes = window_nodes(out)
        tok = [n for path, n in nodes.items() if path[-1].endswith(": tok")]
        self.assertEqual(len(tok), 1)
        self.assertEqual(tok[0][3], 5 * calls)
        self.assertEqual([c[1] for c in tok[0][11]], [calls] * 5)
        show = ptest.run(["show", out, "--top", "5"])
        self.assertEqual(show.returncode, 0, show.stderr)
        row = [x for x in show.stdout.splitlines() if ": tok" in x.split("<-")[0]]
        self.assertEqual(len(row), 1, show.stdout)
        self.assertIn(f"{calls}.0", row[0].split())

    def test_window_time_limit_and_fork(self):
        out = os.path.join(tempfile.mkdtemp(prefix="pt_win_"), "w.json")
        p = self.run_py(f"""
import os, time
from perftracker import _worker as w
assert w.install({{}})
def work(n): return sum(i * i for i in range(n))
for it in range(20):
    w.on_loader_next(); w.on_optimizer_step()
assert w.start_window(1000, 0.05, {out!r})
w.on_loader_next()
assert w.stats()["window_armed"]
t0 = time.monotonic()
while time.monotonic() - t0 < 0.3:
    work(100)  # no detector event: the profile callback itself ends the window at max_s
assert not w.stats()["window_armed"], w.stats()
# The window ended inside the profile callback: the next event reports the end (2) once, so that
# torch.profiler stops there.
assert w.on_loader_next() == 2 and w.on_optimizer_step() == 0
for _ in range(100):
    if w.stats()["files_written"]: break
    time.sleep(0.05)
assert w.stats()["files_written"] == 1
pid = os.fork()  # a forked child has the collector off and never deadlocks on its state
if pid == 0:
    ok = w.on_loader_next() == 0 and not w.stats()["installed"]
    os._exit(0 if ok else 3)
_, st = os.waitpid(pid, 0)
assert os.WEXITSTATUS(st) == 0, st
w.uninstall()
print("ok")
""")
        self.assertEqual(p.stdout, "ok\n")
        doc, nodes = window_nodes(out)
        self.assertTrue(any(path[-1].endswith(": work") for path in nodes))

    def test_a_users_profiler_is_back_after_a_window(self):
        out = os.path.join(tempfile.mkdtemp(prefix="pt_win_"), "p.json")
        p = self.run_py(f"""
import sys, time
from perftracker import _worker as w
assert w.install({{}})
calls = []
def mine(frame, event, arg):
    calls.append(event)
sys.setprofile(mine)
for it in range(20):
    w.on_loader_next(); w.on_optimizer_step()
assert w.start_window(2, 10.0, {out!r})
for it in range(4):
    w.on_loader_next(); sum(i for i in range(10)); w.on_optimizer_step()
assert not w.stats()["window_armed"]
assert sys.getprofile() is mine, sys.getprofile()
n = len(calls)
sum(i for i in range(10))
assert len(calls) > n  # it still runs
sys.setprofile(None)
assert w.wait_writers(10.0)
assert w.stats()["files_written"] == 1
w.uninstall()
print("ok")
""")
        self.assertEqual(p.stdout, "ok\n")

    def test_children_of_a_rank_stay_quiet(self):
        # A forked child (a DataLoader worker) runs no exit hook and sends nothing on the rank's
        # connection; a Python the rank starts (spawn, subprocess) with its RANK does not turn
        # the collector on as if it were the rank.
        agent = Listener(os.path.join(tempfile.mkdtemp(prefix="pt_kids_"), "a.sock"))
        agent.start()
        try:
            env = env_with(PERFTRACKER_AGENT_SOCKET=agent.path, RANK="0", WORLD_SIZE="1")
            code = """
import os, subprocess, sys, time
from perftracker import hooks
assert hooks._collector.w is not None and not hooks._collector.off, "the rank itself is collected"
pid = os.fork()
if pid == 0:
    assert hooks._collector.off and hooks._collector.client is None
    sys.exit(0)  # runs atexit: the parent's hook must not run here
_, st = os.waitpid(pid, 0)
assert os.WEXITSTATUS(st) == 0, "the forked child still had the collector on"
out = subprocess.run([sys.executable, "-c",
                      "from perftracker import hooks; print(hooks._collector.w is None)"],
                     capture_output=True, text=True).stdout.strip()
assert out == "True", out
time.sleep(1.5)  # the client ships its messages every 0.5 s
print("ok", os.getpid())
"""
            p = subprocess.run([ptest.TORCH_PYTHON, "-c", code], capture_output=True, text=True,
                               env=env, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(p.stdout.startswith("ok"), p.stdout)
            rank_pid = int(p.stdout.split()[1])
            agent.stop()
            pids = {m.get("pid") for m in agent.messages}
            self.assertEqual(pids, {rank_pid}, f"messages from other processes: {pids}")
            stats = [m for m in agent.messages if m["type"] == "stats"]
            self.assertEqual(len(stats), 1, agent.messages)
        finally:
            agent.stop()

    def test_a_collector_turned_off_mid_window_stops_torch_profiler(self):
        out = os.path.join(tempfile.mkdtemp(prefix="pt_off_"), "w.json")
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", f"""
import torch
from perftracker import hooks
assert hooks.enable()
w = hooks._collector.w
for _ in range(20):
    hooks.on_loader_next(); hooks.on_optimizer_step()
assert w.start_window(50, 60.0, {out!r})
hooks.on_loader_next()  # arms the window: torch.profiler starts on this thread
assert hooks._collector.windows.profiler is not None and torch.autograd._profiler_enabled()
hooks._turn_off(RuntimeError("test"))
hooks.on_optimizer_step()  # the training thread's next event stops it
assert hooks._collector.windows.profiler is None and not torch.autograd._profiler_enabled()
print("ok")
"""], capture_output=True, text=True, env=env_with(PERFTRACKER_ENABLE="1"), timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "ok\n", p.stderr)
        self.assertIn("worker collector turned off", p.stderr)

    def test_a_collector_turned_off_after_torch_profilers_part_drops_its_trace(self):
        """torch.profiler stopped at its part's end (TORCH_DONE) waits for the window's end to be
        written; a collector turning itself off before then drops it, unwritten."""
        out = os.path.join(tempfile.mkdtemp(prefix="pt_off_part_"), "w.json")
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", f"""
import os, time, torch
from perftracker import hooks
assert hooks.enable()
windows = hooks._collector.windows
w = hooks._collector.w
for _ in range(20):
    hooks.on_loader_next(); hooks.on_optimizer_step()
assert w.start_window(50, 60.0, {out!r})
hooks.on_loader_next()  # arms the window: torch.profiler starts
assert windows.profiler is not None
for _ in range(8):
    hooks.on_optimizer_step(); hooks.on_loader_next()
    if windows.profiler is None:
        break
assert windows.profiler is None and windows.export_due is not None, "no TORCH_DONE"
hooks._turn_off(RuntimeError("test"))
hooks.on_optimizer_step()
assert not windows.holds_torch_trace()
time.sleep(0.5)
assert not os.path.exists({out!r} + ".torch.json")
print("ok")
"""], capture_output=True, text=True, env=env_with(PERFTRACKER_ENABLE="1"), timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "ok\n", p.stderr)

    def test_gc_is_charged_to_the_stack_that_triggered_it(self):
        out = os.path.join(tempfile.mkdtemp(prefix="pt_win_"), "rank-0.python.json")
        code = f"""
import gc, time
from perftracker import hooks
w = hooks._collector.w
assert w.gc_event in gc.callbacks and gc.callbacks.count(w.gc_event) == 1
hooks.enable()  # idempotent: one callback
assert gc.callbacks.count(w.gc_event) == 1
def cycles(n):
    junk = [None] * n
    for i in range(n):
        a = [i, None]
        a[1] = a
        junk[i] = a
def step(n):
    cycles(n)
for it in range(30):
    hooks.on_loader_next()
    if it == 5:
        gc.collect()
        assert w.stats()["gc_spans"] == 0  # not armed: nothing recorded
    if it == 12:
        assert w.start_window(5, 10.0, {out!r})
    step(3000)
    hooks.on_optimizer_step()
for _ in range(100):
    if w.stats()["files_written"]: break
    time.sleep(0.05)
s = w.stats()
assert s["files_written"] == 1 and s["gc_spans"] > 5, s
print("ok")
"""
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", code], capture_output=True, text=True,
                           env=env_with(PERFTRACKER_ENABLE="1"), timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "ok\n")
        doc, nodes = window_nodes(out)
        gcs = {path: n for path, n in nodes.items() if path[-1] == "<gc>"}
        self.assertGreater(sum(n[3] for n in gcs.values()), 5)
        self.assertTrue(all(n[2] == 1 for n in gcs.values()))  # flagged as collections
        # The collections start while cycles() allocates: that is where they are charged.
        under = [path for path in gcs if path[-2].endswith(": cycles")]
        self.assertTrue(under, list(gcs))
        self.assertTrue(any(": step" in x for x in under[0]), under)
        # cycles()'s own (self) time excludes the collections it triggered.
        cyc = [n for path, n in nodes.items() if path[-1].endswith(": cycles")][0]
        gc_under = sum(n[4] for path, n in gcs.items() if path[-2].endswith(": cycles"))
        self.assertLessEqual(cyc[5], cyc[4] - gc_under + 1000)
        show = ptest.run(["show", out, "--top", "50"])
        self.assertEqual(show.returncode, 0, show.stderr)
        rows = [x for x in show.stdout.splitlines() if " <gc>" in x]
        self.assertTrue(rows, show.stdout)
        self.assertTrue(all(" gc " in r for r in rows), rows)
        self.assertTrue(any("cycles" in r for r in rows), rows)

    def test_internal_error_turns_it_off_quietly(self):
        p = self.run_py("""
from perftracker import _worker as w
w.install({})
for _ in range(20):
    w.on_loader_next(); w.on_optimizer_step()
w._inject_failure()
w._inject_failure()
for _ in range(20):
    assert w.on_loader_next() == 0 and w.on_optimizer_step() == 0
s = w.stats()
assert s["failed"] and s["iterations"] == 19, s  # the one after the 19th step
print("ok")
""")
        self.assertEqual(p.stdout, "ok\n")
        self.assertEqual(p.stderr.count("perftracker: worker collector turned off"), 1, p.stderr)

    def test_sitecustomize_chains_and_a_python_error_is_one_line(self):
        other = tempfile.mkdtemp(prefix="pt_site_")
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("import builtins\nbuiltins._pt_other_site = True\n")
        env = env_with(PERFTRACKER_ENABLE="1")
        env["PYTHONPATH"] += os.pathsep + other
        code = """
import builtins, sys
assert getattr(builtins, "_pt_other_site", False), "chained sitecustomize did not run"
from perftracker import hooks
assert hooks._collector.w is not None and hooks._collector.w.stats()["installed"]
hooks._collector.w = None  # break it: the next event raises inside the collector
hooks.on_loader_next(); hooks.on_loader_next(); hooks.on_optimizer_step()
print("ok")
"""
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "ok\n")
        self.assertEqual(p.stderr.count("perftracker"), 1, p.stderr)

    def test_tracer_memory_is_bounded_and_totals_stay_exact(self):
        # A node cap of 16 call-stack paths and 200 distinct functions: the paths past the cap
        # are counted in one "<other>" node, so the window's total calls are still exact.
        out = os.path.join(tempfile.mkdtemp(prefix="pt_win_"), "b.json")
        self.run_py(f"""
import time
from perftracker import _worker as w
assert w.install({{"tracer_max_nodes": 16}})
fns = []
for k in range(200):
    exec(f"def f{{k}}(i): return i", globals())
    fns.append(globals()[f"f{{k}}"])
def loop():
    for f in fns:
        for i in range(10): f(i)
for it in range(15):
    w.on_loader_next()
    if it == 11: w.start_window(2, 10.0, {out!r})
    loop()
    w.on_optimizer_step()
for _ in range(100):
    if w.stats()["files_written"]: break
    time.sleep(0.05)
s = w.stats()
assert s["tracer_nodes"] <= 16 and s["tracer_other_calls"] > 0, s
""")
        doc, nodes = window_nodes(out)
        self.assertLessEqual(len(doc["nodes"]), 16)
        other = doc["nodes"][1]
        self.assertGreater(other[3], 0)
        # Every f_k call of the two iterations: in its own node or in "<other>".
        f_calls = sum(n[3] for path, n in nodes.items() if path[-1].split(": ")[-1].startswith("f")
                      and path[-1].split(": ")[-1][1:].isdigit())
        self.assertGreaterEqual(f_calls + other[3], 2 * 200 * 10)
        self.assertEqual(doc["stats"]["calls"], sum(n[3] for n in doc["nodes"]))

    def test_bad_config_is_refused(self):
        self.run_py("""
from perftracker import _worker as w
try:
    w.install({"window": 0})
except ValueError:
    pass
else:
    raise SystemExit("accepted window=0")
""")


if __name__ == "__main__":
    ptest.main()
