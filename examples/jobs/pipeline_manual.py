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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import end_process, start_job  # noqa: E402
from pipeline_common import (STAGES, StageData, add_pipeline_model_args, build_stages,  # noqa: E402
                             init_pipeline, pipeline_parser, run_pipeline_steps)  # pipeline.py's model and data


def parse_args(argv=None):
    return add_pipeline_model_args(pipeline_parser(__doc__)).parse_args(argv)


def main():
    args = parse_args()
    env, torch, timer = start_job(args, "pipeline_manual")
    import torch.distributed as dist
    import torch.nn.functional as F

    replicas = init_pipeline(env)
    stage_idx, replica = env.rank % STAGES, env.rank // STAGES
    # dp groups: the same stage of every replica. new_group is collective: every rank makes all.
    dp_groups = [dist.new_group([r * STAGES + s for r in range(replicas)]) for s in range(STAGES)]
    dp_group = dp_groups[stage_idx]
    is_first = stage_idx == 0
    next_rank, prev_rank = env.rank + 1, env.rank - 1

    module = build_stages(args)[stage_idx]
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    M = args.microbatches
    micro = args.batch // M
    data = StageData(args, replica, replicas, is_first, env.rank)

    def pipeline_step(step):
        if is_first:
            outs = []
            for mb in data.next_inputs().chunk(M):  # forwards: send activations downstream
                out = module(mb)
                dist.send(out.detach().contiguous(), dst=next_rank)
                outs.append(out)
            for out in outs:  # backwards: receive the activation gradients
                grad = torch.empty_like(out)
                dist.recv(grad, src=next_rank)
                out.backward(grad)
            return None
        y = data.targets(step).chunk(M)  # no DataLoader: targets from the seed
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
        return torch.stack([l.detach() for l in losses]).mean().item()

    run_pipeline_steps(args, env, timer, replica, replicas, dp_group, module, opt, pipeline_step)


if __name__ == "__main__":
    main()
    end_process()
