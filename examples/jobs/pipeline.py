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
--fault slow-loader --fault-rank R --fault-ms M (R a stage-0 rank: 0 or 2): from batch K on, R's
DataLoader collate sleeps M ms per batch (common.SlowCollate).

Run (one rank per process, 4 ranks, external launcher):
  torchrun --standalone --nproc-per-node 4 examples/jobs/pipeline.py --steps 60
  torchrun --standalone --nproc-per-node 4 examples/jobs/pipeline.py --fault straggler --fault-rank 2 --fault-start 20
  perftracker run --nproc 4 -- python examples/jobs/pipeline.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import end_process, start_job  # noqa: E402
from pipeline_common import (STAGES, StageData, add_pipeline_model_args, build_stages, init_pipeline,  # noqa: E402
                             pipeline_parser, run_pipeline_steps)


def parse_args(argv=None):
    p = pipeline_parser(__doc__)
    p.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b")
    add_pipeline_model_args(p)
    return p.parse_args(argv)


def main():
    args = parse_args()
    env, torch, timer = start_job(args, "pipeline")
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    replicas = init_pipeline(env)
    mesh = init_device_mesh("cpu", (replicas, STAGES), mesh_dim_names=("dp", "pp"))
    stage_idx = mesh["pp"].get_local_rank()
    replica = mesh["dp"].get_local_rank()
    dp_group = mesh.get_group("dp")

    module = build_stages(args)[stage_idx]
    micro = args.batch // args.microbatches
    example = torch.empty(micro, args.dim)  # what flows between the stages: (microbatch, dim) activations
    stage = PipelineStage(module, stage_idx, STAGES, torch.device("cpu"), input_args=(example,),
                          group=mesh.get_group("pp"))
    is_first = stage_idx == 0
    sched_cls = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
    # Every stage gets the loss_fn: the schedule runs backward only when it has one (only the
    # last stage calls it).
    schedule = sched_cls(stage, n_microbatches=args.microbatches, loss_fn=lambda out, y: F.cross_entropy(out, y))
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    data = StageData(args, replica, replicas, is_first, env.rank)

    def pipeline_step(step):
        if is_first:
            schedule.step(data.next_inputs())
            return None
        # Last stage: no DataLoader; the targets of this step's samples, regenerated from the seed.
        losses = []
        schedule.step(target=data.targets(step), losses=losses)
        return torch.stack(losses).mean().item()

    run_pipeline_steps(args, env, timer, replica, replicas, dp_group, module, opt, pipeline_step)


if __name__ == "__main__":
    main()
    end_process()
