#!/usr/bin/env python3
"""What a growing rank's memory window adds to its steps, and whether it places the kept memory
right, in one process (no agent, no ranks). Windows of --window steps alternate without and with
the recording, --repeats of each; printed: the median step outside windows, in a window without
and with it, and where the last window placed the kept memory and how much per step.

--workload python (the worst case for sampling the Python heap, worker/heap_sampler.h): each
step makes --dicts small dicts and lets them go (a step's temporaries: every one an allocation
and a free through the hooks) and keeps a list of --floats floats (a metrics history: what the
sampler is there to find). The window's recording: sample_heap.

--workload tensors (following tensors where torch records no allocations itself,
python/perftracker/kept_tensors.py: torch 1.13 as Debian ships it): each step trains a small MLP
on CPU (forward, backward, SGD: --width wide, --layers deep) and keeps --kept-kib of a fresh
tensor (torch.ones: the leak to place). The window's recording: sample_heap and the tensors
followed (the window without it samples the heap alone).

  PYTHONPATH=build/python /usr/bin/python3 bench/heap_sampling_cost.py [--workload python]
      [--dicts 20000] [--floats 32768] [--width 256] [--layers 4] [--kept-kib 1024]
      [--window 15] [--repeats 6]
"""
import argparse
import json
import os
import statistics
import tempfile
import time

ARMED, ENDED = 1, 2


def python_workload(a):
    """(step, what a step keeps in bytes, forget what was kept, start/stop of the tensor
    following: None) for --workload python."""
    history = []

    def remember(n):
        history.append([float(i) for i in range(n)])

    def scratch(n):
        return len([{"a": i} for i in range(n)])

    def step():
        scratch(a.dicts)
        remember(a.floats)

    return step, a.floats * 32, history.clear, None


def tensor_workload(a, w):
    """The same for --workload tensors; the last is a function making a tensor recorder."""
    import torch
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

    return train_step, a.kept_kib * 1024, kept.clear, lambda: KeptTensors(torch, w)


def kept_per_step(path):
    """The last window's place (node name, op or "") that kept most, and its bytes per step."""
    with open(path) as f:
        d = json.load(f)
    names, nodes = d["names"], d["nodes"]
    per_place = {}
    for cell in d["kept_memory"]["cells"]:
        node, it, b = cell[:3]
        if 0 <= it < len(d["iterations"]) - 1:
            place = (names[nodes[node][1]], names[cell[4]] if len(cell) > 4 else "")
            per_place[place] = per_place.get(place, 0) + b
    top = max(per_place.items(), key=lambda x: x[1]) if per_place else (("nothing", ""), 0)
    return top[0], top[1] / (len(d["iterations"]) - 1), d["kept_memory"]["samples"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["python", "tensors"], default="python")
    ap.add_argument("--dicts", type=int, default=20000)
    ap.add_argument("--floats", type=int, default=32768, help="kept per step (32 bytes each)")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kept-kib", type=int, default=1024)
    ap.add_argument("--window", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=6)
    a = ap.parse_args()
    from perftracker import _worker as w
    if a.workload == "python":
        step, kept_bytes, forget, recorder_of = python_workload(a)
    else:
        step, kept_bytes, forget, recorder_of = tensor_workload(a, w)
    assert w.install({"window": 5})
    tmp = tempfile.mkdtemp(prefix="pt_heap_bench_")
    label = "window+heap" if recorder_of is None else "window+following"
    medians = {"outside": [], "window": [], label: []}
    last = None
    for rep in range(a.repeats):
        for recording in (False, True):
            path = os.path.join(tmp, f"rank-0.{rep}.{int(recording)}.python.json")
            times = []
            recorder = None
            for k in range(a.window + 10):
                edge = w.on_loader_next()
                if edge == ENDED and recorder is not None:
                    recorder.stop()
                    recorder = None
                if edge == ARMED and recording and recorder_of is not None:
                    recorder = recorder_of()
                    assert recorder.start()
                if k == 2:
                    # The python workload's window without recording samples nothing; the
                    # tensors' samples the heap in both (only the following differs).
                    assert w.start_window(a.window, 60.0, path, -1,
                                          recording or recorder_of is not None)
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
                w.on_optimizer_step()
            assert recorder is None
            medians[label if recording else "window"].append(statistics.median(times[4:a.window + 2]))
            medians["outside"].append(statistics.median(times[a.window + 4:]))
            for _ in range(200):
                if os.path.exists(path):
                    break
                time.sleep(0.01)
            if recording:
                last = path
            forget()
    for k, v in medians.items():
        print(f"{k:>17}: median step {1000 * statistics.median(v):.2f} ms")
    (node, op), per_step, samples = kept_per_step(last)
    print(f"kept most at {node}{' by ' + op if op else ''}: {per_step / 2 ** 20:.2f} MiB a step "
          f"(kept {kept_bytes / 2 ** 20:.2f}); {samples} samples in the last window")
    w.uninstall()


if __name__ == "__main__":
    main()
