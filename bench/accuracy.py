#!/usr/bin/env python3
"""Accuracy benchmark of the diagnosis (issue 4): a fixed suite of simulated jobs with known
faults, diagnosed from their summaries and scored against the simulator's ground truth.

    python3 bench/accuracy.py --bin build/perftracker --sizes 1000 --seeds 2 --out results.json
    python3 bench/accuracy.py --bin build/perftracker --sizes 10000 --seeds 1 --out big.json

Every scenario runs
    perftracker simulate --workers N --layout L [--fault KIND@PLACE ...] --seed S -o DIR
    perftracker diagnose DIR/summaries --json DIR/diagnosis.json -q
and DIR is deleted afterwards (unless --keep), since a 10,000-worker job writes ~570 MB.

The suite (fixed; a scenario is (size, layout, seed, case)):
  * cases: every fault kind alone (slow-gpu, slow-nvlink, slow-nic, slow-switch, slow-loader,
    cpu-contention, gc, tiny-kernels, sync, hang), three two-fault cases (slow-gpu + slow-nic on
    different nodes, gc + slow-loader on different nodes, tiny-kernels + slow-gpu) and a
    fault-free job ("none");
  * layouts: tp=8,pp=5 ; tp=4,pp=2 ; tp=8,pp=5,ep=5 (each divides 1,000 and 10,000 workers;
    8 GPUs per node, 4 nodes per switch, the simulator's defaults);
  * seeds 1..--seeds. Places are drawn from random.Random("size/layout/seed/case"), so they are
    random but fixed: a rank anywhere in the job, a node, a switch that is full (4 nodes), and for
    slow-loader a first-stage rank or node (the data loader only runs in pipeline stage 0),
    alternating between rank= and node= by the draw.
  * At 10,000 workers (any size >= 5,000) the simulator takes 20-55 s per job on this 2-core
    machine, so only the first layout and one seed run there unless --big-layouts /
    --big-seeds say otherwise.

Scoring. Findings come from the diagnosis JSON in order (sorted by impact). A finding F matches
a truth fault T (truth.json) when all of these hold:
  1. category: F.category == T.category exactly (straggler, communication, data_loader, gc,
     launch_bound, sync, missing_rank). A related category does not count: a communication
     finding on a slow GPU's rank, a gpu_idle or python finding for a slow loader, a straggler
     finding on a GC rank are false findings even though they name the right place.
  2. place:
     - T.class == "all" (tiny-kernels, sync): F.class == "all" (the place is the whole job);
     - T at rank=R (slow-gpu, cpu-contention, gc, hang, slow-loader@rank): set(F.ranks) ==
       set(T.ranks) == {R};
     - T at node=N (slow-nvlink, slow-nic, slow-loader@node): set(F.hosts) == set(T.hosts)
       == {"node-N"} and every rank F names is on that host (a node-level finding lists all the
       node's ranks; T.ranks may be a subset, e.g. only the first-stage ranks for slow-loader),
       or set(F.ranks) == set(T.ranks);
     - T at switch=S (slow-switch): F.evidence.switch == T.switch, or set(F.hosts) ==
       set(T.hosts) (every host under the switch).
  3. link faults: where F.evidence has a "link" string it must name the faulty link
     (slow-nvlink: "nvlink", slow-nic: "nic", slow-switch: "switch"); a slow-nic named as an
     NVLink problem is the wrong link.
Per scenario with k truth faults:
  * top-1 correct: the first k findings match the k truth faults one to one, in any order
    (k = 1: the first finding matches the fault). Fault-free: correct iff there is no finding.
  * precision = findings matching some truth fault / findings (no finding: undefined, not
    counted); false findings = findings matching no truth fault.
  * recall = truth faults matched by some finding / truth faults (fault-free: not counted).
The table aggregates per (size, case): scenarios, top-1 (share correct), precision and recall
(micro-averaged: summed counts), false findings (total), median diagnose wall seconds and the
largest peak RSS of diagnose (os.wait4's ru_maxrss of the diagnose child). --out gets every
scenario (commands, truth, first findings, scores, times) and the aggregates.
Standard library only.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

LAYOUTS = ["tp=8,pp=5", "tp=4,pp=2", "tp=8,pp=5,ep=5"]
SINGLE = ["slow-gpu", "slow-nvlink", "slow-nic", "slow-switch", "slow-loader",
          "cpu-contention", "gc", "tiny-kernels", "sync", "hang"]
COMBOS = ["slow-gpu+slow-nic", "gc+slow-loader", "tiny-kernels+slow-gpu"]
CASES = SINGLE + COMBOS + ["none"]
GPUS_PER_NODE = 8
NODES_PER_SWITCH = 4
LINK_OF = {"slow-nvlink": "nvlink", "slow-nic": "nic", "slow-switch": "switch"}


def parse_layout(text, workers):
    d = dict((k, int(v)) for k, v in (item.split("=") for item in text.split(",")))
    d.setdefault("ep", 1)
    d.setdefault("dp", workers // (d["tp"] * d["pp"]))
    return d


def places(case, workers, layout, seed):
    """The --fault arguments of a case, drawn deterministically from (size, layout, seed, case)."""
    rng = random.Random(f"{workers}/{layout}/{seed}/{case}")
    lay = parse_layout(layout, workers)
    nodes = workers // GPUS_PER_NODE
    full_switches = nodes // NODES_PER_SWITCH
    stage0 = lay["tp"] * lay["dp"]  # ranks 0..stage0-1 run the data loader
    stage0_nodes = (stage0 + GPUS_PER_NODE - 1) // GPUS_PER_NODE
    node_of = lambda r: r // GPUS_PER_NODE  # noqa: E731
    used_nodes = set()

    def rank(pool=None):
        while True:
            r = rng.randrange(pool if pool else workers)
            if node_of(r) not in used_nodes:
                used_nodes.add(node_of(r))
                return r

    def node(pool=None):
        while True:
            n = rng.randrange(pool if pool else nodes)
            if n not in used_nodes:
                used_nodes.add(n)
                return n

    out = []
    for kind in case.split("+"):
        if kind == "none":
            continue
        if kind in ("slow-gpu", "cpu-contention", "gc", "hang"):
            out.append(f"{kind}@rank={rank()}")
        elif kind in ("slow-nvlink", "slow-nic"):
            out.append(f"{kind}@node={node()}")
        elif kind == "slow-switch":
            out.append(f"{kind}@switch={rng.randrange(full_switches)}")
        elif kind == "slow-loader":
            if rng.random() < 0.5:
                out.append(f"{kind}@rank={rank(stage0)}")
            else:
                out.append(f"{kind}@node={node(stage0_nodes)}")
        else:  # tiny-kernels, sync
            out.append(f"{kind}@all")
    return out


def run_measured(cmd):
    """Runs cmd; returns (returncode, wall seconds, peak RSS in MiB, stderr)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    p.stderr.close()
    return p.returncode, time.monotonic() - t0, ru.ru_maxrss / 1024.0, err.decode(errors="replace")


def matches(f, t):
    """Whether finding f names truth fault t (the rule in the module docstring)."""
    if f.get("category") != t["category"]:
        return False
    if t["class"] == "all":
        return f.get("class") == "all"
    ev = f.get("evidence") or {}
    want_link = LINK_OF.get(t["kind"])
    if want_link and isinstance(ev.get("link"), str) and ev["link"] != want_link:
        return False
    franks, fhosts = set(f.get("ranks") or []), set(f.get("hosts") or [])
    tranks, thosts = set(t["ranks"]), set(t["hosts"])
    place = t["place"].split("=")[0]
    if place == "rank":
        return franks == tranks
    if place == "node":
        if franks == tranks:
            return True
        node = int(t["place"].split("=")[1])
        return fhosts == thosts and bool(franks) and all(
            r // GPUS_PER_NODE == node for r in franks)
    if place == "switch":
        return ev.get("switch") == t.get("switch") or (fhosts == thosts and bool(fhosts))
    return False


def one_to_one(findings, truth):
    """Whether findings and truth (same length) pair up, every pair matching."""
    if len(findings) != len(truth):
        return False

    def go(i, left):
        if i == len(findings):
            return True
        return any(matches(findings[i], t) and go(i + 1, left[:j] + left[j + 1:])
                   for j, t in enumerate(left))
    return go(0, list(truth))


def brief(f):
    ranks = f.get("ranks") or []
    ev = f.get("evidence") or {}
    return {
        "category": f.get("category"), "class": f.get("class"), "cause": f.get("cause"),
        "ranks": ranks if len(ranks) <= 16 else ranks[:16] + [f"... {len(ranks)} ranks"],
        "hosts": (f.get("hosts") or [])[:8],
        "evidence": {k: ev[k] for k in ("link", "switch", "node") if k in ev},
        "ms_per_iteration": (f.get("impact") or {}).get("ms_per_iteration"),
        "summary": f.get("summary"),
    }


def score(diag, truth):
    findings = diag.get("findings") or []
    faults = truth["faults"]
    k = len(faults)
    matched = [any(matches(f, t) for t in faults) for f in findings]
    found = [any(matches(f, t) for f in findings) for t in faults]
    return {
        "top1": (not findings) if k == 0 else one_to_one(findings[:k], faults),
        "findings": len(findings),
        "matched_findings": sum(matched),
        "false_findings": len(findings) - sum(matched),
        "truth_faults": k,
        "truth_found": sum(found),
        "false": [brief(f) for f, m in zip(findings, matched) if not m][:5],
    }


def aggregate(rows):
    n = len(rows)
    fnd = sum(r["score"]["findings"] for r in rows)
    mf = sum(r["score"]["matched_findings"] for r in rows)
    tf = sum(r["score"]["truth_faults"] for r in rows)
    tfound = sum(r["score"]["truth_found"] for r in rows)
    return {
        "scenarios": n,
        "top1": sum(r["score"]["top1"] for r in rows) / n if n else None,
        "precision": mf / fnd if fnd else None,
        "recall": tfound / tf if tf else None,
        "false_findings": fnd - mf,
        "median_diagnose_s": statistics.median(r["diagnose_s"] for r in rows) if n else None,
        "max_diagnose_rss_mb": max(r["diagnose_rss_mb"] for r in rows) if n else None,
        "median_simulate_s": statistics.median(r["simulate_s"] for r in rows) if n else None,
    }


def fmt(x, pct=True):
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.2f}"


def table(rows, out=sys.stdout):
    head = (f"{'size':>6} {'case':<24} {'n':>3} {'top-1':>7} {'prec':>7} {'recall':>7} "
            f"{'false':>5} {'diag s':>7} {'RSS MB':>7}")
    print(head, file=out)
    print("-" * len(head), file=out)
    groups = {}
    for r in rows:
        groups.setdefault((r["workers"], r["case"]), []).append(r)
    aggs = []
    for size in sorted({r["workers"] for r in rows}):
        for case in CASES:
            g = groups.get((size, case))
            if not g:
                continue
            a = aggregate(g)
            aggs.append({"workers": size, "case": case, **a})
            print(f"{size:>6} {case:<24} {a['scenarios']:>3} {fmt(a['top1']):>7} "
                  f"{fmt(a['precision']):>7} {fmt(a['recall']):>7} {a['false_findings']:>5} "
                  f"{a['median_diagnose_s']:>7.2f} {a['max_diagnose_rss_mb']:>7.0f}", file=out)
        sz = [r for r in rows if r["workers"] == size]
        a = aggregate(sz)
        faulty = aggregate([r for r in sz if r["case"] != "none"])
        clean = [r for r in sz if r["case"] == "none"]
        aggs.append({"workers": size, "case": "TOTAL", **a})
        print(f"{size:>6} {'TOTAL':<24} {a['scenarios']:>3} {fmt(a['top1']):>7} "
              f"{fmt(a['precision']):>7} {fmt(a['recall']):>7} {a['false_findings']:>5} "
              f"{a['median_diagnose_s']:>7.2f} {a['max_diagnose_rss_mb']:>7.0f}", file=out)
        print(f"{'':>6} faulty jobs: top-1 {fmt(faulty['top1'])}; fault-free jobs with a finding: "
              f"{sum(1 for r in clean if r['score']['findings'])}/{len(clean)} "
              f"({sum(r['score']['findings'] for r in clean)} findings)", file=out)
    return aggs


def write(path, binary, t_all, layouts, aggs, rows):
    with open(path + ".tmp", "w") as fh:
        json.dump({"schema": "perftracker.accuracy/1", "binary": binary,
                   "seconds": time.monotonic() - t_all, "layouts": layouts,
                   "complete": aggs is not None, "aggregates": aggs, "scenarios": rows},
                  fh, indent=1)
    os.replace(path + ".tmp", path)


# Faults with a strength: their size and intermittency can be swept.
TIMING_KINDS = ("slow-gpu", "slow-nvlink", "slow-nic", "slow-switch", "slow-loader", "cpu-contention", "gc")


def magnitude_table(rows, magnitudes, everies, out=sys.stdout):
    """Top-1 against fault size (and intermittency) per kind, and the smallest size found in at
    least 95% of the jobs with no false finding."""
    print("\ntop-1 by fault size (every K-th iteration):", file=out)
    for every in everies:
        print(f"\n  every {every}:  " + "  ".join(f"{m:>6g}" for m in magnitudes) + "   smallest >= 95%", file=out)
        for kind in TIMING_KINDS:
            cells, smallest = [], None
            for m in magnitudes:
                opts = "" if (m, every) == (1.0, 1) else f",size={m:g},every={every}"
                rs = [r for r in rows if r["case"] == kind + opts]
                if not rs:
                    cells.append("     -")
                    continue
                good = sum(r["score"]["top1"] and not r["score"]["false_findings"] for r in rs) / len(rs)
                cells.append(f"{100 * good:5.0f}%")
                if good >= 0.95 and (smallest is None or m < smallest):
                    smallest = m
            print(f"  {kind:14s} " + "  ".join(cells) + f"   {smallest if smallest is not None else '-'}",
                  file=out)
    clean = [r for r in rows if r["case"] == "none"]
    if clean:
        bad = sum(1 for r in clean if r["score"]["false_findings"])
        print(f"\n  fault-free jobs with a finding: {bad} of {len(clean)}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/perftracker")
    ap.add_argument("--sizes", default="1000")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--layouts", default=";".join(LAYOUTS), help="';'-separated layouts")
    ap.add_argument("--big-layouts", type=int, default=1,
                    help="layouts used at >= 5,000 workers (the first N)")
    ap.add_argument("--big-seeds", type=int, default=1, help="seeds used at >= 5,000 workers")
    ap.add_argument("--out", default="accuracy.json")
    ap.add_argument("--work", default="/tmp/pt_accuracy")
    ap.add_argument("--filter", default="", help="only scenarios whose id contains this")
    ap.add_argument("--keep", action="store_true", help="keep each scenario's folder")
    ap.add_argument("--magnitudes", default="1",
                    help="fault sizes to sweep for the single timing faults, e.g. 1,0.5,0.25,0.1 "
                    "(a share of each kind's default strength: slow-gpu 1.4x at 1, 1.04x at 0.1)")
    ap.add_argument("--every", default="1", help="intermittency to sweep, e.g. 1,4 (every K-th iteration)")
    ap.add_argument("--noise", type=float, default=0.03,
                    help="per-function per-iteration noise of the simulated jobs (simulate --noise)")
    args = ap.parse_args()
    magnitudes = [float(x) for x in args.magnitudes.split(",") if x]
    everies = [int(x) for x in args.every.split(",") if x]

    binary = os.path.abspath(args.bin)
    layouts = [x for x in args.layouts.split(";") if x]
    scenarios = []
    for size in (int(s) for s in args.sizes.split(",") if s):
        big = size >= 5000
        for layout in layouts[:args.big_layouts] if big else layouts:
            for seed in range(1, (min(args.seeds, args.big_seeds) if big else args.seeds) + 1):
                for case in CASES:
                    timing = case in TIMING_KINDS
                    for mag in magnitudes if timing else [1.0]:
                        for every in everies if timing else [1]:
                            opts = "" if (mag, every) == (1.0, 1) else f",size={mag:g},every={every}"
                            sid = f"{size}/{layout}/s{seed}/{case}{opts}"
                            if args.filter in sid:
                                scenarios.append((sid, size, layout, seed, case, opts))
    os.makedirs(args.work, exist_ok=True)
    rows = []
    t_all = time.monotonic()
    for i, (sid, size, layout, seed, case, opts) in enumerate(scenarios):
        d = os.path.join(args.work, sid.replace("/", "_").replace(",", "").replace("=", ""))
        shutil.rmtree(d, ignore_errors=True)
        faults = [f + opts for f in places(case, size, layout, seed)]
        sim = [binary, "simulate", "--workers", str(size), "--layout", layout, "--noise", str(args.noise)]
        for f in faults:
            sim += ["--fault", f]
        sim += ["--seed", str(seed), "-o", d]
        rc, sim_s, _, err = run_measured(sim)
        if rc != 0:
            sys.exit(f"accuracy: {sid}: simulate failed ({rc}): {err.strip()}")
        js = os.path.join(d, "diagnosis.json")
        diag = [binary, "diagnose", os.path.join(d, "summaries"), "--json", js, "-q"]
        rc, diag_s, rss, err = run_measured(diag)
        if rc != 0:
            sys.exit(f"accuracy: {sid}: diagnose failed ({rc}): {err.strip()}")
        with open(os.path.join(d, "truth.json")) as fh:
            truth = json.load(fh)
        with open(js) as fh:
            diagnosis = json.load(fh)
        sc = score(diagnosis, truth)
        row = {
            "id": sid, "workers": size, "layout": layout, "seed": seed, "case": case + opts,
            "faults": faults,
            "simulate_cmd": " ".join(sim), "diagnose_cmd": " ".join(diag),
            "truth": [{k: (v if k != "ranks" or len(v) <= 16 else v[:16] + [f"... {len(v)}"])
                       for k, v in t.items()} for t in truth["faults"]],
            "first_findings": [brief(f) for f in (diagnosis.get("findings") or [])[:4]],
            "score": sc, "simulate_s": sim_s, "diagnose_s": diag_s, "diagnose_rss_mb": rss,
        }
        rows.append(row)
        ok = "ok  " if sc["top1"] and not sc["false_findings"] else "FAIL"
        first = row["first_findings"][0] if row["first_findings"] else None
        print(f"[{i + 1}/{len(scenarios)}] {ok} {sid} {' '.join(faults)} -> "
              + (f"{first['category']} {first['class']} ranks={first['ranks'][:6]} "
                 f"{first['evidence']}" if first else "no finding")
              + f" (+{max(0, sc['findings'] - 1)} more, {sc['false_findings']} false;"
              f" sim {sim_s:.1f}s diag {diag_s:.1f}s {rss:.0f}MB)", flush=True)
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
        # Written after every scenario, so an interrupted run keeps what it measured.
        write(args.out, binary, t_all, layouts, None, rows)
    print()
    aggs = table(rows)
    if len(magnitudes) > 1 or len(everies) > 1:
        magnitude_table(rows, magnitudes, everies)
    write(args.out, binary, t_all, layouts, aggs, rows)
    print(f"\nwrote {args.out} ({len(rows)} scenarios, {time.monotonic() - t_all:.0f} s)")


if __name__ == "__main__":
    main()
