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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import end_process, add_model_args, build_mlp, job_parser, start_job, train_classifier  # noqa: E402


def parse_args(argv=None):
    p = add_model_args(job_parser(__doc__, steps=60, step_sleep_ms=60.0, fault_work=16, batch=32))
    p.add_argument("--reshard-after-forward", type=int, default=1,
                   help="1: free the gathered block parameters after forward, gather again in backward")
    return p.parse_args(argv)


def main():
    args = parse_args()
    env, _, timer = start_job(args, "fsdp2")
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (env.world,), mesh_dim_names=("dp",))

    model = build_mlp(args)  # same seed on every rank: same initial weights before sharding
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=bool(args.reshard_after_forward))
    fully_shard(model, mesh=mesh, reshard_after_forward=bool(args.reshard_after_forward))
    # backward: reduce-scatter of the gradients (averaged over the mesh)
    train_classifier(args, env, timer, model, env.rank, env.world)


if __name__ == "__main__":
    main()
    end_process()
