#!/usr/bin/env python3
"""Pipeline parallel x data parallel job with torch.distributed.pipelining, gloo on CPU.

Shape and roles (4 ranks): init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "pp")), so
rank = 2 * replica + stage:
  rank 0: replica 0, stage 0 (first stage: DataLoader, input projection + first blocks)
  rank 1: replica 0, stage 1 (last stage: last blocks + head + loss)
  rank 2: replica 1, stage 0
  rank 3: replica 1, stage 1
  pp groups (activations forward, gradients backward): {0, 1}, {2, 3}
  dp groups (gradient all-reduce between the replicas of a stage): {0, 2}, {1, 3}
Each stage is a torch.distributed.pipelining.PipelineStage on its replica's pp group; a
Schedule1F1B (or --schedule gpipe: ScheduleGPipe) runs --microbatches microbatches per step
(activations and gradients go by P2P between the two stages). ONLY stage 0 has a DataLoader. The
last stage has no DataLoader: it regenerates the targets of the step's samples from the seed (the
synthetic task and the per-replica batch order, common.ReplicaBatches, are deterministic) and the
schedule computes the loss there. After the schedule, each stage all-reduces (averages) its
gradients with the same stage of the other replica over the dp group by hand (one flat
dist.all_reduce), then each stage steps its own torch.optim.AdamW.

Fault: --fault straggler --fault-rank R --fault-start K: from step K on, rank R does --fault-work
extra 512x512 matrix multiplies before its pipeline schedule step. With R=2 (stage 0 of replica 1)
rank 3 waits for its activations, and ranks 0/1 wait for 2/3 in the dp all-reduce.

Run (one rank per process, 4 ranks, external launcher):
  torchrun --standalone --nproc-per-node 4 examples/jobs/pipeline.py --steps 60
  torchrun --standalone --nproc-per-node 4 examples/jobs/pipeline.py --fault straggler --fault-rank 2 --fault-start 20
  perftracker run --nproc 4 -- python examples/jobs/pipeline.py
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (DistEnv, ReplicaBatches, StepTimer, Straggler, SyntheticClassification,  # noqa: E402
                    add_common_args, setup_torch, step_sleep)

STAGES = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, steps=60, step_sleep_ms=60.0, fault_work=16, batch=32)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--blocks", type=int, default=4, help="blocks in all (half on each stage)")
    p.add_argument("--classes", type=int, default=16)
    return p.parse_args(argv)


def build_stages(args):
    """The whole model (same seed everywhere), cut in two stage modules."""
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

    d, half = args.dim, args.blocks // 2
    blocks = [Block(d) for _ in range(args.blocks)]
    stage0 = nn.Sequential(nn.Linear(d, d), *blocks[:half])
    stage1 = nn.Sequential(*blocks[half:], nn.LayerNorm(d), nn.Linear(d, args.classes))
    return [stage0, stage1]


def main():
    args = parse_args()
    env = DistEnv()
    torch = setup_torch(args)
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    timer = StepTimer(args, env.rank, "pipeline")
    if env.world % STAGES:
        sys.exit(f"WORLD_SIZE {env.world} is not a multiple of {STAGES} stages")
    replicas = env.world // STAGES
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (replicas, STAGES), mesh_dim_names=("dp", "pp"))
    stage_idx = mesh["pp"].get_local_rank()
    replica = mesh["dp"].get_local_rank()
    dp_group = mesh.get_group("dp")

    module = build_stages(args)[stage_idx]
    micro = args.batch // args.microbatches
    example = torch.empty(micro, args.dim)  # what flows between the stages: (microbatch, dim) activations
    stage = PipelineStage(module, stage_idx, STAGES, torch.device("cpu"), input_args=(example,),
                          group=mesh.get_group("pp"))
    is_first, is_last = stage_idx == 0, stage_idx == STAGES - 1
    sched_cls = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
    # Every stage gets the loss_fn: the schedule runs backward only when it has one (only the
    # last stage calls it).
    schedule = sched_cls(stage, n_microbatches=args.microbatches, loss_fn=lambda out, y: F.cross_entropy(out, y))
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)

    task = SyntheticClassification(8192, args.dim, args.classes, args.seed)
    order = ReplicaBatches(task.n, args.batch, replica, replicas, args.seed)
    if is_first:
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(task.x), batch_sampler=order)
        batches = iter(loader)
    straggler = Straggler(args, env.rank)
    params = [p for p in module.parameters()]

    def allreduce_grads():
        grads = [p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=dp_group)
        flat /= replicas
        off = 0
        for g in grads:
            g.copy_(flat[off:off + g.numel()].view_as(g))
            off += g.numel()

    for step in range(args.steps):
        timer.start(step)
        straggler.maybe_work(step)
        loss = None
        if is_first:
            (x,) = next(batches)
            schedule.step(x)
        else:
            # Last stage: no DataLoader; the targets of this step's samples, regenerated from the seed.
            y = task.y[order.step(step)]
            losses = []
            schedule.step(target=y, losses=losses)
            loss = torch.stack(losses).mean().item()
        allreduce_grads()
        step_sleep(args)
        opt.step()
        opt.zero_grad()
        timer.stop(step)
        if loss is not None and replica == 0 and args.print_every and \
                (step % args.print_every == 0 or step == args.steps - 1):
            print(f"[pipeline] rank {env.rank} (last stage) step {step} loss {loss:.4f}", flush=True)

    timer.finish()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
