#!/usr/bin/env python3
"""Is the cost a finding prints what fixing it gives? Real faults whose removal can be measured,
under `perftracker run` with the product's defaults (4 ranks, gloo, CPU, torch from --python).
Not a CI test: each run takes 20-40 s.

Every job runs clean until iteration FAULT_AT (its baseline window, on by default, profiles the
clean job around iterations 75-95), then with the fault; it ends once the first window after the
fault is diagnosed. Per run:

- predicted: the first finding's impact.what_if_ms_per_iteration, the saving the what-if replay
  predicts (diagnose/what_if.h), beside its rule's own figure (impact.ms_per_iteration);
- measured: what removing the fault gives the job, from its own unprofiled iterations (rank 0's
  step times from perftracker.db, the median before the fault against the median after it, each
  window's iterations and the 3 after them left out): ~100 iterations on each side, where a
  window has 10 and the fault's window profiles more than the baseline window does (input
  shapes). Beside it, the fault window's median iteration against the clean baseline window's
  (profiled alike, 10 iterations each: this VM's noise of a few ms shows there);
- error: (predicted - measured) / measured, for the replay and for the rule, against both.

Cases (--only): straggler (rank 2 computes ~20 ms more a step), loader (rank 1's collate sleeps
20 ms a batch), loader-all (every rank's, 15 ms: an all-rank finding), link (rank 2's egress
limited by tc tbf in a network namespace: needs root), pipeline (examples/jobs/pipeline.py,
2 stages x 2 replicas, rank 2 in the second stage computes ~20 ms more). The issue's all-rank
needless synchronisation (torch.cuda.synchronize) needs a GPU: scripts/gpu-check.sh.

Goals (issue 39): median |error| of the replay <= 15%, worst <= 30%; printed with the figures.

  /usr/bin/python3 bench/what_if_accuracy.py [--repeats 2] [--only straggler,loader]
      [--python .venv/bin/python] [--bin build/perftracker] [--json out.json] [--keep DIR]
"""
import argparse
import glob
import json
import os
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE, "tests"))

TRAIN = os.path.join(SOURCE, "examples", "train_ddp.py")
PIPELINE = os.path.join(SOURCE, "examples", "jobs", "pipeline.py")
FAULT_AT = 130  # after the baseline window (tests/test_online_run.py's FAULT_AT says why)
STEP = ["--step-sleep-ms", "30"]  # a GPU-like wait: 40-50 ms steps on torch 2.13 here
# Iterations after a window left out of the unprofiled reference: the trace's export and the
# node's summarizing slow them (bench/online_overhead.py measures by how much).
AFTER_WINDOW = 3
GOAL_MEDIAN, GOAL_WORST = 0.15, 0.30


def case_command(name, python, work):
    """(job command, environment additions, wrapper, cleanup) of case NAME."""
    fault = ["--fault-start", str(FAULT_AT)]
    if name == "straggler":
        return [python, TRAIN, "--iters", "400", *STEP, "--fault", "straggler", "--fault-rank", "2",
                "--fault-work", str(work), *fault], {}, [], None
    if name == "loader":
        return [python, TRAIN, "--iters", "400", *STEP, "--fault", "slow-loader", "--fault-rank", "1",
                "--fault-ms", "20", *fault], {}, [], None
    if name == "loader-all":
        return [python, TRAIN, "--iters", "400", *STEP, "--fault", "slow-loader", "--fault-rank", "all",
                "--fault-ms", "15", *fault], {}, [], None
    if name == "pipeline":
        return [python, PIPELINE, "--steps", "400", *STEP, "--fault", "straggler", "--fault-rank", "2",
                "--fault-work", str(work), *fault], {}, [], None
    if name == "link":
        from test_online_run import Netns  # noqa: E402 (tests/: the namespace the link test uses)
        ns = Netns()
        if ns.error:
            raise RuntimeError(f"cannot create a network namespace: {ns.error}")
        tbf = f"tc qdisc add dev {ns.inner} root tbf rate 100mbit burst 32kbit latency 100ms"
        env = {"PT_SLOW_RANK": "2", "PT_NETNS": ns.name, "PT_IF_NS": ns.inner, "PT_IF_HOST": ns.outer}
        cmd = [python, TRAIN, "--iters", "400", *STEP, "--fault", "cmd", "--fault-rank", "2",
               "--fault-cmd", tbf, *fault]
        wrapper = [os.path.join(SOURCE, "tests", "netns_rank.sh")]
        return cmd, env, wrapper, ns
    raise ValueError(name)


CASES = ["straggler", "loader", "loader-all", "link", "pipeline"]


def windows_of(report):
    """[(id, first iteration, diagnosis dict)] of REPORT's windows, from its log and files."""
    with open(os.path.join(report, "perftracker.log")) as f:
        log = f.read()
    starts = {int(w): int(a) for w, a in re.findall(r"event  window (\d+) opened .*?profiling iterations (\d+)\.\.",
                                                    log)}
    out = []
    for path in glob.glob(os.path.join(report, "windows", "*", "diagnosis.json")):
        wid = int(os.path.basename(os.path.dirname(path)))
        with open(path) as f:
            out.append((wid, starts.get(wid), json.load(f)))
    return sorted(out, key=lambda w: w[0]), log


def unprofiled_rise(report, windows):
    """Rank 0's median unprofiled step after the fault minus before it (ms), or None."""
    db = os.path.join(report, "perftracker.db")
    if not os.path.exists(db):
        return None
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        rows = c.execute("SELECT step, ms FROM iteration_series WHERE rank = 0").fetchall()
    profiled = set()
    for _, first, d in windows:
        if first is not None:
            profiled.update(range(first, first + d["job"].get("iterations", 10) + AFTER_WINDOW))
    before = [ms for step, ms in rows if 30 <= step < FAULT_AT and step not in profiled]
    # The first steps after the fault: the trigger's own detection delay is the same either way.
    after = [ms for step, ms in rows if step >= FAULT_AT + 5 and step not in profiled]
    if len(before) < 10 or len(after) < 10:
        return None
    return statistics.median(after) - statistics.median(before)


def run_case(a, name, tmp, k, work):
    import ptest  # noqa: E402 (tests/ptest.py: the runner that ends a job once it is diagnosed)
    report = os.path.join(tmp, f"{name}{k}")
    shutil.rmtree(report, ignore_errors=True)
    cmd, env_add, wrapper, cleanup = case_command(name, a.python, work)
    stop = report + ".stop"
    run_args = ["--master-addr", cleanup.host_ip] if cleanup is not None else []
    full = [a.bin, "run", "--nproc", "4", "--report-dir", report, *run_args, "--", *wrapper, *cmd,
            "--stop-file", stop]
    try:
        p = ptest.run_until_diagnosed(full, report, stop, FAULT_AT, 600, dict(os.environ, **env_add))
    finally:
        if cleanup is not None:
            cleanup.close()
    if p.returncode != 0:
        return {"case": name, "error": f"job failed ({p.returncode}): {p.stderr[-1500:]}"}
    windows, _ = windows_of(report)
    base = [w for w in windows if w[1] is not None and w[1] + 10 <= FAULT_AT]
    fault = [w for w in windows if w[1] is not None and w[1] >= FAULT_AT]
    if not base or not fault:
        return {"case": name, "error": f"no clean baseline window and fault window: {[(w[0], w[1]) for w in windows]}"}
    b, f = base[0][2], fault[0][2]
    if not f["findings"]:
        return {"case": name, "error": "the fault's window has no finding"}
    top = f["findings"][0]
    imp = top["impact"]
    measured = f["job"]["iteration_ms"]["median"] - b["job"]["iteration_ms"]["median"]
    r = {"case": name, "run": k, "finding": f"{top['category']} {top['ranks']}",
         "measured_ms": measured, "unprofiled_ms": unprofiled_rise(report, windows),
         "predicted_ms": imp.get("what_if_ms_per_iteration"), "rule_ms": imp.get("ms_per_iteration"),
         "baseline_ms": b["job"]["iteration_ms"]["median"], "fault_ms": f["job"]["iteration_ms"]["median"]}
    unprofiled = r["unprofiled_ms"]
    if r["predicted_ms"] is not None and unprofiled is not None and unprofiled > 0 and measured > 0:
        r["error"] = None
        r["replay_error"] = (r["predicted_ms"] - unprofiled) / unprofiled
        r["rule_error"] = (r["rule_ms"] - unprofiled) / unprofiled
        r["replay_error_windows"] = (r["predicted_ms"] - measured) / measured
        r["rule_error_windows"] = (r["rule_ms"] - measured) / measured
    else:
        r["error"] = (f"no replay figure or no rise (unprofiled {unprofiled} ms, windows "
                      f"{measured:.1f} ms)")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--python", default=os.path.join(SOURCE, ".venv", "bin", "python"))
    ap.add_argument("--bin", default=os.path.join(SOURCE, "build", "perftracker"))
    ap.add_argument("--json", default="")
    ap.add_argument("--keep", default="", help="write the runs' report folders here and keep them")
    a = ap.parse_args()
    os.environ["PT_TORCH_PYTHON"] = a.python
    os.environ["PERFTRACKER_BIN"] = os.path.abspath(a.bin)
    import ptest  # noqa: E402
    work, per = ptest.fault_work_for(20)
    print(f"straggler and pipeline: --fault-work {work} ({per:.2f} ms a matmul, ~20 ms a step)", flush=True)
    tmp = a.keep or tempfile.mkdtemp(prefix="pt_whatif_")
    os.makedirs(tmp, exist_ok=True)
    results = []
    for name in [c for c in a.only.split(",") if c]:
        if name not in CASES:
            sys.exit(f"unknown case {name!r}: one of {', '.join(CASES)}")
        for k in range(a.repeats):
            try:
                r = run_case(a, name, tmp, k, work)
            except RuntimeError as e:
                r = {"case": name, "error": str(e)}
            results.append(r)
            if r.get("error"):
                print(f"{name} #{k}: {r['error']}", flush=True)
                continue
            print(f"{name} #{k}: {r['finding']}: the job lost {r['unprofiled_ms']:.1f} ms an iteration "
                  f"(windows: {r['baseline_ms']:.1f} -> {r['fault_ms']:.1f} ms, +{r['measured_ms']:.1f}); "
                  f"replay predicts {r['predicted_ms']:.1f} ms ({100 * r['replay_error']:+.0f}%; "
                  f"{100 * r['replay_error_windows']:+.0f}% of the windows' rise), the rule "
                  f"{r['rule_ms']:.1f} ms ({100 * r['rule_error']:+.0f}%; "
                  f"{100 * r['rule_error_windows']:+.0f}%)", flush=True)
    ok = [r for r in results if not r.get("error")]
    for suffix, what in [("", "against what the job lost"), ("_windows", "against the windows' rise")]:
        if not ok:
            break
        errs = [abs(r["replay_error" + suffix]) for r in ok]
        rule = [abs(r["rule_error" + suffix]) for r in ok]
        med, worst = statistics.median(errs), max(errs)
        print(f"replay |error| {what}, {len(ok)} runs: median {100 * med:.0f}% (goal "
              f"{100 * GOAL_MEDIAN:.0f}%: {'met' if med <= GOAL_MEDIAN else 'NOT met'}), worst "
              f"{100 * worst:.0f}% (goal {100 * GOAL_WORST:.0f}%: {'met' if worst <= GOAL_WORST else 'NOT met'}); "
              f"the rules' figures: median {100 * statistics.median(rule):.0f}%, worst {100 * max(rule):.0f}%")
    failed = len(results) - len(ok)
    if failed:
        print(f"{failed} of {len(results)} runs gave no comparison (above)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
