#!/usr/bin/env python3
"""Online collector overhead on examples/train_ddp.py (4 ranks, gloo, CPU).

Always-on cost: interleaved pairs of runs with the same seed, plain (the script spawns its own
ranks) and under `perftracker run` with no window firing (detector on, tracer off). Each run's
rank 0 records every step's duration; the figure is the ratio of median step times, per pair and
over all pairs.

Window cost: one more run under `perftracker run --profile-at-iteration K`; the window's mean
iteration (DIR/windows/1/diagnosis.json) against the whole run's median (DIR/diagnosis.json,
run_iteration_ms). `--workload call-heavy` makes every rank run tokenizer-like Python every step
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
                run([a.bin, "run", "--nproc", "4", "--report-dir", os.path.join(tmp, f"r{i}"), "--",
                     PYTHON, TRAIN, "--iters", str(a.iters), "--times", online, *work], env=quiet)
        mp, mo = statistics.median(steps(plain, a.skip)), statistics.median(steps(online, a.skip))
        ratios.append(mo / mp)
        print(f"pair {i}: plain median {mp:.2f} ms, under perftracker {mo:.2f} ms, "
              f"ratio {mo / mp:.4f}", flush=True)
    if ratios:
        print(f"always-on: median ratio {statistics.median(ratios):.4f} "
              f"(min {min(ratios):.4f}, max {max(ratios):.4f}) over {a.pairs} interleaved pairs")

    report = os.path.join(tmp, "window")
    run([a.bin, "run", "--nproc", "4", "--report-dir", report, "--profile-at-iteration", "100", "--",
         PYTHON, TRAIN, "--iters", str(a.iters), *work], env=quiet)
    with open(os.path.join(report, "windows", "1", "diagnosis.json")) as f:
        w = json.load(f)
    with open(os.path.join(report, "diagnosis.json")) as f:
        d = json.load(f)
    per = d["job"]["run_iteration_ms"]["per_rank"]
    run_p50 = statistics.median(v["p50"] for v in per.values())
    win = w["job"]["iteration_ms"]["median"]
    print(f"window ({a.workload}): {w['job']['iterations']} iterations at median {win:.2f} ms vs the "
          f"run's median {run_p50:.2f} ms: x{win / run_p50:.2f} inside the window")


if __name__ == "__main__":
    main()
