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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (end_process, add_model_args, allreduce_mean, build_mlp, job_parser, start_job,  # noqa: E402
                    train_classifier)


def parse_args(argv=None):
    p = job_parser(__doc__, steps=60, step_sleep_ms=60.0, fault_work=16, batch=32)
    p.add_argument("--tp", type=int, default=2, help="tensor parallel size (dp = WORLD_SIZE / tp)")
    p.add_argument("--dp", choices=["fsdp", "allreduce"], default="fsdp", help="data-parallel gradient sync")
    add_model_args(p)
    return p.parse_args(argv)


def main():
    args = parse_args()
    env, _, timer = start_job(args, "tp_dp")
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if env.world % args.tp:
        sys.exit(f"WORLD_SIZE {env.world} is not a multiple of --tp {args.tp}")
    dp_size = env.world // args.tp
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dp_size, args.tp), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()

    model = build_mlp(args)  # same seed on every rank: same full weights before sharding
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

    def allreduce_grads():
        """--dp allreduce: average every gradient's local shard over the dp group, one flat buffer."""
        allreduce_mean([p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                        for p in model.parameters() if p.grad is not None], dp_group, dp_size)

    train_classifier(args, env, timer, model, dp_rank, dp_size,
                     after_backward=allreduce_grads if args.dp == "allreduce" else None)


if __name__ == "__main__":
    main()
    end_process()
