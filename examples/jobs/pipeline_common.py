"""What pipeline.py (torch.distributed.pipelining) and pipeline_manual.py (hand-written P2P)
share: the 2-stage layout, their flags, the model cut in two stages, each stage's data (a
DataLoader on stage 0 only; the last stage regenerates its targets from the seed) and the step
loop around the pipeline's forward/backward (straggler, gradient average over the dp group,
--step-sleep-ms wait, optimizer step, timing, the last stage's loss line)."""
import sys

from common import (ReplicaBatches, SlowCollate, Straggler, SyntheticClassification, add_model_args,
                    allreduce_mean, finish_job, job_parser, mlp_block, step_sleep)

STAGES = 2


def pipeline_parser(doc):
    """The common flags and --microbatches; the script adds its own, then add_pipeline_model_args."""
    p = job_parser(doc, steps=60, step_sleep_ms=60.0, fault_work=16, batch=32)
    p.add_argument("--microbatches", type=int, default=4)
    return p


def add_pipeline_model_args(p):
    return add_model_args(p, blocks=4, blocks_help="blocks in all (half on each stage)")


def build_stages(args):
    """The whole model (same seed everywhere), cut in two stage modules."""
    import torch.nn as nn
    d, half = args.dim, args.blocks // 2
    blocks = [mlp_block(d) for _ in range(args.blocks)]
    stage0 = nn.Sequential(nn.Linear(d, d), *blocks[:half])
    stage1 = nn.Sequential(*blocks[half:], nn.LayerNorm(d), nn.Linear(d, args.classes))
    return [stage0, stage1]


def init_pipeline(env):
    """Check that WORLD_SIZE is a multiple of STAGES, start gloo; returns the number of replicas."""
    import torch.distributed as dist
    if env.world % STAGES:
        sys.exit(f"WORLD_SIZE {env.world} is not a multiple of {STAGES} stages")
    dist.init_process_group("gloo")
    return env.world // STAGES


class StageData:
    """One stage's data: stage 0 reads the replica's batches from a DataLoader (next_inputs()),
    the last stage has no DataLoader and regenerates step k's targets from the seed (targets(k))."""

    def __init__(self, args, replica, replicas, is_first, rank):
        import torch.utils.data
        self.task = SyntheticClassification(8192, args.dim, args.classes, args.seed)
        self.order = ReplicaBatches(self.task.n, args.batch, replica, replicas, args.seed)
        self.batches = None
        if is_first:
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(self.task.x),
                                                 batch_sampler=self.order, collate_fn=SlowCollate(args, rank))
            self.batches = iter(loader)

    def next_inputs(self):
        (x,) = next(self.batches)
        return x

    def targets(self, step):
        return self.task.y[self.order.step(step)]


def run_pipeline_steps(args, env, timer, replica, replicas, dp_group, module, opt, pipeline_step):
    """--steps steps: the straggler's work, pipeline_step(step) (forwards and backwards of the
    microbatches; returns the last stage's mean loss, None on other stages), the gradient average
    with the same stage of the other replicas, the wait, the optimizer step. Then finish_job."""
    straggler = Straggler(args, env.rank)
    params = list(module.parameters())
    for step in range(args.steps):
        timer.start(step)
        straggler.maybe_work(step)
        loss = pipeline_step(step)
        allreduce_mean([p.grad for p in params], dp_group, replicas)
        step_sleep(args)
        opt.step()
        opt.zero_grad()
        timer.stop(step)
        if loss is not None and replica == 0 and args.print_every and \
                (step % args.print_every == 0 or step == args.steps - 1):
            print(f"[{timer.name}] rank {env.rank} (last stage) step {step} loss {loss:.4f}", flush=True)
        if timer.ends(step):
            break
    finish_job(timer)
