#!/usr/bin/env python3
"""FSDP2 job: a small pre-norm residual MLP "transformer-ish" model sharded with
torch.distributed.fsdp.fully_shard over a 1-D DeviceMesh (init_device_mesh("cpu", (WORLD_SIZE,))),
gloo on CPU.

Shape and roles: every rank is an identical data-parallel FSDP rank (default 4 ranks). Each block
and then the root are fully_shard-ed: parameters are sharded 1/WORLD_SIZE per rank, all-gathered
before each block's forward and backward, and the gradients are reduce-scattered (averaged over
ranks) during backward; each rank's torch.optim.AdamW updates its own shards. Every rank has a
DataLoader over the same synthetic classification dataset, each reading its own slice
(common.ReplicaBatches as the batch_sampler).

Fault: --fault straggler --fault-rank R --fault-start K: from step K on, rank R does --fault-work
extra 512x512 matrix multiplies after its forward, before backward, so the other ranks wait for
it in the backward reduce-scatters (and in the next all-gathers).

Run (one rank per process, external launcher):
  torchrun --standalone --nproc-per-node 4 examples/jobs/fsdp2.py --steps 60
  torchrun --standalone --nproc-per-node 4 examples/jobs/fsdp2.py --fault straggler --fault-rank 2 --fault-start 20
  perftracker run --nproc 4 -- python examples/jobs/fsdp2.py
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (DistEnv, ReplicaBatches, StepTimer, Straggler, SyntheticClassification,  # noqa: E402
                    add_common_args, setup_torch, step_sleep)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, steps=60, step_sleep_ms=60.0, fault_work=16, batch=32)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--reshard-after-forward", type=int, default=1,
                   help="1: free the gathered block parameters after forward, gather again in backward")
    return p.parse_args(argv)


def build_model(args):
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.act = nn.GELU()
            self.down = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.down(self.act(self.up(self.norm(x))))

    class Net(nn.Module):
        def __init__(self, d, blocks, classes):
            super().__init__()
            self.blocks = nn.ModuleList(Block(d) for _ in range(blocks))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x))

    return Net(args.dim, args.blocks, args.classes)


def main():
    args = parse_args()
    env = DistEnv()
    torch = setup_torch(args)
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    timer = StepTimer(args, env.rank, "fsdp2")
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (env.world,), mesh_dim_names=("dp",))

    model = build_model(args)  # same seed on every rank: same initial weights before sharding
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=bool(args.reshard_after_forward))
    fully_shard(model, mesh=mesh, reshard_after_forward=bool(args.reshard_after_forward))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    task = SyntheticClassification(8192, args.dim, args.classes, args.seed)
    loader = torch.utils.data.DataLoader(
        task.dataset(), batch_sampler=ReplicaBatches(task.n, args.batch, env.rank, env.world, args.seed))
    batches = iter(loader)
    straggler = Straggler(args, env.rank)

    for step in range(args.steps):
        timer.start(step)
        x, y = next(batches)
        loss = F.cross_entropy(model(x), y)
        straggler.maybe_work(step)
        loss.backward()  # reduce-scatter of the gradients (averaged over the mesh)
        step_sleep(args)
        opt.step()
        opt.zero_grad()
        timer.stop(step, loss.item())

    timer.finish()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
