#!/usr/bin/env python3
"""Builds a large benchmark input from a real shared Kineto trace: its events replicated in time
(ProfilerStep numbers and correlation ids renumbered) until each file reaches --mb megabytes,
written as --ranks files with distributedInfo.rank changed.

  python3 bench/make_big_traces.py --src ../shared/traces/kineto/resnet_ns_rank-0.pt.trace.json.gz \
      --ranks 8 --mb 54 -o /tmp/big
"""
import argparse
import gzip
import json
import os
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=54)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    opener = gzip.open if a.src.endswith(".gz") else open
    with opener(a.src, "rt") as f:
        d = json.load(f)
    events = d["traceEvents"]
    timed = [e for e in events if "ts" in e]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed)
    span = t1 - t0
    steps = [int(m.group(1)) for e in events if (m := re.match(r"ProfilerStep#(\d+)", e.get("name", "")))]
    nsteps = (max(steps) - min(steps) + 1) if steps else 0
    os.makedirs(a.out, exist_ok=True)
    one = len(json.dumps(events))
    copies = max(1, int(a.mb * 1e6 / one + 0.5))
    for r in range(a.ranks):
        meta = {k: v for k, v in d.items() if k != "traceEvents"}
        di = dict(meta.get("distributedInfo", {}))
        di.update(rank=r, world_size=a.ranks)
        meta["distributedInfo"] = di
        path = os.path.join(a.out, f"rank-{r}.pt.trace.json")
        with open(path, "w") as f:
            head = json.dumps(meta)[:-1]
            f.write(head + ', "traceEvents": [\n')
            first = True
            for c in range(copies):
                shift = c * (span + 1000.0)
                for e in events:
                    e2 = dict(e)
                    if "ts" in e2:
                        e2["ts"] = float(e2["ts"]) + shift
                    name = e2.get("name", "")
                    if nsteps and name.startswith("ProfilerStep#"):
                        e2["name"] = f"ProfilerStep#{int(name[13:]) + c * nsteps}"
                    if c and "args" in e2:
                        args = dict(e2["args"])
                        for k in ("External id", "correlation"):
                            if isinstance(args.get(k), int):
                                args[k] += c * 10_000_000
                        e2["args"] = args
                    if c and e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                        e2["id"] += c * 10_000_000
                    f.write(("" if first else ",\n") + json.dumps(e2))
                    first = False
            f.write("\n]}\n")
        print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB, {copies} copies of {len(events)} events")


if __name__ == "__main__":
    main()
