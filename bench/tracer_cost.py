#!/usr/bin/env python3
"""The Python tracer's cost, in one process (no agent, no ranks).

1. ns per traced call: a loop of N calls of a tiny Python function, timed with the tracer off
   and inside a profiling window (interleaved repeats; the median of each). The difference per
   call is what the tracer adds; the ratio is how much slower call-heavy code runs in a window.
2. Window cost and training-thread stalls: a loop of torch steps (an MLP, a DataLoader, an
   optimizer; one thread) under the collector's hooks, with a window requested through the
   agent protocol's entry point: the median step inside the window against outside it, with
   (call-heavy) and without (model-like) tiny Python calls in every step. Every hooked call
   (DataLoader next(), optimizer step()) is timed; the longest is the worst stall of the
   training thread, including arming and starting and stopping torch.profiler.

  /usr/bin/python3 bench/tracer_cost.py [--calls 200000] [--repeats 7] [--build build]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)

CALLS = r"""
import json, statistics, sys, time
from perftracker import _worker as w
n, repeats = int(sys.argv[1]), int(sys.argv[2])
assert w.install({})
def tiny(i): return i
def loop(n):
    for i in range(n):
        tiny(i)
off, on = [], []
for it in range(12):  # the detector learns the iteration (DO) before any window can arm
    w.on_loader_next(); w.on_optimizer_step()
for r in range(repeats):
    for armed in ((False, True) if r % 2 == 0 else (True, False)):
        if armed:
            assert w.start_window(1, 600.0, f"/tmp/pt_tracer_cost_{r}.json")
        w.on_loader_next()  # arms the window when one is pending
        t0 = time.perf_counter_ns()
        loop(n)
        dt = time.perf_counter_ns() - t0
        w.on_optimizer_step()
        w.on_loader_next(); w.on_optimizer_step()  # ends the window (1 iteration)
        (on if armed else off).append(dt)
s = w.stats()
print(json.dumps({"off_ns": statistics.median(off), "on_ns": statistics.median(on),
                  "calls": s["tracer_calls"], "nodes": s["tracer_nodes"]}))
"""

STALLS = r"""
import json, statistics, sys, time
import torch
from perftracker import hooks
hooks.enable({"window": 10})
w = hooks._collector.w
torch.set_num_threads(1)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(6400, 256)), batch_size=64)
def tok(i): return {"id": i}
calls = int(sys.argv[1])
worst, normal, steps = 0, [], []
it = iter(data)
for step in range(int(sys.argv[2])):
    t_step = time.perf_counter_ns()
    t0 = time.perf_counter_ns()
    try:
        (x,) = next(it)
    except StopIteration:
        it = iter(data)
        (x,) = next(it)
    t_next = time.perf_counter_ns() - t0
    if step == 40:
        assert w.start_window(10, 60.0, "/tmp/pt_tracer_stall.python.json")
    [tok(i) for i in range(calls)]
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    t1 = time.perf_counter_ns()
    opt.step()
    t_step_end = time.perf_counter_ns()
    worst = max(worst, t_next, t_step_end - t1)
    if step < 40:
        normal.append(max(t_next, t_step_end - t1))
    steps.append((t_step, t_step_end - t_step, w.stats()["window_armed"]))
inside = [d for _, d, armed in steps if armed]
outside = [d for _, d, armed in steps[20:] if not armed]
print(json.dumps({"worst_ms": worst / 1e6, "normal_ms": max(normal) / 1e6,
                  "windows": w.stats()["windows_done"], "inside_ms": statistics.median(inside) / 1e6,
                  "outside_ms": statistics.median(outside) / 1e6, "n_inside": len(inside)}))
"""


def run(build, code, *args):
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    env.pop("PERFTRACKER_ENABLE", None)
    p = subprocess.run(["/usr/bin/python3", "-c", code, *map(str, args)], capture_output=True,
                       text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed: {p.stderr[-3000:]}")
    import json
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--stall-calls", type=int, default=20000, help="tiny calls per call-heavy step")
    ap.add_argument("--steps", type=int, default=200, help="training steps per run")
    ap.add_argument("--build", default=os.path.join(SOURCE, "build"))
    a = ap.parse_args()
    r = run(a.build, CALLS, a.calls, a.repeats)
    per_off = r["off_ns"] / a.calls
    per_on = r["on_ns"] / a.calls
    print(f"tiny call: {per_off:.1f} ns untraced, {per_on:.1f} ns in a window: +{per_on - per_off:.1f} ns "
          f"per traced call (each call is a call and a return), x{per_on / per_off:.2f} on call-heavy "
          f"code ({a.calls} calls, median of {a.repeats}; {r['nodes']} nodes)")
    for name, calls in (("model-like", 0), ("call-heavy", a.stall_calls)):
        s = run(a.build, STALLS, calls, a.steps)
        print(f"{name} step ({calls} tiny calls per step): {s['outside_ms']:.2f} ms outside, "
              f"{s['inside_ms']:.2f} ms inside the window: x{s['inside_ms'] / s['outside_ms']:.3f}; "
              f"longest hooked call (DataLoader next, optimizer step) {s['worst_ms']:.2f} ms with a "
              f"window (arming, torch.profiler start and stop), {s['normal_ms']:.2f} ms before any")


if __name__ == "__main__":
    main()
