#!/usr/bin/env python3
"""What following a growing rank's tensors adds to its memory window where torch records no
allocations itself (python/perftracker/kept_tensors.py: torch 1.13 as Debian ships it), in one
process (no agent, no ranks), and whether it places the kept tensors right.

Each step trains a small MLP on CPU (forward, backward, SGD: --width wide, --layers deep) and
keeps --kept-kib of a fresh tensor (torch.ones: the leak to place). Windows of --window steps
alternate without and with the following (the heap sampled in both), --repeats of each;
printed: the median step outside windows, in a window without and with the following, the
tensors still followed at the last window's end, and where that window placed the kept tensors
and how much per step.

  PYTHONPATH=build/python /usr/bin/python3 bench/tensor_following_cost.py [--width 256]
      [--layers 4] [--kept-kib 1024] [--window 15] [--repeats 4]
"""
import argparse
import json
import os
import statistics
import tempfile
import time

ARMED, ENDED = 1, 2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kept-kib", type=int, default=1024)
    ap.add_argument("--window", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=4)
    a = ap.parse_args()
    import torch
    from perftracker import _worker as w
    from perftracker.kept_tensors import KeptTensors
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, a.width)
    kept = []

    def keep():
        kept.append(torch.ones(a.kept_kib * 256))  # 4-byte floats

    def train_step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        keep()

    assert w.install({"window": 5})
    tmp = tempfile.mkdtemp(prefix="pt_tensor_bench_")
    medians = {"outside": [], "window": [], "window+following": []}
    last = None
    ops = 0
    for rep in range(a.repeats):
        for follow in (False, True):
            path = os.path.join(tmp, f"rank-0.{rep}.{int(follow)}.python.json")
            times = []
            recorder = None
            for k in range(a.window + 10):
                edge = w.on_loader_next()
                if edge == ENDED and recorder is not None:
                    ops = max(ops, len(recorder._refs))
                    recorder.stop()
                    recorder = None
                if edge == ARMED and follow:
                    recorder = KeptTensors(torch, w)
                    assert recorder.start()
                if k == 2:
                    assert w.start_window(a.window, 60.0, path, -1, True)
                t0 = time.perf_counter()
                train_step()
                times.append(time.perf_counter() - t0)
                w.on_optimizer_step()
            assert recorder is None
            medians["window+following" if follow else "window"].append(
                statistics.median(times[4:a.window + 2]))
            medians["outside"].append(statistics.median(times[a.window + 4:]))
            for _ in range(200):
                if os.path.exists(path):
                    break
                time.sleep(0.01)
            if follow:
                last = path
            kept.clear()
    for k, v in medians.items():
        print(f"{k:>17}: median step {1000 * statistics.median(v):.2f} ms")
    with open(last) as f:
        d = json.load(f)
    names, nodes = d["names"], d["nodes"]
    per_place = {}
    for cell in d["kept_memory"]["cells"]:
        node, it, b = cell[:3]
        if len(cell) > 4 and 0 <= it < len(d["iterations"]) - 1:
            place = (names[nodes[node][1]], names[cell[4]])
            per_place[place] = per_place.get(place, 0) + b
    top = max(per_place.items(), key=lambda x: x[1]) if per_place else (("nothing", ""), 0)
    steps = len(d["iterations"]) - 1
    print(f"tensors followed and alive at the last window's end: {ops}")
    print(f"kept most under {top[0][0]} by {top[0][1]}: {top[1] / steps / 2 ** 10:.0f} KiB a step "
          f"(kept {a.kept_kib} KiB)")
    w.uninstall()


if __name__ == "__main__":
    main()
