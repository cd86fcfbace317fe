"""A one-process CPU training loop profiled with torch.profiler's profile_memory=True: the trace
holds the allocator's totals after every allocation and free. Used by tests/test_trace_memory.py.

  python memory_job.py OUT.json [--leak-mib M] [--batch B] [--steps N] [--with-stack]

--leak-mib keeps a tensor of M MiB every step (a history that holds what it should not, in
remember()); --with-stack records the Python frames too (where the kept memory was allocated);
--batch sets the activations' size (the peak); the profiler records every step after two
(one waiting, one warming up)."""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def remember(kept, mib):
    kept.append(torch.ones(int(mib * 2**20) // 4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--leak-mib", type=float, default=0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--with-stack", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=a.with_stack,
                 schedule=schedule(wait=1, warmup=1, active=a.steps - 2),
                 on_trace_ready=lambda p: p.export_chrome_trace(a.out)) as prof:
        for _ in range(a.steps):
            loss = model(torch.randn(a.batch, 512)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if a.leak_mib:
                remember(kept, a.leak_mib)
            prof.step()


if __name__ == "__main__":
    main()
