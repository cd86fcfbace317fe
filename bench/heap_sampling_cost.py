#!/usr/bin/env python3
"""What sampling the Python heap adds to a profiling window (worker/heap_sampler.h), in one
process (no agent, no ranks), on the worst case for it: a step made of Python allocations.

Each step makes --dicts small dicts and lets them go (a step's temporaries: every one an
allocation and a free through the hooks) and keeps a list of --floats floats (a metrics history:
what the sampler is there to find). Windows of --window steps alternate without and with
sample_heap, --repeats of each; printed: the median step outside windows, in a window without
and with the sampling, and where the sampling placed the kept memory and how much per step.

  PYTHONPATH=build/python /usr/bin/python3 bench/heap_sampling_cost.py [--dicts 20000]
      [--floats 32768] [--window 15] [--repeats 6]
"""
import argparse
import json
import os
import statistics
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dicts", type=int, default=20000)
    ap.add_argument("--floats", type=int, default=32768, help="kept per step (32 bytes each)")
    ap.add_argument("--window", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=6)
    a = ap.parse_args()
    from perftracker import _worker as w
    assert w.install({"window": 5})
    history = []

    def remember(n):
        history.append([float(i) for i in range(n)])

    def scratch(n):
        return len([{"a": i} for i in range(n)])

    tmp = tempfile.mkdtemp(prefix="pt_heap_bench_")
    medians = {"outside": [], "window": [], "window+heap": []}
    last = None
    for rep in range(a.repeats):
        for heap in (False, True):
            path = os.path.join(tmp, f"rank-0.{rep}.{int(heap)}.python.json")
            times = []
            for k in range(a.window + 10):
                w.on_loader_next()
                if k == 2:
                    assert w.start_window(a.window, 60.0, path, -1, heap)
                t0 = time.perf_counter()
                scratch(a.dicts)
                remember(a.floats)
                times.append(time.perf_counter() - t0)
                w.on_optimizer_step()
            medians["window+heap" if heap else "window"].append(statistics.median(times[4:a.window + 2]))
            medians["outside"].append(statistics.median(times[a.window + 4:]))
            for _ in range(200):
                if os.path.exists(path):
                    break
                time.sleep(0.01)
            if heap:
                last = path
            history.clear()
    for k, v in medians.items():
        print(f"{k:>12}: median step {1000 * statistics.median(v):.2f} ms")
    with open(last) as f:
        d = json.load(f)
    kept = d["kept_memory"]
    names, nodes = d["names"], d["nodes"]
    per_node = {}
    for node, it, b, *_ in kept["cells"]:
        if 0 <= it < len(d["iterations"]) - 1:
            per_node[names[nodes[node][1]]] = per_node.get(names[nodes[node][1]], 0) + b
    top = max(per_node.items(), key=lambda x: x[1]) if per_node else ("nothing", 0)
    print(f"kept most at {top[0]}: {top[1] / (len(d['iterations']) - 1) / 2 ** 20:.2f} MiB a step "
          f"(kept {a.floats * 32 / 2 ** 20:.2f}); {kept['samples']} samples in the last window")
    w.uninstall()


if __name__ == "__main__":
    main()
