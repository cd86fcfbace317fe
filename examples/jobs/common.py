"""Shared pieces of the example jobs in examples/jobs/ (one rank per process, external launcher).

Every job script takes the same fault and timing flags (add_common_args), reads its identity from
the launcher's environment (dist_env), injects the straggler with Straggler, waits with
step_sleep and times its steps with StepTimer, in the style of examples/train_ddp.py:

  --steps N           training steps (optimizer steps)
  --fault none|straggler, --fault-rank R, --fault-start K
                      from step K on, rank R does --fault-work extra --fault-size^2 matrix
                      multiplies every step (real compute, before the step's gradient sync, so
                      the other ranks wait for it)
  --step-sleep-ms MS  every step also sleeps this long (as a GPU-bound step waits for its
                      kernels): with a small model on shared cores the step time is then
                      dominated by a stable wait and is quiet
  --times PATH        rank 0 writes every step's wall time here (JSON: step_s, step_start_ns,
                      and startup_s / first_step_s / extra numbers the script adds); with
                      '{rank}' in PATH every rank writes its own file
  --threads T         torch.set_num_threads (default 1)
  --seed S
  --stop-file PATH    end early, every rank at the same step, once PATH exists (a test that has
                      what it waits for; examples/stop_file.py): StepTimer.ends(step) says when

It also holds what several scripts share: the residual MLP model (mlp_block, build_mlp), its flags
(add_model_args), the per-replica DataLoader (replica_batches), the hand-written gradient average
(allreduce_mean), the classifier training loop (train_classifier) and the end of a job
(finish_job; end_process, examples/stop_file.py, ends its process).
"""
import argparse
import functools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from stop_file import STOP_CHECK_STEPS, StopFile, end_process  # noqa: E402,F401 (end_process: for the jobs)


def process_age_s():
    """Seconds since this process started (interpreter start included), from /proc."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat, counted after the ')' of comm
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def add_common_args(p, steps=60, step_sleep_ms=60.0, fault_work=16, fault_size=512, batch=32):
    p.add_argument("--steps", type=int, default=steps, help="training steps (optimizer steps)")
    p.add_argument("--batch", type=int, default=batch, help="per data-parallel replica batch size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--fault", default="none", choices=["none", "straggler", "slow-loader"],
                   help="straggler: extra matmuls on the rank; slow-loader: its DataLoader's collate "
                        "sleeps --fault-ms a batch (ranks that have a DataLoader)")
    p.add_argument("--fault-ms", type=float, default=40.0, help="sleep per batch (slow-loader)")
    p.add_argument("--fault-rank", type=int, default=2, help="rank with the fault")
    p.add_argument("--fault-start", type=int, default=20, help="first step with the fault")
    p.add_argument("--fault-work", type=int, default=fault_work,
                   help="extra matrix multiplies per step on the faulty rank (straggler)")
    p.add_argument("--fault-size", type=int, default=fault_size, help="size of the straggler's square matrices")
    p.add_argument("--step-sleep-ms", type=float, default=step_sleep_ms,
                   help="every step also waits this long, so the step time is dominated by a stable wait")
    p.add_argument("--times", default="",
                   help="rank 0 writes every step's duration here (JSON); '{rank}' in PATH: every rank writes one")
    p.add_argument("--print-every", type=int, default=10,
                   help="rank 0 prints step time / loss every K steps (0: never)")
    p.add_argument("--stop-file", default="",
                   help="end the run early, every rank at the same step, once this file exists "
                        f"(rank 0 looks every {STOP_CHECK_STEPS} steps; up to --steps)")
    return p


def job_parser(doc, **defaults):
    """The script's ArgumentParser (its docstring as description) with add_common_args(**defaults)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_common_args(p, **defaults)


def add_model_args(p, blocks=2, blocks_help=None):
    """--dim, --blocks, --classes of the residual MLP classifier."""
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--blocks", type=int, default=blocks, **({"help": blocks_help} if blocks_help else {}))
    p.add_argument("--classes", type=int, default=16)
    return p


class DistEnv:
    """The rank's identity as the external launcher (torchrun, perftracker run) set it."""

    def __init__(self):
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            sys.exit(f"{os.path.basename(sys.argv[0])}: run one rank per process under a launcher that sets "
                     f"RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT (missing {', '.join(missing)}), e.g.\n"
                     f"  torchrun --standalone --nproc-per-node 4 {sys.argv[0]}\n"
                     f"  perftracker run --nproc 4 -- python {sys.argv[0]}")
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", self.world))
        self.node_rank = int(os.environ.get("GROUP_RANK", self.rank // max(1, self.local_world)))


def setup_torch(args):
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    return torch


def start_job(args, name):
    """The rank's DistEnv, torch (setup_torch) and the StepTimer of job `name`: (env, torch, timer)."""
    env = DistEnv()
    torch = setup_torch(args)
    return env, torch, StepTimer(args, env.rank, name)


class Straggler:
    """--fault straggler: the faulty rank does --fault-work extra matrix multiplies per step from
    --fault-start on. Call maybe_work(step) inside the step, before the step's gradient sync."""

    def __init__(self, args, rank):
        self.on = args.fault == "straggler" and rank == args.fault_rank
        self.start = args.fault_start
        self.work = args.fault_work
        self.rank = rank
        self.kind = args.fault
        self.mat = None
        if self.on:
            import torch
            g = torch.Generator().manual_seed(1234)
            self.mat = torch.randn(args.fault_size, args.fault_size, generator=g) / args.fault_size ** 0.5
        self.announced = False

    def active(self, step):
        return self.on and step >= self.start

    def maybe_work(self, step):
        if not self.active(step):
            return
        if not self.announced:
            self.announced = True
            # Tests measure the time from here to the diagnosis (same line as train_ddp.py).
            print(f"rank {self.rank}: fault {self.kind} on at step {step} (unix {time.time():.3f})",
                  file=sys.stderr, flush=True)
        import torch
        m = self.mat
        for _ in range(self.work):
            m = torch.mm(m, self.mat)
        return m


class SlowCollate:
    """--fault slow-loader: the faulty rank's DataLoader collate function sleeps --fault-ms per
    batch from batch --fault-start on (a slow data source or decoder on one rank), then collates
    as the default does. Pass it as the DataLoader's collate_fn on every rank."""

    def __init__(self, args, rank):
        self.on = args.fault == "slow-loader" and rank == args.fault_rank
        self.start, self.ms, self.rank, self.batches = args.fault_start, args.fault_ms, rank, 0

    def __call__(self, batch):
        import torch.utils.data
        if self.on and self.batches >= self.start:
            if self.batches == self.start:
                print(f"rank {self.rank}: fault slow-loader on at step {self.batches} (unix {time.time():.3f})",
                      file=sys.stderr, flush=True)
            time.sleep(self.ms / 1000.0)
        self.batches += 1
        return torch.utils.data.default_collate(batch)


def step_sleep(args):
    if args.step_sleep_ms > 0:
        time.sleep(args.step_sleep_ms / 1000.0)


class StepTimer:
    """Wall time of every step; rank 0 prints progress and writes --times."""

    def __init__(self, args, rank, name):
        self.args = args
        self.rank = rank
        self.name = name
        self.step_s = []
        self.step_start_ns = []
        self.extra = {}
        self.t0 = None
        self.startup_s = None
        self.losses = {}
        self._stop = None  # --stop-file's StopFile, made at the first ends(): it needs the group

    def start(self, step):
        if self.startup_s is None:
            self.startup_s = process_age_s()
        self.t0 = time.perf_counter()
        self.step_start_ns.append(time.monotonic_ns())

    def stop(self, step, loss=None):
        dt = time.perf_counter() - self.t0
        self.step_s.append(dt)
        if loss is not None:
            self.losses[step] = float(loss)
        pe = self.args.print_every
        if self.rank == 0 and pe and (step % pe == 0 or step == self.args.steps - 1):
            msg = f"[{self.name}] step {step} {dt * 1000:.1f} ms"
            if loss is not None:
                msg += f" loss {float(loss):.4f}"
            print(msg, flush=True)
        return dt

    def ends(self, step):
        """Whether the job leaves its loop after step STEP (--stop-file; every rank asks once a
        step, after stop(), and all get the same answer)."""
        if not self.args.stop_file:
            return False
        if self._stop is None:
            self._stop = StopFile(self.args.stop_file, self.rank)
        return self._stop.ends_at(step + 1)

    def summary(self):
        s = self.step_s
        a = self.args
        out = {"startup_s": round(self.startup_s or 0.0, 3), "first_step_s": round(s[0], 3) if s else None}
        warm = s[3:a.fault_start] if a.fault != "none" else s[3:]
        if warm:
            out["clean_median_ms"] = round(1000 * statistics.median(warm), 1)
        if a.fault != "none" and len(s) > a.fault_start + 1:
            out["fault_median_ms"] = round(1000 * statistics.median(s[a.fault_start + 1:]), 1)
        out.update(self.extra)
        return out

    def finish(self):
        """Rank 0: print the summary and write --times (every rank when PATH contains '{rank}')."""
        per_rank = "{rank}" in self.args.times
        if self.rank != 0 and not per_rank:
            return
        summ = self.summary()
        summ["total_s"] = round(process_age_s(), 3)
        if self.rank == 0:
            print(f"[{self.name}] summary " + " ".join(f"{k}={v}" for k, v in summ.items()), flush=True)
        if self.args.times:
            with open(self.args.times.replace("{rank}", str(self.rank)), "w") as f:
                json.dump(dict({"step_s": self.step_s, "step_start_ns": self.step_start_ns, "rank": self.rank},
                               **summ), f)


class SyntheticClassification:
    """A learnable synthetic task, generated from the seed alone (every rank can make the same one):
    x ~ N(0, 1) in `dim` dimensions, y = argmax(x @ W) for a fixed random 'teacher' W."""

    def __init__(self, n, dim, classes, seed):
        import torch
        g = torch.Generator().manual_seed(seed + 7919)
        self.x = torch.randn(n, dim, generator=g)
        teacher = torch.randn(dim, classes, generator=g)
        self.y = (self.x @ teacher).argmax(dim=1)
        self.n = n

    def dataset(self):
        import torch.utils.data
        return torch.utils.data.TensorDataset(self.x, self.y)


class ReplicaBatches:
    """Deterministic batches of indices for data-parallel replica `replica` of `replicas`: a fresh
    seeded permutation every epoch, split between replicas, cut into batches of `batch`
    (incomplete batches dropped). Usable as a DataLoader batch_sampler, or directly (without a
    DataLoader) by a rank that only needs to know which samples a step uses."""

    def __init__(self, n, batch, replica, replicas, seed):
        self.n, self.batch, self.replica, self.replicas, self.seed = n, batch, replica, replicas, seed
        self.per_replica = n // replicas
        self.per_epoch = self.per_replica // batch

    def epoch(self, e):
        import torch
        perm = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed * 1000 + e))
        mine = perm[self.replica * self.per_replica:(self.replica + 1) * self.per_replica]
        return [mine[i * self.batch:(i + 1) * self.batch].tolist() for i in range(self.per_epoch)]

    def step(self, k):
        """Indices of the batch that step k (counted from 0 over epochs) uses."""
        return self.epoch(k // self.per_epoch)[k % self.per_epoch]

    def __iter__(self):
        e = 0
        while True:  # endless: the job decides how many steps it runs
            for b in self.epoch(e):
                yield b
            e += 1

    def __len__(self):
        return self.per_epoch


@functools.lru_cache(maxsize=None)
def _mlp_classes():
    import torch.nn as nn  # imported here: scripts set environment variables before torch loads

    class Block(nn.Module):
        """Pre-norm residual MLP block: x + down(gelu(up(norm(x))))."""

        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.act = nn.GELU()
            self.down = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.down(self.act(self.up(self.norm(x))))

    class Net(nn.Module):
        """--blocks blocks, a final LayerNorm and a linear head to --classes logits."""

        def __init__(self, d, blocks, classes):
            super().__init__()
            self.blocks = nn.ModuleList(Block(d) for _ in range(blocks))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x))

    return Block, Net


def mlp_block(d):
    """One pre-norm residual MLP block of width d."""
    return _mlp_classes()[0](d)


def build_mlp(args):
    """The residual MLP classifier of --dim, --blocks, --classes (same seed: same weights on every rank)."""
    return _mlp_classes()[1](args.dim, args.blocks, args.classes)


def replica_batches(args, replica, replicas):
    """The synthetic classification task and an iterator over data-parallel replica `replica`'s
    (x, y) batches (a DataLoader with ReplicaBatches as the batch_sampler)."""
    import torch.utils.data
    task = SyntheticClassification(8192, args.dim, args.classes, args.seed)
    loader = torch.utils.data.DataLoader(
        task.dataset(), batch_sampler=ReplicaBatches(task.n, args.batch, replica, replicas, args.seed))
    return task, iter(loader)


def allreduce_mean(grads, group, size):
    """Average the tensors `grads` over `group` (of `size` ranks) in place, one flat all-reduce."""
    import torch
    import torch.distributed as dist
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= size
    off = 0
    for g in grads:
        g.copy_(flat[off:off + g.numel()].view_as(g))
        off += g.numel()


def train_classifier(args, env, timer, model, replica, replicas, after_backward=None):
    """torch.optim.AdamW, then --steps training steps of the classifier on data-parallel replica
    `replica`'s batches: forward and loss, the straggler's work (before the gradient sync),
    backward, after_backward() if given, the --step-sleep-ms wait, the optimizer step; each step
    timed by `timer`. Then finish_job."""
    import torch
    import torch.nn.functional as F
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _, batches = replica_batches(args, replica, replicas)
    straggler = Straggler(args, env.rank)
    for step in range(args.steps):
        timer.start(step)
        x, y = next(batches)
        loss = F.cross_entropy(model(x), y)
        straggler.maybe_work(step)
        loss.backward()
        if after_backward is not None:
            after_backward()
        step_sleep(args)
        opt.step()
        opt.zero_grad()
        timer.stop(step, loss.item())
        if timer.ends(step):
            break
    finish_job(timer)


def finish_job(timer):
    """Rank 0's summary and --times, then a last barrier and the end of the process group."""
    timer.finish()
    import torch.distributed as dist
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
