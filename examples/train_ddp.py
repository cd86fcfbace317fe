#!/usr/bin/env python3
"""A small, real DDP training job (gloo on CPU, NCCL on GPU) with faults that switch on at a
chosen iteration. perftracker's tests run it to produce real traces and real slowdowns.

Run standalone (spawns --nproc ranks itself):
  python3 examples/train_ddp.py --nproc 4 --iters 30 --profile-dir out/traces --profile-iters 10:30
Under a launcher that sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT
(torchrun, perftracker run), it runs one rank per process.

Faults (--fault KIND, --fault-rank R or 'all', from --fault-start K):
  straggler      extra matrix multiplies every step on the faulty rank(s)
  slow-loader    the DataLoader's collate sleeps --fault-ms per batch (in the DataLoader's worker
                 processes with --loader-workers N)
  gc             the rank spends its time in Python's automatic GC: a large long-lived heap of
                 GC-tracked objects (--gc-heap) and cyclic garbage every step (--gc-garbage)
  hang           the rank blocks forever (hang_forever()) before its next collective: the
                 gradient all-reduce in loss.backward(), or the explicit all-reduce of the loss
                 on a --log-every step
  cpu-contention a busy process competes for the rank's CPU: the ranks are bound to cores from
                 the start (the faulty rank(s) to the host's last core, the others to the rest,
                 as taskset or a launcher's binding would), and the competitor starts on the
                 faulty rank's core
  nice           a busy process starts beside the job and the rank lowers its own priority to nice
                 19 (every thread): the scheduler gives it the CPU last
  skew           the rank's batches hold --fault-scale times the rows (data skew: longer
                 sequences, a bigger share of the data): the same calls on larger inputs
  cpu-quota      the rank moves itself into the cgroup --fault-cgroup (a folder of the cgroup file
                 system whose CPU quota the caller set, e.g. cpu.cfs_quota_us or cpu.max): the
                 kernel then throttles it as a container's CPU limit does; --fault-cpu-share
                 first sets that quota to a share of what the rank used before
  sync           (GPU) needless torch.cuda.synchronize() and .item() every step
  call-heavy     tokenizer-like Python every step: --calls short calls, each building two small
                 GC-tracked objects, so the cyclic GC runs often (young collections every few
                 hundred calls)
  stall          the rank computes for --fault-ms once, at step --fault-start, while its peers
                 wait for it (a rank that evaluates or serializes a checkpoint alone): a step
                 that takes seconds and then completes, slow but not hung
  leak           the rank keeps --fault-mb MiB every step (a tensor appended to a list, as a loss
                 history kept with its graph is): its memory grows until the host runs out, or
                 with --fault-cgroup (a memory cgroup it joins) until that cgroup's OOM killer
                 ends it
  pyleak         the rank keeps --fault-mb MiB of Python objects every step (a metrics history
                 of floats, log_metrics()): torch's allocator never sees them, the heap does
  gpu-leak       the same with tensors on the rank's device (--device cuda): its GPU memory grows
                 until CUDA's allocator fails (torch.OutOfMemoryError)
  sawtooth       the rank keeps --fault-mb MiB every step and lets them all go every 20 steps (a
                 cache filled and emptied): its memory rises and falls, and is no leak
  checkpoint     the rank saves a checkpoint every step on the training thread: the model's state
                 and --fault-mb MiB more, torch.save to a file in the temp folder, then fsync
  cmd            runs the shell command --fault-cmd once on the faulty rank(s) (e.g. a tc rate
                 limit on the rank's own link, inside its network namespace)
Collectives out of step (once, at step --fault-start; a desync of the process group):
  extra-collective  the faulty rank all-reduces 7 floats of its own before backward (a collective
                 inside a rank-dependent branch) while its peers are in DDP's gradient all-reduce
  wrong-size     every rank all-reduces a tensor before backward, the faulty rank's 8 floats
                 long and its peers' 7
  wrong-dtype    every rank all-reduces 7 values before backward, the faulty rank's as int32 and
                 its peers' as float32 (the same bytes: the backend does not notice)
  skip-barrier   every rank calls barrier() after its step, except the faulty rank at that step
  raise          the faulty rank raises RuntimeError in the middle of the step

--die-at-step K (with --die-rank R): rank R kills itself with SIGKILL at step K of the job's first
attempt (TORCHELASTIC_RESTART_COUNT unset or 0), as a crashed or OOM-killed process would end;
under `torchrun --max-restarts 1` every rank then starts again and the second attempt runs to
its end.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stop_file import STOP_CHECK_STEPS, StopFile, end_process  # noqa: E402


SAWTOOTH_STEPS = 20  # --fault sawtooth: steps between two emptyings of its cache
COLLECTIVE_FAULTS = ("extra-collective", "wrong-size", "wrong-dtype", "raise")


def collective_fault(kind, is_faulty, device):
    """The step's collective fault (see the module's doc), before backward."""
    import torch
    import torch.distributed as dist
    if kind == "extra-collective":
        if is_faulty:
            dist.all_reduce(torch.ones(7, device=device))
    elif kind == "wrong-size":
        dist.all_reduce(torch.ones(8 if is_faulty else 7, device=device))
    elif kind == "wrong-dtype":
        dtype = torch.int32 if is_faulty else torch.float32
        dist.all_reduce(torch.ones(7, dtype=dtype, device=device))
    elif kind == "raise" and is_faulty:
        raise RuntimeError("injected failure in the middle of the step")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=int(os.environ.get("WORLD_SIZE", "2")))
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp",
                   help="mlp: --layers Linear layers of --hidden on 256 features; cnn: a small "
                        "convolutional net (convolutions, batch norm, pooling) on 3x32x32 images")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--loader-workers", type=int, default=0,
                   help="DataLoader worker processes (0: the loader runs in the training process)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--fault", default="none",
                   choices=["none", "straggler", "slow-loader", "gc", "hang", "cpu-contention", "sync", "cmd", "stall",
                            "call-heavy", "cpu-quota", "skew", "leak", "pyleak", "sawtooth", "gpu-leak", "checkpoint", "nice", "extra-collective",
                            "wrong-size", "wrong-dtype", "skip-barrier", "raise"])
    p.add_argument("--times", default="", help="rank 0 writes every step's duration here (JSON)")
    p.add_argument("--fault-cmd", default="", help="shell command for --fault cmd")
    p.add_argument("--fault-cgroup", default="",
                   help="cgroup folder the rank joins at --fault-start: --fault cpu-quota (its CPU quota), "
                        "--fault leak (a memory limit)")
    p.add_argument("--fault-cpu-share", type=float, default=0.0,
                   help="--fault cpu-quota: first set the cgroup's quota to this share of the CPU the "
                        "rank used over the 30 steps before (0 = keep the quota the caller set)")
    p.add_argument("--fault-scale", type=int, default=3, help="rows per batch x this (--fault skew)")
    p.add_argument("--fault-rank", default="0", help="rank number or 'all'")
    p.add_argument("--fault-start", type=int, default=0, help="first iteration with the fault")
    p.add_argument("--fault-ms", type=float, default=15.0,
                   help="loader sleep per batch (ms); for --fault stall, the one step's compute")
    p.add_argument("--fault-mb", type=float, default=2.0, help="MiB kept per step (--fault leak, pyleak)")
    p.add_argument("--fault-work", type=int, default=3, help="extra matmuls per step (straggler)")
    p.add_argument("--gc-heap", type=int, default=500000, help="long-lived GC-tracked objects (gc fault)")
    p.add_argument("--gc-garbage", type=int, default=40000, help="reference cycles per step (gc fault)")
    p.add_argument("--calls", type=int, default=80000, help="short Python calls per step (call-heavy fault)")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="every step also waits this long (as a GPU-bound step waits for its kernels): "
                        "with a small model the iteration time is then quiet even on shared cores")
    p.add_argument("--log-every", type=int, default=0,
                   help="all-reduce the loss (dist.all_reduce) and print it every K steps (0 = never)")
    p.add_argument("--die-at-step", type=int, default=-1,
                   help="--die-rank kills itself (SIGKILL) at this step of the first attempt (-1 = never)")
    p.add_argument("--die-rank", type=int, default=0, help="the rank --die-at-step kills")
    p.add_argument("--profile-dir", default="", help="write one profiler trace per rank here")
    p.add_argument("--profile-iters", default="", help="A:B, iterations to profile (default: all)")
    p.add_argument("--port", type=int, default=0, help="MASTER_PORT when spawning (0 = pick one)")
    p.add_argument("--stop-file", default="",
                   help="end the run early, every rank at the same step, once this file exists "
                        f"(rank 0 looks every {STOP_CHECK_STEPS} steps; up to --iters)")
    return p.parse_args(argv)


def set_cpu_quota(cgroup, share, mark):
    """Sets CGROUP's CPU quota to SHARE of the CPUs this process used since MARK (its CPU and wall
    time then): a quota below what the rank needs on any machine, where a fixed number of CPUs
    throttles a slow machine's rank and leaves a fast machine's alone."""
    cpu, wall = time.process_time() - mark[0], time.monotonic() - mark[1]
    cpus = share * cpu / max(wall, 1e-3)
    v2 = os.path.join(cgroup, "cpu.max")
    if os.path.exists(v2):
        period = int(open(v2).read().split()[1])
        target = v2
    else:
        period = int(open(os.path.join(cgroup, "cpu.cfs_period_us")).read())
        target = os.path.join(cgroup, "cpu.cfs_quota_us")
    quota = max(1000, int(cpus * period))  # the kernel's least quota is 1 ms
    with open(target, "w") as f:
        f.write(f"{quota} {period}" if target == v2 else str(quota))
    print(f"cgroup {cgroup}: quota {quota / period:.3f} CPUs ({share} of the {cpu / max(wall, 1e-3):.3f} "
          f"CPUs this rank used)", file=sys.stderr, flush=True)


class SleepyCollate:
    """Collate that sleeps when the loader fault is on: a data loader that cannot keep up.

    With DataLoader worker processes (--loader-workers) the collate runs in them, forked before
    the fault starts: the switch is a value in shared memory, so arm() in the training process
    reaches the workers too."""

    def __init__(self, sleep_s):
        import multiprocessing
        import torch.utils.data
        self.default = torch.utils.data.default_collate if hasattr(torch.utils.data, "default_collate") \
            else torch.utils.data._utils.collate.default_collate
        self._sleep_s = multiprocessing.get_context("fork").Value("d", 0.0, lock=False)
        self.armed_s = sleep_s

    def arm(self):
        self._sleep_s.value = self.armed_s

    def __call__(self, batch):
        sleep_s = self._sleep_s.value
        if sleep_s:
            time.sleep(sleep_s)
        return self.default(batch)


def save_checkpoint(model, mb, rank):
    """--fault checkpoint: the model's state and MB MiB more, saved and fsync'd on the training
    thread, as a checkpoint written every step by one rank is."""
    import tempfile
    import torch
    path = os.path.join(tempfile.gettempdir(), f"perftracker-ckpt-{os.getpid()}-{rank}.pt")
    state = {"model": model.state_dict(), "extra": torch.ones(int(mb * 2 ** 20 / 4))}
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.unlink(path)


def faulty(args, rank):
    if args.fault == "none":
        return False
    return args.fault_rank == "all" or int(args.fault_rank) == rank


def stall_compute(seconds):
    """Matrix multiplies for SECONDS on this thread: real work, not a sleep."""
    import torch
    a = torch.randn(256, 256)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = torch.tanh(a @ a)


def bind_to_cores(faulty_rank):
    """--fault cpu-contention: the faulty rank on the host's last core, the others on the rest
    (every thread: Linux binds threads, and torch's are already running)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return
    mine = set(cores[-1:]) if faulty_rank else set(cores[:-1])
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), mine)
        except OSError:
            pass


def busy_loop(stop_at):
    while time.time() < stop_at:
        pass


def hang_forever(rank):
    """--fault hang: the rank never reaches its next collective (the others wait in it)."""
    print(f"rank {rank}: hanging before its next collective", flush=True)
    while True:
        time.sleep(3600)


def build_gc_heap(n):
    """--fault gc: long-lived GC-tracked containers; every full collection traverses them all."""
    return [[i] for i in range(n)]


def log_metrics(history, step, mib):
    """--fault pyleak: a metrics history kept whole, MIB of Python floats a step (a list slot
    and a float object: 32 bytes each)."""
    history.append({"step": step, "values": [float(i) for i in range(int(mib * 2 ** 20 / 32))]})


def make_cyclic_garbage(n):
    """--fault gc: n self-referencing lists, alive until the step ends. Only the cyclic collector
    frees them; the young collections they trigger traverse and promote them, so full
    collections over the long-lived heap come every few steps. (No calls in the loop: the time
    goes to the collector, not to building the garbage.)"""
    junk = [None] * n
    for i in range(n):
        a = [i, None]
        a[1] = a
        junk[i] = a
    return n


def tokenize_word(i):
    """One short call of --fault call-heavy: a dict and a list, both tracked by the cyclic GC."""
    return {"id": i, "pieces": [i & 255, i >> 8]}


def tokenize(n):
    """--fault call-heavy: n short calls, as a tokenizer, a collate function or a metric loop
    written in Python makes them."""
    out = []
    for i in range(n):
        out.append(tokenize_word(i))
    return len(out)


def build_model(nn, args):
    """--model: the MLP (a few large matrix multiplies a step) or the CNN (more, smaller ops,
    batch norm's buffers broadcast by DDP each forward)."""
    if args.model == "cnn":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    layers = [nn.Linear(256, args.hidden), nn.ReLU()]
    for _ in range(args.layers - 1):
        layers += [nn.Linear(args.hidden, args.hidden), nn.ReLU()]
    layers.append(nn.Linear(args.hidden, 10))
    return nn.Sequential(*layers)


def worker(rank, world, args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % max(1, torch.cuda.device_count())) \
        if args.device == "cuda" else torch.device("cpu")
    backend = "nccl" if args.device == "cuda" and world <= torch.cuda.device_count() else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)

    model = build_model(nn, args).to(device)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

    g = torch.Generator().manual_seed(args.seed + rank)
    n = args.batch * (16 if args.model == "cnn" else 64)
    shape = (3, 32, 32) if args.model == "cnn" else (256,)
    data = torch.utils.data.TensorDataset(torch.randn(n, *shape, generator=g),
                                          torch.randint(0, 10, (n,), generator=g))
    collate = SleepyCollate(args.fault_ms / 1000.0)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True, collate_fn=collate,
                                         generator=torch.Generator().manual_seed(args.seed),
                                         num_workers=args.loader_workers,
                                         persistent_workers=args.loader_workers > 0)
    extra = torch.randn(args.hidden, args.hidden)

    lo, hi = 0, args.iters
    if args.profile_iters:
        a, b = args.profile_iters.split(":")
        lo, hi = int(a), int(b)
    prof = None
    contention = None
    gc_heap = None
    is_faulty = faulty(args, rank)
    if args.fault == "cpu-contention":
        bind_to_cores(is_faulty)
    it = iter(loader)

    def next_batch():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(loader)
            return next(it)

    kept = []  # --fault leak

    def train_step(step):
        x, y = next_batch()
        if is_faulty and step >= args.fault_start and args.fault == "skew":
            x, y = x.repeat(args.fault_scale, *[1] * (x.dim() - 1)), y.repeat(args.fault_scale)
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x), y)
        if is_faulty and step >= args.fault_start:
            if args.fault == "straggler":
                for _ in range(args.fault_work):
                    torch.mm(extra, extra)
            elif args.fault == "gc":
                make_cyclic_garbage(args.gc_garbage)
            elif args.fault == "call-heavy":
                tokenize(args.calls)
            elif args.fault == "leak":
                kept.append(torch.ones(int(args.fault_mb * 2 ** 20 / 4)))
            elif args.fault == "pyleak":
                log_metrics(kept, step, args.fault_mb)
            elif args.fault == "sawtooth":
                if len(kept) >= SAWTOOTH_STEPS:
                    kept.clear()
                kept.append(torch.ones(int(args.fault_mb * 2 ** 20 / 4)))
            elif args.fault == "gpu-leak":
                kept.append(torch.ones(int(args.fault_mb * 2 ** 20 / 4), device=device))
            elif args.fault == "checkpoint":
                save_checkpoint(model, args.fault_mb, rank)
            elif args.fault == "hang":
                hang_forever(rank)
            elif args.fault == "sync" and device.type == "cuda":
                torch.cuda.synchronize()
                loss.item()
        if step == args.fault_start and args.fault in COLLECTIVE_FAULTS:
            collective_fault(args.fault, is_faulty, device)
        if args.log_every > 0 and (step + 1) % args.log_every == 0:
            total = loss.detach().clone()
            dist.all_reduce(total)
            if rank == 0:
                print(f"step {step} loss {total.item() / world:.4f}", flush=True)
        loss.backward()
        if args.step_sleep_ms:
            time.sleep(args.step_sleep_ms / 1000.0)
        opt.step()
        if args.fault == "skip-barrier" and not (is_faulty and step == args.fault_start):
            dist.barrier()
        return loss

    stop = StopFile(args.stop_file, rank) if args.stop_file else None
    step_times, step_starts = [], []
    cpu_mark = None  # (process CPU s, wall s) at the first of the steps --fault-cpu-share measures
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") in ("", "0")
    for step in range(args.iters):
        if stop is not None and stop.ends_at(step):
            break
        if step == args.die_at_step and rank == args.die_rank and first_attempt:
            import signal
            print(f"rank {rank} (pid {os.getpid()}): killing itself at step {step}",
                  file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        t_step = time.perf_counter()
        step_starts.append(time.monotonic_ns())
        if step == max(0, args.fault_start - 30):
            cpu_mark = (time.process_time(), time.monotonic())
        if is_faulty and step == args.fault_start:
            # Tests measure the time from here to the diagnosis.
            print(f"rank {rank}: fault {args.fault} on at step {step} (unix {time.time():.3f})",
                  file=sys.stderr, flush=True)
            if args.fault == "slow-loader":
                collate.arm()
            elif args.fault == "gc":
                gc_heap = build_gc_heap(args.gc_heap)
            elif args.fault == "cmd":
                import subprocess
                subprocess.run(args.fault_cmd, shell=True, check=True)
            elif args.fault == "stall":
                stall_compute(args.fault_ms / 1000.0)
            elif args.fault == "leak" and args.fault_cgroup:
                # A memory cgroup (its limit set by the caller): the leak grows into it until the
                # kernel's OOM killer ends the rank.
                with open(os.path.join(args.fault_cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            elif args.fault == "cpu-quota":
                if args.fault_cpu_share > 0:
                    set_cpu_quota(args.fault_cgroup, args.fault_cpu_share, cpu_mark)
                # cgroup.procs moves the whole process, its threads included.
                with open(os.path.join(args.fault_cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            elif args.fault == "nice":
                import multiprocessing as mp
                contention = mp.get_context("fork").Process(target=busy_loop, args=(time.time() + 3600,), daemon=True)
                contention.start()
                for tid in os.listdir("/proc/self/task"):  # Linux keeps a nice value per thread
                    try:
                        os.setpriority(os.PRIO_PROCESS, int(tid), 19)
                    except OSError:
                        pass
            elif args.fault == "cpu-contention":
                # A busy process on the rank's CPU: both pinned to one core (taskset), so the
                # rank shares it with the competitor while its peers keep the other cores.
                import multiprocessing as mp
                contention = mp.get_context("fork").Process(target=busy_loop, args=(time.time() + 3600,), daemon=True)
                contention.start()
                try:
                    os.sched_setaffinity(contention.pid, os.sched_getaffinity(0))
                except (AttributeError, OSError):
                    pass
        if args.profile_dir and step == lo:
            prof = start_profiler(args, device)
        if prof is not None:
            with torch.autograd.profiler.record_function(f"ProfilerStep#{step}"):
                train_step(step)
        else:
            train_step(step)
        if prof is not None and step == hi - 1:
            stop_profiler(prof, args, rank)
            prof = None
        step_times.append(time.perf_counter() - t_step)
    if args.times and rank == 0:
        with open(args.times, "w") as f:
            json.dump({"step_s": step_times, "step_start_ns": step_starts}, f)
    if prof is not None:
        stop_profiler(prof, args, rank)
    if contention is not None:
        contention.terminate()
    del gc_heap
    dist.barrier()
    dist.destroy_process_group()


def start_profiler(args, device):
    """torch.profiler (Kineto) when the build has it, else the legacy autograd profiler."""
    import torch
    kineto = getattr(torch.autograd, "kineto_available", lambda: False)()
    if kineto:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(activities=acts, with_stack=True, record_shapes=True)
    else:
        prof = torch.autograd.profiler.profile(record_shapes=False)
    prof.__enter__()
    return prof


def stop_profiler(prof, args, rank):
    prof.__exit__(None, None, None)
    os.makedirs(args.profile_dir, exist_ok=True)
    prof.export_chrome_trace(os.path.join(args.profile_dir, f"rank-{rank}.json"))


def spawn_main(args):
    import socket
    import torch.multiprocessing as mp
    port = args.port
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    mp.spawn(worker, args=(args.nproc, args), nprocs=args.nproc, join=True)


def main():
    args = parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        spawn_main(args)
    return 0


if __name__ == "__main__":
    end_process(main())
