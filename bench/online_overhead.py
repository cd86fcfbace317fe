#!/usr/bin/env python3
"""Online collector overhead on examples/train_ddp.py (4 ranks, gloo, CPU).

Always-on cost: interleaved pairs of runs with the same seed, plain (the script spawns its own
ranks) and under `perftracker run` with no window firing (detector on, tracer off). Each run's
rank 0 records every step's duration; the figure is the ratio of median step times, per pair and
over all pairs.

Window cost: runs under `perftracker run --profile-at-iteration K`; rank 0's steps inside the
window (found by the Python tracer's iteration markers) against its 20 steps before and after it,
in the same run. `--workload call-heavy` makes every rank run tokenizer-like Python every step
(train_ddp.py --fault call-heavy --fault-rank all): the tracer's cost where Python calls dominate.

  python3 bench/online_overhead.py [--pairs 5] [--iters 300] [--bin build/perftracker]
  python3 bench/online_overhead.py --pairs 0 --workload call-heavy --calls 20000
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
TRAIN = os.path.join(SOURCE, "examples", "train_ddp.py")
PYTHON = "/usr/bin/python3"


def steps(path, skip):
    with open(path) as f:
        s = json.load(f)["step_s"]
    return [x * 1e3 for x in s[skip:]]


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--skip", type=int, default=30, help="warm-up steps left out")
    ap.add_argument("--bin", default=os.path.join(SOURCE, "build", "perftracker"))
    ap.add_argument("--workload", choices=["model", "call-heavy"], default="model")
    ap.add_argument("--windows", type=int, default=3, help="runs with one window each")
    ap.add_argument("--calls", type=int, default=20000, help="Python calls per step (call-heavy)")
    a = ap.parse_args()
    work = [] if a.workload == "model" else ["--fault", "call-heavy", "--fault-rank", "all",
                                            "--fault-start", "0", "--calls", str(a.calls)]
    tmp = tempfile.mkdtemp(prefix="pt_overhead_")
    # No window may fire in the always-on runs: only the detector's cost is measured.
    quiet = dict(os.environ, PERFTRACKER_SLOWDOWN_RATIO="100", PERFTRACKER_HANG_FACTOR="1000")
    ratios = []
    for i in range(a.pairs):
        plain, online = os.path.join(tmp, f"plain{i}.json"), os.path.join(tmp, f"online{i}.json")
        order = ["plain", "online"] if i % 2 == 0 else ["online", "plain"]
        for which in order:
            if which == "plain":
                run([PYTHON, TRAIN, "--nproc", "4", "--iters", str(a.iters), "--times", plain, *work])
            else:
                run([a.bin, "run", "--nproc", "4", "--report-dir", os.path.join(tmp, f"r{i}"),
                     "--baseline-window", "off", "--",
                     PYTHON, TRAIN, "--iters", str(a.iters), "--times", online, *work], env=quiet)
        mp, mo = statistics.median(steps(plain, a.skip)), statistics.median(steps(online, a.skip))
        ratios.append(mo / mp)
        print(f"pair {i}: plain median {mp:.2f} ms, under perftracker {mo:.2f} ms, "
              f"ratio {mo / mp:.4f}", flush=True)
    if ratios:
        print(f"always-on: median ratio {statistics.median(ratios):.4f} "
              f"(min {min(ratios):.4f}, max {max(ratios):.4f}) over {a.pairs} interleaved pairs")

    # The window's cost: rank 0's steps inside the window (the tracer's iteration markers, on the
    # same monotonic clock as the steps' start times) against its 20 steps before and after.
    ratios = []
    for k in range(a.windows):
        report = os.path.join(tmp, f"window{k}")
        times = os.path.join(tmp, f"window{k}.json")
        run([a.bin, "run", "--nproc", "4", "--report-dir", report, "--profile-at-iteration", "100",
             "--baseline-window", "off", "--", PYTHON, TRAIN, "--iters", str(a.iters), "--times", times, *work], env=quiet)
        with open(os.path.join(report, "traces", "window-1", "rank-0.python.json")) as f:
            doc = json.load(f)
        if "iterations" in doc:
            marks = doc["iterations"]
        else:  # builds before the aggregate file: a Chrome trace, times in us
            marks = sorted([0, e["ts"] * 1e3, (e["ts"] + e["dur"]) * 1e3] for e in doc["traceEvents"]
                           if e["name"].startswith("ProfilerStep#"))
        with open(times) as f:
            t = json.load(f)
        lo, hi = marks[0][1], marks[-1][2]
        inside = [s * 1e3 for s, t0 in zip(t["step_s"], t["step_start_ns"]) if lo <= t0 < hi]
        first = next(i for i, t0 in enumerate(t["step_start_ns"]) if t0 >= lo)
        last = first + len(inside)
        around = [s * 1e3 for s in t["step_s"][max(0, first - 20):first] + t["step_s"][last + 3:last + 23]]
        r = statistics.median(inside) / statistics.median(around)
        ratios.append(r)
        print(f"window {k} ({a.workload}): {len(inside)} steps at median {statistics.median(inside):.2f} ms vs "
              f"{statistics.median(around):.2f} ms around it: x{r:.3f}", flush=True)
    print(f"window cost ({a.workload}): median x{statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {a.windows} runs")


if __name__ == "__main__":
    main()
