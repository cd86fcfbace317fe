"""The job-shape matrix: real torch 2.x jobs of every shape users run (examples/jobs/), each clean
and with one straggler, under `perftracker run` with the product's defaults. Used by
tests/test_job_shapes.py (once each, in CI) and bench/online_accuracy.py --shapes (repeated,
with a pass rate per shape).

The straggler runs from the first step, so the baseline window (on by default: it opens once
every rank is past its warm-up) is the one that must name it; a job this short never reaches the
slowdown trigger's reference (warm-up and 50 reference iterations after learning).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptest import run_until_diagnosed, windows  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = os.path.join(SOURCE, "examples", "jobs")

# A clean run's findings must each cost less than this share of an iteration (the bar;
# the product reports nothing under --min-impact, 5%, anyway).
CLEAN_MAX_SHARE = 0.03
STRAGGLER_RANK = 2


class Shape:
    def __init__(self, name, script, args=(), nproc=4, roles=""):
        self.name, self.script, self.args, self.nproc, self.roles = name, script, list(args), nproc, roles

    def command(self, python, straggler):
        cmd = [python, self.script, *self.args]
        if straggler:
            cmd += ["--fault", "straggler", "--fault-rank", str(STRAGGLER_RANK), "--fault-start", "0"]
        return cmd


# Enough steps for the baseline window: it opens once every rank reported 20 iterations and
# starts 2 s ahead of the furthest rank (server/scheduler.h), then profiles 10 iterations.
STEPS = ["--steps", "90"]
SHAPES = [
    Shape("ddp", os.path.join(SOURCE, "examples", "train_ddp.py"),
          ["--iters", "110", "--step-sleep-ms", "40", "--fault-work", "15"], roles="4 identical replicas"),
    Shape("fsdp2", os.path.join(JOBS, "fsdp2.py"), STEPS, roles="FSDP2 fully_shard over 4 ranks"),
    Shape("tp_dp", os.path.join(JOBS, "tp_dp.py"), STEPS, roles="2x2 mesh: tensor parallel x data parallel"),
    Shape("pipeline", os.path.join(JOBS, "pipeline.py"), STEPS,
          roles="torch.distributed.pipelining, 2 stages x 2 replicas; stage 1 has no DataLoader"),
    Shape("pipeline_manual", os.path.join(JOBS, "pipeline_manual.py"), STEPS,
          roles="hand-written send/recv pipeline, 2 stages x 2 replicas; stage 1 has no DataLoader"),
    Shape("compiled", os.path.join(JOBS, "compiled.py"), STEPS, roles="DDP of a torch.compile'd model"),
    Shape("hf_trainer", os.path.join(JOBS, "hf_trainer.py"), STEPS, roles="transformers.Trainer, DDP"),
    Shape("lightning", os.path.join(JOBS, "lightning_ddp.py"), STEPS, roles="Lightning Trainer, strategy ddp"),
]
BY_NAME = {s.name: s for s in SHAPES}


def run_shape(bin_path, python, shape, straggler, report, timeout=900):
    """Runs SHAPE under perftracker run into REPORT; returns (process, seconds). The job ends
    early, every rank at the same step (--stop-file), once the baseline window is diagnosed:
    nothing after it is judged, and its --steps stay the margin a slow machine needs."""
    stop_file = report + ".stop"
    cmd = [bin_path, "run", "--nproc", str(shape.nproc), "--report-dir", report, "--",
           *shape.command(python, straggler), "--stop-file", stop_file]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    p = run_until_diagnosed(cmd, report, stop_file, 0, timeout, env=env)
    return p, p.seconds


def share(finding):
    return float(finding.get("impact", {}).get("fraction_of_iteration", 0.0))


def judge(report, straggler):
    """(passed, what was named) for one run: with a straggler, the first finding of the baseline
    window names rank STRAGGLER_RANK alone; clean, no window has a finding above CLEAN_MAX_SHARE
    of an iteration nor a missing rank."""
    ws = windows(report)
    if not ws:
        return False, "no window was diagnosed"
    if straggler:
        first = ws[min(ws)]["findings"]
        if not first:
            return False, f"window {min(ws)}: no findings"
        f = first[0]
        named = f"{f['category']} on ranks {f['ranks']} ({share(f):.0%} of an iteration)"
        return f["ranks"] == [STRAGGLER_RANK], named
    bad = [(w, f) for w, d in sorted(ws.items()) for f in d["findings"]
           if share(f) > CLEAN_MAX_SHARE or f["category"] == "missing_rank"]
    if bad:
        w, f = bad[0]
        return False, f"window {w}: {f['category']} on ranks {f['ranks']} ({share(f):.0%}): {f['summary']}"
    return True, f"{len(ws)} window(s), no finding above {CLEAN_MAX_SHARE:.0%}"
