#!/usr/bin/env python3
"""Hand-written pipeline parallel x data parallel job (Megatron-style loop with plain
dist.send / dist.recv), gloo on CPU.

Shape and roles (4 ranks, the same 2x2 layout as pipeline.py): rank = 2 * replica + stage,
  rank 0: replica 0, stage 0 (DataLoader, input projection + first blocks)
  rank 1: replica 0, stage 1 (last blocks + head + loss; no DataLoader)
  rank 2: replica 1, stage 0
  rank 3: replica 1, stage 1
  pipeline pairs (P2P): 0 <-> 1, 2 <-> 3;  dp groups (gradient all-reduce): {0, 2}, {1, 3}
Every step runs --microbatches microbatches GPipe-style (all forwards, then all backwards):
stage 0 forwards each microbatch and dist.send()s its activation to stage 1, which dist.recv()s it
into a fresh leaf tensor, forwards, computes the loss against targets it regenerates from the seed
(common.ReplicaBatches gives the step's sample indices: no DataLoader on stage 1). Then stage 1
runs backward per microbatch and dist.send()s the activation gradient back; stage 0 dist.recv()s it
and runs backward from its activation. Each stage then all-reduces (averages) its gradients with
the same stage of the other replica (one flat dist.all_reduce on its dp group) and steps its own
torch.optim.AdamW. The math is the same as pipeline.py's (same model, data, loss scaling).

Fault: --fault straggler --fault-rank R --fault-start K: from step K on, rank R does --fault-work
extra 512x512 matrix multiplies at the start of its step. With R=2 (stage 0 of replica 1) rank 3
waits in dist.recv for its activations, ranks 0/1 in the dp all-reduce.

Run (one rank per process, 4 ranks, external launcher):
  torchrun --standalone --nproc-per-node 4 examples/jobs/pipeline_manual.py --steps 60
  torchrun --standalone --nproc-per-node 4 examples/jobs/pipeline_manual.py \\
      --fault straggler --fault-rank 2 --fault-start 20
  perftracker run --nproc 4 -- python examples/jobs/pipeline_manual.py
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (DistEnv, ReplicaBatches, StepTimer, Straggler, SyntheticClassification,  # noqa: E402
                    add_common_args, setup_torch, step_sleep)
from pipeline import STAGES, build_stages  # noqa: E402  (the same model, cut the same way)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, steps=60, step_sleep_ms=60.0, fault_work=16, batch=32)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--blocks", type=int, default=4, help="blocks in all (half on each stage)")
    p.add_argument("--classes", type=int, default=16)
    return p.parse_args(argv)


def main():
    args = parse_args()
    env = DistEnv()
    torch = setup_torch(args)
    import torch.distributed as dist
    import torch.nn.functional as F

    timer = StepTimer(args, env.rank, "pipeline_manual")
    if env.world % STAGES:
        sys.exit(f"WORLD_SIZE {env.world} is not a multiple of {STAGES} stages")
    replicas = env.world // STAGES
    dist.init_process_group("gloo")
    stage_idx, replica = env.rank % STAGES, env.rank // STAGES
    # dp groups: the same stage of every replica. new_group is collective: every rank makes all.
    dp_groups = [dist.new_group([r * STAGES + s for r in range(replicas)]) for s in range(STAGES)]
    dp_group = dp_groups[stage_idx]
    is_first, is_last = stage_idx == 0, stage_idx == STAGES - 1
    next_rank, prev_rank = env.rank + 1, env.rank - 1

    module = build_stages(args)[stage_idx]
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    params = list(module.parameters())
    M = args.microbatches
    micro = args.batch // M

    task = SyntheticClassification(8192, args.dim, args.classes, args.seed)
    order = ReplicaBatches(task.n, args.batch, replica, replicas, args.seed)
    if is_first:
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(task.x), batch_sampler=order)
        batches = iter(loader)
    straggler = Straggler(args, env.rank)

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
        loss_value = None
        if is_first:
            (x,) = next(batches)
            outs = []
            for mb in x.chunk(M):  # forwards: send activations downstream
                out = module(mb)
                dist.send(out.detach().contiguous(), dst=next_rank)
                outs.append(out)
            for out in outs:  # backwards: receive the activation gradients
                grad = torch.empty_like(out)
                dist.recv(grad, src=next_rank)
                out.backward(grad)
        else:
            y = task.y[order.step(step)].chunk(M)  # no DataLoader: targets from the seed
            acts, losses = [], []
            for i in range(M):
                act = torch.empty(micro, args.dim)
                dist.recv(act, src=prev_rank)
                act.requires_grad_()
                losses.append(F.cross_entropy(module(act), y[i]))
                acts.append(act)
            for act, loss in zip(acts, losses):
                (loss / M).backward()
                dist.send(act.grad, dst=prev_rank)
            loss_value = torch.stack([l.detach() for l in losses]).mean().item()
        allreduce_grads()
        step_sleep(args)
        opt.step()
        opt.zero_grad()
        timer.stop(step)
        if loss_value is not None and replica == 0 and args.print_every and \
                (step % args.print_every == 0 or step == args.steps - 1):
            print(f"[pipeline_manual] rank {env.rank} (last stage) step {step} loss {loss_value:.4f}", flush=True)

    timer.finish()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
