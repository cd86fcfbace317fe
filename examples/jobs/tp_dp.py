#!/usr/bin/env python3
"""Tensor parallel x data parallel job (2-D parallelism) on a 2x2 DeviceMesh, gloo on CPU.

Shape and roles (4 ranks): init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")), so
rank = 2 * dp_index + tp_index:
  tp groups (tensor parallel, Megatron-style MLP):  {0, 1} and {2, 3}
  dp groups (data parallel replicas of one shard):  {0, 2} and {1, 3}
Ranks 0/1 form data-parallel replica 0, ranks 2/3 replica 1. Each MLP block's up projection is
ColwiseParallel and its down projection RowwiseParallel over the tp dimension
(torch.distributed.tensor.parallel.parallelize_module): a forward all-reduce (RowwiseParallel
output) and a backward all-reduce (ColwiseParallel input) inside each tp pair. The data-parallel
gradient sync is either
  --dp fsdp    (default) FSDP2 fully_shard over the dp sub-mesh (mesh["dp"]): the TP DTensor
               parameters are further sharded over dp, all-gathered in forward/backward and their
               gradients reduce-scattered (averaged) over dp, or
  --dp allreduce  the model stays replicated over dp and, after backward, every gradient's local
               shard is all-reduced and averaged over the dp group by hand (dist.all_reduce on
               mesh.get_group("dp")).
Every rank has a DataLoader; the two tp ranks of a replica read the same batches (TP needs the same
input), the two replicas read disjoint halves of the synthetic dataset. torch.optim.AdamW on every
rank.

Fault: --fault straggler --fault-rank R --fault-start K: from step K on, rank R does --fault-work
extra 512x512 matrix multiplies after its forward, before backward: its tp peer waits in the
backward tp all-reduce, its dp peer in the gradient reduce-scatter / all-reduce, and everybody in
the next step.

Run (one rank per process, 4 ranks, external launcher):
  torchrun --standalone --nproc-per-node 4 examples/jobs/tp_dp.py --steps 60
  torchrun --standalone --nproc-per-node 4 examples/jobs/tp_dp.py --fault straggler --fault-rank 2 --fault-start 20
  perftracker run --nproc 4 -- python examples/jobs/tp_dp.py
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
    p.add_argument("--tp", type=int, default=2, help="tensor parallel size (dp = WORLD_SIZE / tp)")
    p.add_argument("--dp", choices=["fsdp", "allreduce"], default="fsdp", help="data-parallel gradient sync")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--classes", type=int, default=16)
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
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    timer = StepTimer(args, env.rank, "tp_dp")
    if env.world % args.tp:
        sys.exit(f"WORLD_SIZE {env.world} is not a multiple of --tp {args.tp}")
    dp_size = env.world // args.tp
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dp_size, args.tp), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()

    model = build_model(args)  # same seed on every rank: same full weights before sharding
    plan = {}
    for i in range(args.blocks):
        plan[f"blocks.{i}.up"] = ColwiseParallel()
        plan[f"blocks.{i}.down"] = RowwiseParallel()
    parallelize_module(model, mesh["tp"], plan)
    if args.dp == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    dp_group = mesh.get_group("dp")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def allreduce_grads():
        """--dp allreduce: average every gradient's local shard over the dp group, one flat buffer."""
        grads = [p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                 for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=dp_group)
        flat /= dp_size
        off = 0
        for g in grads:
            g.copy_(flat[off:off + g.numel()].view_as(g))
            off += g.numel()

    task = SyntheticClassification(8192, args.dim, args.classes, args.seed)
    loader = torch.utils.data.DataLoader(
        task.dataset(), batch_sampler=ReplicaBatches(task.n, args.batch, dp_rank, dp_size, args.seed))
    batches = iter(loader)
    straggler = Straggler(args, env.rank)

    for step in range(args.steps):
        timer.start(step)
        x, y = next(batches)
        loss = F.cross_entropy(model(x), y)
        straggler.maybe_work(step)
        loss.backward()
        if args.dp == "allreduce":
            allreduce_grads()
        step_sleep(args)
        opt.step()
        opt.zero_grad()
        timer.stop(step, loss.item())

    timer.finish()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
