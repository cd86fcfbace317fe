#!/usr/bin/env python3
"""Builds a large benchmark input from a real shared Kineto trace: its events replicated in time
(ProfilerStep numbers and correlation ids renumbered) until each file reaches --mb megabytes,
written as --ranks files with distributedInfo.rank changed. --layout kineto (the default) writes
each event over several indented lines as Kineto does; compact writes one event per line.

  python3 bench/make_big_traces.py --src ../shared/traces/kineto/resnet_ns_rank-0.pt.trace.json.gz \
      --ranks 8 --mb 54 -o /tmp/big
"""
import argparse
import gzip
import json
import os
import re


def kineto_event(e):
    """One event laid out as Kineto writes it: identity keys on one line, times on the next,
    args one level deeper."""
    head = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items()
                     if k not in ("ts", "dur", "args"))
    lines = ["  {", "    " + head + ("," if any(k in e for k in ("ts", "dur", "args")) else "")]
    times = ", ".join(f"{json.dumps(k)}: {json.dumps(e[k])}" for k in ("ts", "dur") if k in e)
    if times:
        lines.append("    " + times + ("," if "args" in e else ""))
    if "args" in e:
        args = ",".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e["args"].items())
        lines += ['    "args": {', "      " + args, "    }"]
    lines.append("  }")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=54)
    ap.add_argument("--layout", choices=["kineto", "compact"], default="kineto")
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
    layout = kineto_event if a.layout == "kineto" else json.dumps
    target = a.mb * 1e6  # events are written until the file reaches this size
    copies = int(target / sum(len(layout(e)) + 2 for e in events)) + 1
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
            written = len(head)
            for c in range(copies):
                shift = c * (span + 1000.0)
                for e in events:
                    if written >= target:
                        break
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
                    text = ("" if first else ",\n") + layout(e2)
                    f.write(text)
                    written += len(text)
                    first = False
            f.write("\n]}\n")
        print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB, events of {len(events)} replicated")


if __name__ == "__main__":
    main()
