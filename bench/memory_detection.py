#!/usr/bin/env python3
"""How soon `perftracker run` names a memory leak, wherever it starts, and what it says of jobs
whose memory does not leak. Real torch jobs (examples/train_ddp.py, 2 ranks, gloo, CPU) under
the product's defaults; not a CI test.

  /usr/bin/python3 bench/memory_detection.py [--rates 1,4,16] [--starts 40,300,600]
      [--clean 5] [--sawtooth 5] [--python .venv/bin/python] [--json out.json]

Rank 1 keeps RATE MiB every step from step START (--fault leak). The detection delay is the
iteration of the sample at which the server found the growth (its log's "memory growth on rank
1: ... from iteration A to B": B) less START; the rate error is the found rate against RATE
(RSS, as the agents sample it with the iteration reports). Then clean runs and sawtooth runs
(--fault sawtooth: 16 MiB a step, let go every 20 steps) count their memory findings (goal 0).
The issue's goal: found within max(100, a tenth of the run so far) iterations of its start."""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
AFTER = 300  # steps a job runs past its leak's start
FOUND = re.compile(r"memory growth on rank (\d+): \+([\d.]+) MiB per iteration from iteration (\d+) to (\d+)")


def run(binary, python, report, iters, fault=()):
    shutil.rmtree(report, ignore_errors=True)
    os.makedirs(report)
    cmd = [binary, "run", "--nproc", "2", "--report-dir", report, "--", python,
           os.path.join(SOURCE, "examples", "train_ddp.py"), "--nproc", "2", "--iters", str(iters),
           "--step-sleep-ms", "20", *fault]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr[-1500:]}")
    with open(os.path.join(report, "perftracker.log")) as f:
        log = f.read()
    found = [(int(r), float(mib), int(a), int(b)) for r, mib, a, b in FOUND.findall(log)]
    memory_findings = 0
    windows = os.path.join(report, "windows")
    for w in os.listdir(windows) if os.path.isdir(windows) else []:
        with open(os.path.join(windows, w, "diagnosis.json")) as f:
            memory_findings += sum(x["category"] == "memory_growth" for x in json.load(f)["findings"])
    return found, memory_findings, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="1,4,16", help="MiB kept per step")
    ap.add_argument("--starts", default="40,300,600", help="the step each leak starts at")
    ap.add_argument("--clean", type=int, default=5)
    ap.add_argument("--sawtooth", type=int, default=5)
    ap.add_argument("--bin", default=os.path.join(SOURCE, "build", "perftracker"))
    ap.add_argument("--python", default=os.path.join(SOURCE, ".venv", "bin", "python"))
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pt_memory_detection_")
    print(f"runs under {tmp}", flush=True)
    rows, quiet = [], []
    for start in [int(s) for s in a.starts.split(",")]:
        for rate in [float(r) for r in a.rates.split(",")]:
            report = os.path.join(tmp, f"leak-{rate:g}-{start}")
            found, _, secs = run(a.bin, a.python, report, start + AFTER,
                                 ["--fault", "leak", "--fault-rank", "1", "--fault-start", str(start),
                                  "--fault-mb", str(rate)])
            mine = [f for f in found if f[0] == 1]
            row = {"rate_mib": rate, "start": start, "seconds": secs, "found": bool(mine)}
            if mine:
                _, mib, first, last = mine[0]
                row.update(delay=last - start, found_rate_mib=mib, found_from=first,
                           limit=max(100, last // 10))
            rows.append(row)
            print(f"leak {rate:g} MiB/step from {start}: " +
                  (f"found at iteration {row['delay'] + start} (delay {row['delay']}, goal <= "
                   f"{row['limit']}), +{row['found_rate_mib']:.2f} MiB/iteration from {row['found_from']}"
                   if mine else "NOT FOUND") + (f"; also {[f for f in found if f[0] != 1]}" if len(found) > len(mine) else ""),
                  flush=True)
    for kind, n in (("clean", a.clean), ("sawtooth", a.sawtooth)):
        for k in range(n):
            report = os.path.join(tmp, f"{kind}-{k}")
            fault = [] if kind == "clean" else ["--fault", "sawtooth", "--fault-rank", "1", "--fault-mb", "16"]
            found, findings, secs = run(a.bin, a.python, report, 600, fault)
            quiet.append({"kind": kind, "events": len(found), "findings": findings, "seconds": secs})
            print(f"{kind} #{k + 1}: {len(found)} memory growth events, {findings} memory findings", flush=True)
    print("\nrate MiB/step  start  delay (goal)   found rate")
    for r in rows:
        print(f"{r['rate_mib']:>13g} {r['start']:>6} " +
              (f"{r['delay']:>6} ({r['limit']:>4})  {r['found_rate_mib']:.2f}" if r["found"] else "  not found"))
    bad = sum(q["findings"] > 0 for q in quiet)
    print(f"clean and sawtooth runs with a memory finding: {bad}/{len(quiet)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"leaks": rows, "quiet": quiet}, f, indent=1)


if __name__ == "__main__":
    main()
