#!/usr/bin/env python3
"""What recording allocations costs a step: the memory growth's window runs torch.profiler with
profile_memory and with_stack on the growing ranks (pattern/memory_sites.h places the memory
they keep). One process, CPU, an 8-layer MLP trained with Adam; not a CI test.

  .venv/bin/python bench/memory_recording_cost.py [--windows 3] [--steps 10] [--layers 8]

Prints the median step (ms) unprofiled, under torch.profiler alone, with profile_memory, and
with profile_memory and with_stack, each the median of --windows windows of --steps steps."""
import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--layers", type=int, default=8)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(a.layers)])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def step():
        loss = model(torch.randn(256, 512)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    def window(**profiler_args):
        times = []
        with profile(activities=[ProfilerActivity.CPU], **profiler_args):
            for _ in range(a.steps):
                t = time.perf_counter()
                step()
                times.append(time.perf_counter() - t)
        return statistics.median(times) * 1000

    for _ in range(5):  # warm-up: the optimizer's state, the allocator's caches
        step()
    plain = []
    for _ in range(a.steps * a.windows):
        t = time.perf_counter()
        step()
        plain.append(time.perf_counter() - t)
    result = {"unprofiled": statistics.median(plain) * 1000}
    for name, args in [("profiler", {}), ("profile_memory", {"profile_memory": True}),
                       ("profile_memory+with_stack", {"profile_memory": True, "with_stack": True})]:
        result[name] = statistics.median(window(**args) for _ in range(a.windows))
    for name, ms in result.items():
        print(f"{name:>26}: {ms:6.2f} ms a step ({ms / result['unprofiled']:.2f}x unprofiled)")


if __name__ == "__main__":
    main()
