#!/usr/bin/env python3
"""Sensitivity of the online path: how small a one-rank straggler `perftracker run` still names,
whenever it begins, and what it says about clean jobs. Real torch 2.x jobs (4 ranks, gloo, CPU)
under the product's defaults; not a CI test (a full matrix takes hours).

  /usr/bin/python3 bench/sensitivity.py [--repeats 10] [--clean 10] [--shapes ddp,pipeline]
      [--strengths 5,10,20,40] [--timings before,inside,after] [--json out.json]
      [--python .venv/bin/python]

For each shape (ddp: examples/train_ddp.py, 4 replicas; pipeline: examples/jobs/pipeline.py,
2 stages x 2 replicas) a first clean run measures the step (the median of its unprofiled steps)
and where the baseline window falls; rank 2 then does extra 256x256 matmuls every step, as many as
add STRENGTH % of that step at this machine's price of one (measured first, one thread), from a
step before the baseline window (0), inside it (its third iteration) or after it (60 steps past
it). Each run's own step times (--times) say what the fault really added, and its log where its
baseline window really fell: a run is counted under the timing it really had.

A run names the straggler when the first window that profiled iterations of the fault has rank 2
alone in its first finding; "final" is the same of the job-end diagnosis (what a user reads last).
Clean runs (--clean of them, the calibration runs among them) pass when no window has a finding
above 3% of an iteration (tests/job_shapes.py's CLEAN_MAX_SHARE). The issue's goal on a 2-core
machine: >= 9/10 at 10%, 10/10 at 20%, no clean finding above 3%, and a fault beginning inside
the baseline window found as often as one after it.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE, "tests"))
from job_shapes import CLEAN_MAX_SHARE, share  # noqa: E402
from ptest import windows  # noqa: E402

RANK = 2
MATRIX = 256
# Steps past the baseline window where an "after" fault begins: past the 5 iterations the
# history leaves out after a window, with room for the slowdown trigger's recent median.
AFTER_GAP = 60
# Steps a job runs past its fault's start: the slowdown trigger's recent median and its sustain
# (2 s: 37 steps of 54 ms), the window's lead (2 s), the window (10) and its export.
AFTER_FAULT = 170


class ShapeRun:
    def __init__(self, name, script, args, steps_flag):
        self.name, self.script, self.args, self.steps_flag = name, script, list(args), steps_flag

    def command(self, python, steps, times, fault=None):
        cmd = [python, self.script, *self.args, self.steps_flag, str(steps), "--times", times]
        if fault:
            work, start = fault
            cmd += ["--fault", "straggler", "--fault-rank", str(RANK), "--fault-start", str(start),
                    "--fault-work", str(work)]
        return cmd


SHAPES = {
    # 40 ms of sleep a step keeps the 4-rank step steady on 2 cores (tests/job_shapes.py's ddp).
    "ddp": ShapeRun("ddp", os.path.join(SOURCE, "examples", "train_ddp.py"),
                    ["--nproc", "4", "--step-sleep-ms", "40"], "--iters"),
    "pipeline": ShapeRun("pipeline", os.path.join(SOURCE, "examples", "jobs", "pipeline.py"),
                         ["--fault-size", str(MATRIX)], "--steps"),
}


def matmul_ms(python):
    """This machine's price of one 256x256 matmul on one thread, ms (the fastest of a few batches:
    time lost to other processes would shrink the fault)."""
    code = ("import time, torch\ntorch.set_num_threads(1)\n"
            f"a = torch.randn({MATRIX}, {MATRIX})\ntorch.mm(a, a)\nbest = 1e9\n"
            "for _ in range(7):\n    t = time.perf_counter()\n    for _ in range(10):\n        torch.mm(a, a)\n"
            "    best = min(best, (time.perf_counter() - t) / 10)\nprint(best * 1e3)\n")
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"{python}: cannot time a matmul: {p.stderr.strip()[-500:]}")
    return float(p.stdout.split()[-1])


def window_ranges(report):
    """{window id: (first, last) profiled iteration} from the run's log."""
    path = os.path.join(report, "perftracker.log")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        log = f.read()
    return {int(w): (int(a), int(b)) for w, a, b in
            re.findall(r"event  window (\d+) opened .*?: profiling iterations (\d+)\.\.(\d+)", log)}


def step_times(path, ranges, start=0):
    """The run's unprofiled step times (ms) from step START: without the windows' iterations and
    the 5 after each (their export), nor the first 10 (warm-up)."""
    try:
        with open(path) as f:
            steps = json.load(f)["step_s"]
    except (OSError, ValueError, KeyError):
        return []
    skip = set(range(10))
    for a, b in ranges.values():
        skip.update(range(a - 1, b + 6))
    return [s * 1e3 for i, s in enumerate(steps) if i >= start and i not in skip]


def run(binary, python, shape, report, steps, fault=None):
    shutil.rmtree(report, ignore_errors=True)
    os.makedirs(report)
    times = os.path.join(report, "times.json")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    t = time.monotonic()
    p = subprocess.run([binary, "run", "--nproc", "4", "--report-dir", report, "--",
                        *shape.command(python, steps, times, fault)],
                       capture_output=True, text=True, timeout=1800, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{shape.name}: exit {p.returncode}: {p.stderr.strip()[-1500:]}")
    return times, time.monotonic() - t


def first_named(report, ranges, start):
    """(first finding of the first window that profiled the fault, of the job-end diagnosis)."""
    ws = windows(report)
    covering = [w for w, (a, b) in sorted(ranges.items()) if b >= start and w in ws]
    first = ws[covering[0]]["findings"][:1] if covering else []
    path = os.path.join(report, "diagnosis.json")
    final = []
    if os.path.exists(path):
        with open(path) as f:
            final = json.load(f)["findings"][:1]
    return (first[0] if first else None), (final[0] if final else None)


def describe(f):
    return "no finding" if f is None else f"{f['category']} on {f['ranks']} ({share(f):.0%})"


def clean_verdict(report):
    bad = [(w, f) for w, d in sorted(windows(report).items()) for f in d["findings"]
           if share(f) > CLEAN_MAX_SHARE or f["category"] == "missing_rank"]
    return (True, "clean") if not bad else (False, f"window {bad[0][0]}: {describe(bad[0][1])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--clean", type=int, default=10, help="clean runs per shape (the calibration run is one)")
    ap.add_argument("--shapes", default="ddp,pipeline")
    ap.add_argument("--strengths", default="5,10,20,40", help="percent of the step the straggler adds")
    ap.add_argument("--timings", default="before,inside,after")
    ap.add_argument("--bin", default=os.path.join(SOURCE, "build", "perftracker"))
    ap.add_argument("--python", default=os.path.join(SOURCE, ".venv", "bin", "python"))
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    shapes = [SHAPES[s] for s in a.shapes.split(",") if s]
    strengths = [int(s) for s in a.strengths.split(",") if s]
    timings = [t for t in a.timings.split(",") if t]
    tmp = tempfile.mkdtemp(prefix="pt_sensitivity_")
    per_mm = matmul_ms(a.python)
    print(f"one {MATRIX}x{MATRIX} matmul: {per_mm:.3f} ms; runs under {tmp}", flush=True)
    results = {"matmul_ms": per_mm, "shapes": {}}
    for shape in shapes:
        # Calibration: a clean run long enough for every timing.
        report = os.path.join(tmp, f"{shape.name}-clean-0")
        times, secs = run(a.bin, a.python, shape, report, 120 + AFTER_GAP + AFTER_FAULT)
        ranges = window_ranges(report)
        if 1 not in ranges:
            raise SystemExit(f"{shape.name}: the calibration run opened no baseline window ({report})")
        step_ms = statistics.median(step_times(times, ranges))
        base_a, base_b = ranges[1]
        ok, why = clean_verdict(report)
        res = results["shapes"][shape.name] = {"step_ms": step_ms, "baseline": [base_a, base_b],
                                               "clean": [{"ok": ok, "why": why, "seconds": secs}], "faults": []}
        print(f"{shape.name}: step {step_ms:.1f} ms, baseline window {base_a}..{base_b}; clean #1: {why}",
              flush=True)
        starts = {"before": 0, "inside": base_a + 2, "after": base_b + AFTER_GAP}
        cells = [(s, t) for s in strengths for t in timings]
        for r in range(max(a.repeats, a.clean - 1)):  # interleaved: a slow spell hits every cell alike
            if r < a.clean - 1:
                report = os.path.join(tmp, f"{shape.name}-clean-{r + 1}")
                times, secs = run(a.bin, a.python, shape, report, 120 + AFTER_GAP + AFTER_FAULT)
                ok, why = clean_verdict(report)
                res["clean"].append({"ok": ok, "why": why, "seconds": secs})
                print(f"{shape.name} clean #{r + 2}: {'PASS' if ok else 'FAIL'}: {why}", flush=True)
            if r >= a.repeats:
                continue
            for strength, timing in cells:
                work = max(1, round(strength / 100 * step_ms / per_mm))
                start = starts[timing]
                report = os.path.join(tmp, f"{shape.name}-{strength}-{timing}-{r}")
                times, secs = run(a.bin, a.python, shape, report, start + AFTER_FAULT + (60 if start == 0 else 0),
                                  (work, start))
                ranges = window_ranges(report)
                a_, b_ = ranges.get(1, (0, 0))
                really = "before" if start < a_ else "inside" if start <= b_ else "after"
                after = step_times(times, ranges, start + 5)
                before = step_times(times, ranges)[: max(0, start - 10)] if start > 20 else []
                ref = statistics.median(before) if len(before) >= 10 else step_ms
                added = statistics.median(after) / ref - 1 if after else float("nan")
                first, final = first_named(report, ranges, start)
                named = first is not None and first["ranks"] == [RANK]
                named_final = final is not None and final["ranks"] == [RANK]
                res["faults"].append({"strength": strength, "timing": timing, "really": really, "work": work,
                                      "added": added, "named": named, "named_final": named_final,
                                      "first": describe(first), "final": describe(final), "seconds": secs})
                print(f"{shape.name} +{strength}% {timing} (really {really}, {work} matmuls, added {added:+.0%}) "
                      f"#{r + 1}: {'NAMED' if named else 'missed'}: {describe(first)}; final: {describe(final)}",
                      flush=True)
    print("\nshape     strength timing  named first  named at the end  added (median)")
    for name, res in results["shapes"].items():
        for strength in strengths:
            for timing in timings:
                rs = [x for x in res["faults"] if x["strength"] == strength and x["really"] == timing]
                if not rs:
                    continue
                added = [x["added"] for x in rs if x["added"] == x["added"]]
                print(f"{name:9s} {strength:>5d}%   {timing:7s} {sum(x['named'] for x in rs):>3d}/{len(rs):<8d} "
                      f"{sum(x['named_final'] for x in rs):>3d}/{len(rs):<13d} "
                      + (f"{statistics.median(added):+.0%}" if added else "-"))
        cl = res["clean"]
        print(f"{name:9s} clean runs: {sum(x['ok'] for x in cl)}/{len(cl)} with no finding above "
              f"{CLEAN_MAX_SHARE:.0%}" + "".join(f"\n  {x['why']}" for x in cl if not x["ok"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
