"""Shared helpers for perftracker's integration tests (run by ctest with PERFTRACKER_BIN set)."""
import json
import os
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("PT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("PT_SHARED", os.path.join(SOURCE, "..", "shared"))
BIN = os.environ.get("PERFTRACKER_BIN", os.path.join(SOURCE, "build", "perftracker"))
TORCH_PYTHON = os.environ.get("PT_TORCH_PYTHON", "/usr/bin/python3")
KINETO = os.path.join(SHARED, "traces", "kineto")


def run(args, **kw):
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, **kw)


def analyze(paths, extra=()):
    """Runs `perftracker analyze` and returns the parsed diagnosis JSON."""
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    p = run(["analyze", *paths, "--json", out, *extra])
    if p.returncode != 0:
        raise AssertionError(f"analyze failed ({p.returncode}): {p.stderr}")
    with open(out) as f:
        d = json.load(f)
    d["_text"] = p.stdout
    d["_json_path"] = out
    return d


def check(json_path, expect):
    """The acceptance checker from shared/tools when present (how acceptance reads us)."""
    tool = os.path.join(SHARED, "tools", "check_diagnosis.py")
    if not os.path.exists(tool):
        return True, "check_diagnosis.py not available"
    p = subprocess.run([sys.executable, tool, json_path, expect], capture_output=True, text=True)
    return p.returncode == 0, p.stdout.strip()


def train(outdir, *args, nproc=4, iters=30, profile="10:30", timeout=600):
    """Runs examples/train_ddp.py with real torch, writing one legacy/Kineto trace per rank."""
    cmd = [TORCH_PYTHON, os.path.join(SOURCE, "examples", "train_ddp.py"), "--nproc", str(nproc),
           "--iters", str(iters), "--profile-dir", outdir, "--profile-iters", profile, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"training failed: {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return outdir


def torch_available():
    try:
        return subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True).returncode == 0
    except OSError:
        return False
