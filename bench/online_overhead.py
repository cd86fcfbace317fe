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

Cost of a window with the product's defaults (`--defaults-pairs N`): interleaved pairs of a
plain run and a `perftracker run` with every default (its baseline window opens after the
warm-up). Per window of each run: the training time lost during it (its steps against the median
of the 20 steps before it) and after it (the AFTER steps that follow it, same reference: the
torch trace export, the node's summarizing, the diagnosis), in ms and in iterations; per pair,
the run-level cost (total step time of the run against the plain run's).

  python3 bench/online_overhead.py [--pairs 5] [--iters 300] [--bin build/perftracker]
  python3 bench/online_overhead.py --pairs 0 --workload call-heavy --calls 20000
  python3 bench/online_overhead.py --pairs 0 --windows 0 --defaults-pairs 5 --iters 140

Shapes of the defaults runs (`--shape`, with --defaults-pairs): demo (train_ddp.py's MLP: a few
large matrix multiplies a step), cnn (train_ddp.py --model cnn --loader-workers 2: convolutions and
batch norm, DataLoader worker processes), lm (examples/jobs/hf_trainer.py: a small Llama under
the Hugging Face Trainer, many small ops a step; no --step-sleep-ms wait, transformers needed) and
gpu (scripts/gpu-check.sh's GPU-bound model on CUDA, with --nproc 1: its check 7).
Each window's lost time is also split: its first step (the profiler's start), its last (the
stop, on the training thread) and the steps between (the tracer and profiler inflating them).

  python3 bench/online_overhead.py --pairs 0 --windows 0 --collective-calls 0 --defaults-pairs 3 \
      --shape lm --iters 200 --python .venv/bin/python

Cost per collective of the ring of collectives (`--collective-calls N`, default 20000; 0 skips):
one process, a 1-rank gloo group, N all_reduce calls of 7 floats through torch.distributed as the
collector wraps it (the last-collective record and the ring: sizes, dtype, the group's sequence
number, the caller's frame) against torch's own function, interleaved in 5 rounds; and the C++
part alone (_worker.collective_enter/exit).

  python3 bench/online_overhead.py --pairs 0 --windows 0 --python .venv/bin/python
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


JOBS = os.path.join(SOURCE, "examples", "jobs")
# --shape: (script, its arguments, whether it spawns its own ranks, its step-count flag).
SHAPES = {
    "demo": (TRAIN, [], True, "--iters"),
    "cnn": (TRAIN, ["--model", "cnn", "--loader-workers", "2"], True, "--iters"),
    "lm": (os.path.join(JOBS, "hf_trainer.py"), ["--step-sleep-ms", "0", "--print-every", "0"], False,
           "--steps"),
    # scripts/gpu-check.sh's GPU-bound model (check 2's, without its fault): ~20 ms steps on an
    # H200, a loader in worker processes; run it with --nproc 1 (ranks sharing one GPU over gloo
    # copy every gradient through the CPU).
    "gpu": (TRAIN, ["--device", "cuda", "--hidden", "8192", "--layers", "4", "--batch", "1024",
                    "--loader-workers", "2"], True, "--iters"),
}


def shape_commands(a, work, steps_n, times):
    """(plain command, the job's command under `perftracker run`) of --shape."""
    script, args, spawns, steps_flag = SHAPES[a.shape]
    job = [script, steps_flag, str(steps_n), "--times", times, *args, *work]
    plain = ([a.python, job[0], "--nproc", str(a.nproc), *job[1:]] if spawns else
             [a.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.nproc),
              *job])
    return plain, [a.python, *job]


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
    ap.add_argument("--defaults-pairs", type=int, default=0,
                    help="interleaved plain / defaults pairs: each window's lost time, run cost")
    ap.add_argument("--after", type=int, default=20, help="steps after a window counted as its")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="demo",
                    help="the job of the defaults runs (see above)")
    ap.add_argument("--python", default=PYTHON, help="the ranks' Python (its torch is used)")
    ap.add_argument("--nproc", type=int, default=4, help="ranks of every job")
    ap.add_argument("--collective-calls", type=int, default=20000,
                    help="calls timed for the ring's cost per collective (0: skip)")
    a = ap.parse_args()
    if a.shape == "lm" and a.workload != "model":
        ap.error("--workload call-heavy is train_ddp.py's fault: not with --shape lm")
    if a.collective_calls:
        collective_cost(a)
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
                run([PYTHON, TRAIN, "--nproc", str(a.nproc), "--iters", str(a.iters), "--times", plain, *work])
            else:
                run([a.bin, "run", "--nproc", str(a.nproc), "--report-dir", os.path.join(tmp, f"r{i}"),
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
        run([a.bin, "run", "--nproc", str(a.nproc), "--report-dir", report, "--profile-at-iteration", "100",
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
    if ratios:
        print(f"window cost ({a.workload}): median x{statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {a.windows} runs")
    if a.defaults_pairs:
        defaults_cost(a, work, tmp)


# Run by --python with the worker package on its path: the wrapped all_reduce against torch's.
RING_BENCH = r"""
import os, statistics, sys, tempfile, time
import perftracker
perftracker.enable()
import torch, torch.distributed as dist
from perftracker import _worker
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
wrapped = dist.all_reduce
plain = getattr(wrapped, "__wrapped__", None)
assert plain is not None and getattr(wrapped, "_perftracker", False), "all_reduce is not wrapped"
t, n = torch.ones(7), int(sys.argv[1])
def per_call(fn):
    t0 = time.perf_counter()
    for _ in range(n):
        fn(t)
    return (time.perf_counter() - t0) / n * 1e6
rounds = [(per_call(plain), per_call(wrapped)) for _ in range(5)]
t0 = time.perf_counter()
for i in range(n):
    k = _worker.collective_enter("0", "default_pg", i, "all_reduce", "gloo", (7,), "Float", "bench.py", 1, "f")
    _worker.collective_exit(k, True)
ring = (time.perf_counter() - t0) / n * 1e6
p, w = statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)
print(f"per collective (all_reduce of 7 floats, 1-rank gloo, {n} calls x 5 rounds): torch {p:.2f} us, "
      f"wrapped {w:.2f} us: +{w - p:.2f} us per call (the record, the ring, the caller's frame); "
      f"the C++ ring alone {ring:.2f} us")
dist.destroy_process_group()
"""


def collective_cost(a):
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(a.bin), "python"),
               PERFTRACKER_COLLECTIVES_DIR=tempfile.mkdtemp(prefix="pt_ring_"))
    env.pop("PERFTRACKER_AGENT_SOCKET", None)
    p = subprocess.run([a.python, "-c", RING_BENCH, str(a.collective_calls)], capture_output=True,
                       text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"ring benchmark failed ({p.returncode}):\n{p.stderr[-3000:]}")
    print(p.stdout.strip(), flush=True)


def window_marks(report):
    """Each window's first and last iteration on rank 0, monotonic ns, from its Python trace."""
    marks = {}
    traces = os.path.join(report, "traces")
    for name in sorted(os.listdir(traces)) if os.path.isdir(traces) else []:
        path = os.path.join(traces, name, "rank-0.python.json")
        if name.startswith("window-") and os.path.exists(path):
            with open(path) as f:
                it = json.load(f).get("iterations", [])
            if it:
                marks[int(name[7:])] = (it[0][1], it[-1][2])
    return marks


def lost_per_window(times, marks, after):
    """Per window: (window, steps in it, lost during ms, lost after ms, reference step ms, lost in
    its start step ms, lost in its last step ms). The start step is the one before the window's
    first iteration mark (the tracer and torch's profiler start at its end, on the training
    thread); the last step holds the profiler's stop. The reference is the median of the 20
    steps before the start step."""
    starts = times["step_start_ns"]
    # A step's time is from its start to the next one's: what a job's own timer leaves out (the
    # Hugging Face Trainer's callbacks do not time its DataLoader's next(), where a window may
    # stop) still counts.
    step_ms = [(b - a) / 1e6 for a, b in zip(starts, starts[1:])]
    out = []
    for wid, (lo, hi) in sorted(marks.items()):
        inside = [i for i, t0 in enumerate(starts[:len(step_ms)]) if lo <= t0 < hi]
        if not inside or inside[0] == 0:
            continue
        first, last = inside[0] - 1, inside[-1] + 1
        before = step_ms[max(0, first - 20):first]
        if len(before) < 5:
            continue
        ref = statistics.median(before)
        during = sum(step_ms[i] - ref for i in range(first, last))
        following = step_ms[last:last + after]
        out.append((wid, last - first, during, sum(x - ref for x in following), ref,
                    step_ms[first] - ref, step_ms[last - 1] - ref))
    return out


def defaults_cost(a, work, tmp):
    """Interleaved plain and defaults runs: each window's lost time and the run-level cost."""
    costs, per_window = [], []
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    for i in range(a.defaults_pairs):
        plain = os.path.join(tmp, f"dplain{i}.json")
        online = os.path.join(tmp, f"donline{i}.json")
        report = os.path.join(tmp, f"d{i}")
        order = ["plain", "online"] if i % 2 == 0 else ["online", "plain"]
        for which in order:
            cmd, online_job = shape_commands(a, work, a.iters, plain if which == "plain" else online)
            if which == "online":
                cmd = [a.bin, "run", "--nproc", str(a.nproc), "--report-dir", report, "--", *online_job]
            run(cmd, env=env)
        with open(plain) as f:
            tp = json.load(f)
        with open(online) as f:
            to = json.load(f)
        sp, so = sum(tp["step_s"][a.skip:]), sum(to["step_s"][a.skip:])
        costs.append(so / sp - 1)
        windows = lost_per_window(to, window_marks(report), a.after)
        for wid, n, during, after, ref, start, stop in windows:
            per_window.append((during, after, ref, start, stop))
            print(f"pair {i} window {wid}: {n} steps, lost {during:.0f} ms during (start step "
                  f"{start:.0f}, last step {stop:.0f}, the {n - 2} between {during - start - stop:.0f}), "
                  f"{after:.0f} ms in the {a.after} steps after ({(during + after) / ref:.2f} "
                  f"iterations of {ref:.1f} ms)", flush=True)
        print(f"pair {i}: plain {sp:.2f} s, under perftracker (defaults, {len(windows)} window(s)) "
              f"{so:.2f} s: {100 * (so / sp - 1):+.1f}%", flush=True)
    if per_window:
        iters = [(w[0] + w[1]) / w[2] for w in per_window]
        med = lambda k: statistics.median([w[k] for w in per_window])  # noqa: E731
        # scripts/gpu-check.sh (check 7) reads "median N iterations" from this line.
        print(f"per window ({a.shape}, step {med(2):.1f} ms): median {med(0):.0f} ms lost during "
              f"(start step {med(3):.0f}, last step {med(4):.0f}), {med(1):.0f} ms after; median "
              f"{statistics.median(iters):.2f} iterations (max {max(iters):.2f}) over "
              f"{len(per_window)} windows")
    print(f"run-level cost with defaults: median {100 * statistics.median(costs):+.1f}% "
          f"(min {100 * min(costs):+.1f}%, max {100 * max(costs):+.1f}%) over {len(costs)} pairs")


if __name__ == "__main__":
    main()
