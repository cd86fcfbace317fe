#!/usr/bin/env python3
"""DDP of a torch.compile'd model (TorchDynamo + Inductor, C++ kernels built with g++ on CPU),
gloo on CPU.

Shape and roles: every rank is an identical DistributedDataParallel replica (4 ranks by default;
2 work as well) of a small pre-norm residual MLP. The model is compiled
(torch.compile(model), Inductor backend) and the compiled module is wrapped in
DistributedDataParallel: DDP's gradient hooks all-reduce (average) the gradients that the compiled
backward produces. Every rank has a DataLoader over its own slice of a synthetic classification
dataset (common.ReplicaBatches as the batch_sampler). torch.optim.AdamW on every rank.

Compilation: the first step compiles (forward and backward graphs), later steps run Inductor's
fused C++ kernels. To keep that short on a few shared cores:
  - TORCHINDUCTOR_COMPILE_THREADS=1 (no pool of compile workers per rank), unless already set;
  - all ranks share one Inductor cache (TORCHINDUCTOR_CACHE_DIR, --cache-dir; the default is
    Inductor's own, /tmp/torchinductor_$USER, already shared by the ranks of one host);
  - --compile-first (default on): rank 0 compiles first (a forward/backward on a dummy batch,
    outside DDP, gradients dropped) while the other ranks wait in a barrier; they then find the
    compiled graphs in the shared cache (FX graph / AOTAutograd caches) instead of all compiling
    the same thing at once. A second run finds everything in the cache.
Rank 0 reports compile_s (its warm-up compile), and first_step_s (the other ranks' cached
compile + the first DDP step) in the summary and in --times.

Fault: --fault straggler --fault-rank R --fault-start K: from step K on, rank R does --fault-work
extra 512x512 matrix multiplies (eager, outside the compiled graph) after its forward, before
backward, so the other ranks wait for it in DDP's gradient all-reduce.

Run (one rank per process, external launcher):
  torchrun --standalone --nproc-per-node 4 examples/jobs/compiled.py --steps 60
  torchrun --standalone --nproc-per-node 4 examples/jobs/compiled.py --fault straggler --fault-rank 2 --fault-start 20
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind-cache torchrun --standalone --nproc-per-node 2 examples/jobs/compiled.py
  perftracker run --nproc 4 -- python examples/jobs/compiled.py
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import end_process, add_model_args, build_mlp, job_parser, start_job, train_classifier  # noqa: E402


def parse_args(argv=None):
    p = add_model_args(job_parser(__doc__, steps=60, step_sleep_ms=60.0, fault_work=16, batch=32))
    p.add_argument("--cache-dir", default="", help="TORCHINDUCTOR_CACHE_DIR for every rank (default: Inductor's)")
    p.add_argument("--optimize-ddp", type=int, default=0,
                   help="1: let Dynamo's DDPOptimizer split the graph at DDP's bucket boundaries "
                        "(torch._dynamo.config.optimize_ddp); then the warm-up outside DDP compiles other graphs")
    p.add_argument("--compile-first", type=int, default=1,
                   help="1: rank 0 compiles first, the others wait and then use the shared cache")
    return p.parse_args(argv)


def main():
    args = parse_args()
    if args.cache_dir:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.cache_dir
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # read when Inductor is imported
    env, torch, timer = start_job(args, "compiled")
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    import torch._dynamo
    torch._dynamo.config.optimize_ddp = bool(args.optimize_ddp)
    model = build_mlp(args)
    compiled = torch.compile(model)

    if args.compile_first:
        if env.rank == 0:
            t = time.perf_counter()
            dummy = torch.randn(args.batch, args.dim)
            compiled(dummy).float().sum().backward()
            model.zero_grad(set_to_none=True)
            timer.extra["compile_s"] = round(time.perf_counter() - t, 2)
            print(f"[compiled] rank 0 compiled forward+backward in {timer.extra['compile_s']} s", flush=True)
        dist.barrier()

    ddp = DDP(compiled)
    train_classifier(args, env, timer, ddp, env.rank, env.world)  # backward: compiled, then DDP's all-reduce


if __name__ == "__main__":
    main()
    end_process()
