#!/usr/bin/env python3
"""Accuracy of the online path where it is hard: real torch DDP jobs (4 ranks, gloo, CPU) under
`perftracker run` with the product's defaults, each fault repeated N times. Not a CI test: it
takes minutes per repeat.

For every run the job-end DIR/diagnosis.json (the latest window's) is checked the way
acceptance reads it (shared/tools/check_diagnosis.py). Reported per scenario: how often the rank
is right, how often the rank and the cause both are (the pass rate), the
detection delay (fault onset to its window's diagnosis) and, on clean jobs, the windows that a
slowdown trigger opened (the baseline window opens in every run and is not counted) as false
windows per hour of training.

  /usr/bin/python3 bench/online_accuracy.py [--repeats 3] [--only straggler,clean] [--json out.json]
                                            [--python .venv/bin/python]

The cause scenarios (skew: more_work, leak: memory_growth, checkpoint: io_stall, loader-workers: data_loader in
DataLoader worker processes, contention and nice: cpu_contention, quota-rank: cpu_throttled; quota-all: an all-rank
finding) check the cause as well as the rank; the quota scenarios need root (a cgroup).

--shapes runs the job-shape matrix instead (tests/job_shapes.py: DDP, FSDP2, TP x DP, pipelining,
a manual pipeline, torch.compile, the Hugging Face and Lightning trainers, each clean and with a
straggler on rank 2) on torch 2.x (--python, default .venv/bin/python) and reports the pass rate
per shape:

  /usr/bin/python3 bench/online_accuracy.py --shapes [--repeats 3] [--only pipeline,fsdp2]
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
TRAIN = os.path.join(SOURCE, "examples", "train_ddp.py")
CHECK = os.path.join(SOURCE, "..", "shared", "tools", "check_diagnosis.py")
PYTHON = "/usr/bin/python3"
VENV_PYTHON = os.path.join(SOURCE, ".venv", "bin", "python")
sys.path.insert(0, os.path.join(SOURCE, "tests"))
import job_shapes  # noqa: E402

# name: (train_ddp.py arguments, perftracker run arguments, what check_diagnosis.py expects)
SCENARIOS = {
    "straggler": (["--iters", "320", "--fault", "straggler", "--fault-rank", "2", "--fault-start", "130",
                   "--fault-work", "8"], [], "rank=2"),
    "one-slow-loader": (["--iters", "320", "--fault", "slow-loader", "--fault-rank", "1", "--fault-start", "130",
                         "--fault-ms", "80"], [], "rank=1,function~dataloader|collate|loader"),
    "all-loaders": (["--iters", "320", "--fault", "slow-loader", "--fault-rank", "all", "--fault-start", "130",
                     "--fault-ms", "40"], [], "all,function~dataloader|collate|loader"),
    "gc-rank": (["--iters", "320", "--fault", "gc", "--fault-rank", "3", "--fault-start", "130",
                 "--gc-garbage", "80000"], [], "rank=3,category~gc"),
    "call-heavy-rank": (["--iters", "320", "--fault", "call-heavy", "--fault-rank", "3", "--fault-start", "130",
                         "--calls", "40000"], [], "rank=3"),
    "hang": (["--iters", "450", "--fault", "hang", "--fault-rank", "2", "--fault-start", "130"],
             ["--on-hang", "kill"], "hang=2"),
    "loader-from-0": (["--iters", "200", "--fault", "slow-loader", "--fault-rank", "1", "--fault-start", "0",
                       "--fault-ms", "12"], [], "rank=1,function~dataloader|collate|loader"),
    "straggler-from-0": (["--iters", "200", "--fault", "straggler", "--fault-rank", "2", "--fault-start", "0",
                          "--fault-work", "3"], [], "rank=2"),
    # Causes (issue 24): the rank and the cause must both be right. The job waits 30 ms a step,
    # as tests/test_os_causes.py's do (test_online_run.py's FAULT_AT says why).
    "skew": (["--iters", "320", "--step-sleep-ms", "30", "--hidden", "512", "--fault", "skew", "--fault-rank", "2",
              "--fault-start", "130", "--fault-scale", "8"], [], "rank=2,category~more_work"),
    "leak": (["--iters", "320", "--step-sleep-ms", "30", "--fault", "leak", "--fault-rank", "2", "--fault-start", "0",
              "--fault-mb", "1"], [], "rank=2,category~memory_growth"),
    "checkpoint": (["--iters", "320", "--step-sleep-ms", "30", "--fault", "checkpoint", "--fault-rank", "2",
                    "--fault-start", "130", "--fault-mb", "16"], [], "rank=2,category~io_stall"),
    "loader-workers": (["--iters", "320", "--step-sleep-ms", "30", "--loader-workers", "2", "--fault", "slow-loader",
                        "--fault-rank", "1", "--fault-start", "130", "--fault-ms", "200"], [],
                       "rank=1,category~data_loader,function~SleepyCollate"),
    "contention": (["--iters", "700", "--hidden", "1024", "--fault", "cpu-contention", "--fault-rank", "1",
                    "--fault-start", "300"], [], "rank=1,category~cpu_contention"),
    "nice": (["--iters", "700", "--hidden", "1024", "--fault", "nice", "--fault-rank", "1", "--fault-start", "300"],
             [], "rank=1,category~cpu_contention"),
    "quota-rank": (["--iters", "320", "--step-sleep-ms", "30", "--fault", "cpu-quota", "--fault-rank", "2",
                    "--fault-start", "130"], [], "rank=2,category~cpu_throttled"),
    "quota-all": (["--iters", "400", "--step-sleep-ms", "30", "--fault", "cpu-quota", "--fault-rank", "all",
                   "--fault-start", "130"], [], "all,category~cpu_throttled"),
    "clean": (["--iters", "600"], [], "clean"),
}
# Scenarios that need more than the defaults: ranks (contention binds 2 CPU-bound ranks to the
# 2 cores) and a cgroup CPU quota (in CPUs) made for the run, passed as --fault-cgroup.
NPROC = {"contention": 2, "nice": 2}
QUOTA = {"quota-rank": 0.1, "quota-all": 0.25}


def run_once(binary, name, tmp, python=PYTHON):
    train_args, run_args, expect = SCENARIOS[name]
    report = os.path.join(tmp, name)
    shutil.rmtree(report, ignore_errors=True)
    quota = None
    if name in QUOTA:
        from test_os_causes import CpuQuota  # tests/: the cgroup the CI test makes
        quota = CpuQuota(QUOTA[name])
        if quota.error:
            raise SystemExit(f"{name}: {quota.error}")
        train_args = train_args + ["--fault-cgroup", quota.path]
    t0 = time.time()
    try:
        p = subprocess.run([binary, "run", "--nproc", str(NPROC.get(name, 4)), "--report-dir", report, *run_args,
                            "--", python, TRAIN, *train_args], capture_output=True, text=True, timeout=900)
    finally:
        if quota is not None:
            quota.close()
    seconds = time.time() - t0
    path = os.path.join(report, "diagnosis.json")

    def check(spec):
        return os.path.exists(path) and subprocess.run([sys.executable, CHECK, path, spec], capture_output=True,
                                                       text=True).returncode == 0
    ok = check(expect)
    # The rank alone (the expectation without its category and function): how often the rank is
    # right though the cause is not.
    rank_ok = ok or check(",".join(p for p in expect.split(",") if "~" not in p))
    log = open(os.path.join(report, "perftracker.log")).read() if os.path.exists(
        os.path.join(report, "perftracker.log")) else ""
    onset = re.search(r"fault \S+ on at step (\d+) \(unix ([0-9.]+)\)", p.stderr)
    delay = None
    if onset and int(onset.group(1)) > 0:
        done = [float(t) for t in re.findall(r"(?:window|hang) \d+ diagnosed \(unix ([0-9.]+)\)", log)
                if float(t) > float(onset.group(2))]
        if done:
            delay = done[0] - float(onset.group(2))
    slowdown_windows = len(set(re.findall(r"window (\d+) opened \(slowdown", log)))
    if not ok:  # kept for a look: the next repeat would overwrite it
        kept = f"{report}-failed-{int(t0)}"
        os.rename(report, kept)
        print(f"  kept {kept}", flush=True)
    return {"ok": ok, "rank_ok": rank_ok, "seconds": seconds, "delay_s": delay, "slowdown_windows": slowdown_windows,
            "exit": p.returncode}


def shapes(a):
    """The job-shape matrix, A.repeats times, interleaved; the pass rate per shape and case."""
    names = [n for n in a.only.split(",") if n] or [s.name for s in job_shapes.SHAPES]
    tmp = tempfile.mkdtemp(prefix="pt_shapes_")
    results = {}
    for r in range(a.repeats):
        for name in names:
            for straggler in (False, True):
                case = f"{name}/{'straggler' if straggler else 'clean'}"
                report = os.path.join(tmp, f"{name}-{r}-{'s' if straggler else 'c'}")
                p, secs = job_shapes.run_shape(a.bin, a.python, job_shapes.BY_NAME[name], straggler, report)
                ok, named = job_shapes.judge(report, straggler) if p.returncode == 0 else \
                    (False, f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
                results.setdefault(case, []).append({"ok": ok, "named": named, "seconds": secs})
                print(f"{case} #{r + 1}: {'PASS' if ok else 'FAIL'} in {secs:.0f} s: {named}", flush=True)
    print("\nshape/case                   pass")
    for case, rs in results.items():
        print(f"{case:28s} {sum(x['ok'] for x in rs)}/{len(rs)}")
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated scenario (or shape) names")
    ap.add_argument("--bin", default=os.path.join(SOURCE, "build", "perftracker"))
    ap.add_argument("--json", default="", help="write every run's result here")
    ap.add_argument("--shapes", action="store_true", help="the job-shape matrix on torch 2.x")
    ap.add_argument("--python", default="",
                    help="the jobs' Python (default: the torch 2.x venv for --shapes, Debian's torch 1.13 "
                         "(/usr/bin/python3) for the scenarios)")
    a = ap.parse_args()
    if not a.python:
        a.python = VENV_PYTHON if a.shapes else PYTHON
    if a.shapes:
        results = shapes(a)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1)
        return
    names = [n for n in a.only.split(",") if n] or list(SCENARIOS)
    tmp = tempfile.mkdtemp(prefix="pt_accuracy_")
    results = {}
    for r in range(a.repeats):  # interleaved: a slow spell of the machine hits every scenario alike
        for name in names:
            res = run_once(a.bin, name, tmp, a.python)
            results.setdefault(name, []).append(res)
            print(f"{name} #{r + 1}: {'PASS' if res['ok'] else 'FAIL'} in {res['seconds']:.0f} s"
                  + (f", diagnosed {res['delay_s']:.1f} s after the fault" if res["delay_s"] is not None else "")
                  + (f", {res['slowdown_windows']} slowdown window(s)" if name == "clean" else ""), flush=True)
    print("\nscenario             rank   rank+cause   delay (median)")
    for name in names:
        rs = results[name]
        delays = [x["delay_s"] for x in rs if x["delay_s"] is not None]
        print(f"{name:20s} {sum(x['rank_ok'] for x in rs)}/{len(rs)}    {sum(x['ok'] for x in rs)}/{len(rs)}"
              "          " + (f"{statistics.median(delays):.1f} s" if delays else "-"))
    if "clean" in results:
        hours = sum(x["seconds"] for x in results["clean"]) / 3600
        false = sum(x["slowdown_windows"] for x in results["clean"])
        print(f"clean jobs: {false} slowdown window(s) in {hours * 60:.1f} min of training: "
              f"{false / hours:.0f} false windows per hour")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
