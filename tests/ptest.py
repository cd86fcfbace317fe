"""Shared helpers for perftracker's integration tests (run by ctest with PERFTRACKER_BIN set)."""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE = os.environ.get("PT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("PT_SHARED", os.path.join(SOURCE, "..", "shared"))
BIN = os.environ.get("PERFTRACKER_BIN", os.path.join(SOURCE, "build", "perftracker"))
# The Python that runs torch jobs. ctest sets it: .venv/bin/python (torch 2.13, the virtual
# environment scripts/deps.sh makes), /usr/bin/python3 (Debian's torch 1.13) for the
# legacy_torch113_* tests. Run by hand without it: torch 1.13.
TORCH_PYTHON = os.environ.get("PT_TORCH_PYTHON", "/usr/bin/python3")
KINETO = os.path.join(SHARED, "traces", "kineto")


def run(args, **kw):
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, **kw)


def analyze(paths, extra=()):
    """Runs `perftracker analyze` and returns the parsed diagnosis JSON."""
    return _diagnosis(["analyze", *paths], extra)


def diff(base, test, extra=()):
    """Runs `perftracker diff BASE TEST` and returns the parsed diagnosis JSON."""
    return _diagnosis(["diff", base, test], extra)


def _diagnosis(cmd, extra):
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    p = run([*cmd, "--json", out, *extra])
    if p.returncode != 0:
        raise AssertionError(f"{cmd[0]} failed ({p.returncode}): {p.stderr}")
    with open(out) as f:
        d = json.load(f)
    undocumented = schema_problems(d)
    if undocumented:
        raise AssertionError(f"{cmd[0]}: not in docs/diagnosis-schema.md's categories: {undocumented}")
    d["_text"] = p.stdout
    d["_json_path"] = out
    return d


_SCHEMA = None


def schema_categories():
    """docs/diagnosis-schema.md's categories: ({category: its own evidence keys}, common keys).
    Keys with a placeholder (rank_<R>_at) are regular expressions."""
    global _SCHEMA
    if _SCHEMA is None:
        with open(os.path.join(SOURCE, "docs", "diagnosis-schema.md")) as f:
            doc = f.read()
        section = doc[doc.index("## Categories"):]
        section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
        head, table = section.split("| category |", 1)
        common = set(re.findall(r"`([^`]+)`", head.split("may\ncarry:", 1)[-1].split(". A finding", 1)[0]))
        cats = {}
        for line in table.splitlines():
            cells = line.split("|")
            if len(cells) > 3 and cells[1].strip().startswith("`"):
                cats[cells[1].strip().strip("`")] = set(re.findall(r"`([^`]+)`", cells[3]))
        _SCHEMA = cats, common
    return _SCHEMA


def _documented(key, keys):
    return key in keys or any("<" in k and re.fullmatch(re.sub(r"<[^>]+>", "[A-Za-z0-9_]+", k), key)
                              for k in keys)


def schema_problems(d):
    """What the findings of diagnosis D carry that the schema's categories table does not name:
    a category, or an evidence key neither common nor its category's own (a finding a cause rule,
    the baseline comparison or a resumed hang re-categorized keeps the keys of straggler,
    regression and hang)."""
    cats, common = schema_categories()
    inherited = cats.get("straggler", set()) | cats.get("regression", set()) | cats.get("hang", set())
    problems = []
    for f in d.get("findings", []):
        c = f.get("category")
        if c not in cats:
            problems.append(f"category {c}")
            continue
        for k in f.get("evidence", {}):
            if not (_documented(k, common) or _documented(k, cats[c]) or _documented(k, inherited)):
                problems.append(f"{c}: {k}")
    return problems


def check(json_path, expect):
    """The acceptance checker from shared/tools (how acceptance reads us). Its absence skips
    the test, which fails under CI (see main)."""
    tool = os.path.join(SHARED, "tools", "check_diagnosis.py")
    if not os.path.exists(tool):
        raise unittest.SkipTest(f"{tool} not found (the shared/ folder beside the checkout)")
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


def fault_work_for(ms):
    """--fault-work (extra 256x256 matmuls per step, one thread) that costs about MS ms on this
    torch. Their price is the BLAS's: ~0.35 ms each with torch 2.13 (MKL), ~6 ms with Debian's
    torch 1.13; a fixed count of them is a small fault on one and a large one on the other. The fastest of
    a few batches is the price: time lost to other processes here would shrink the fault."""
    code = ("import time, torch\n"
            "torch.set_num_threads(1)\n"
            "a = torch.randn(256, 256)\n"
            "torch.mm(a, a)\n"
            "best = 1e9\n"
            "for _ in range(7):\n"
            "    t = time.perf_counter()\n"
            "    for _ in range(10):\n"
            "        torch.mm(a, a)\n"
            "    best = min(best, (time.perf_counter() - t) / 10)\n"
            "print(best * 1e3)\n")
    p = subprocess.run([TORCH_PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    per = float(p.stdout.split()[-1])
    return max(1, round(ms / per)), per


def windows(report):
    """{window id: diagnosis dict} of every diagnosed window in a `perftracker run` REPORT dir."""
    out = {}
    for path in glob.glob(os.path.join(report, "windows", "*", "diagnosis.json")):
        with open(path) as f:
            out[int(os.path.basename(os.path.dirname(path)))] = json.load(f)
    return out


def online_built():
    """Whether the binary has the online path (an offline build says so in --version)."""
    p = run(["--version"])
    return p.returncode == 0 and "offline build" not in p.stdout


def torch_major(python):
    """The major version of the torch PYTHON imports (0: none)."""
    p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return int(p.stdout.split(".")[0]) if p.returncode == 0 and p.stdout[:1].isdigit() else 0


def require_torch2():
    """Raises unittest.SkipTest (a failure under CI=true, as every skip) without torch 2.x."""
    if torch_major(TORCH_PYTHON) < 2:
        raise unittest.SkipTest(f"{TORCH_PYTHON} has no torch 2.x (PT_TORCH_PYTHON: .venv/bin/python)")


def torch_available():
    try:
        return subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True).returncode == 0
    except OSError:
        return False


# ctest's "skipped" exit status, declared as SKIP_RETURN_CODE in CMakeLists.txt.
SKIP_RETURN_CODE = 77


def wait_until(cond, seconds=30, step=0.1):
    """Polls COND until it is true or SECONDS pass; its last value."""
    import time
    end = time.time() + seconds
    while time.time() < end:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


# "window 2 opened (slowdown on rank 2: ...): profiling iterations 182..191 on every rank" and
# "window 2 diagnosed: ..." in DIR/perftracker.log.
_WINDOW_OPENED = re.compile(r"window (\d+) opened .*?: profiling iterations (\d+)\.\.")
_WINDOW_DIAGNOSED = re.compile(r"window (\d+) diagnosed")


class StopWhenDiagnosed:
    """Creates STOP_FILE (a job's --stop-file, examples/train_ddp.py) once a window that began at
    AFTER_ITERATION or later is diagnosed in REPORT/perftracker.log: the job then ends within 8
    steps instead of running out the margin its --iters keeps for a slow machine (a third of a
    fault test's time, measured here). REPORT may be a glob pattern (sbatch names the folder
    after the job). Call poll() while the job runs."""

    def __init__(self, report, stop_file, after_iteration):
        self.log_pattern = os.path.join(report, "perftracker.log")
        self.stop_file, self.after = stop_file, after_iteration
        self.stopped = False

    def poll(self):
        """True once, at the poll that created the stop file."""
        for log in [] if self.stopped else glob.glob(self.log_pattern)[:1]:
            with open(log, errors="replace") as f:
                text = f.read()
            began = {w: int(i) for w, i in _WINDOW_OPENED.findall(text)}
            if any(began.get(w, -1) >= self.after for w in _WINDOW_DIAGNOSED.findall(text)):
                open(self.stop_file, "w").close()
                self.stopped = True
                return True
        return False


def run_until_diagnosed(cmd, report, stop_file, after_iteration, timeout, env=None, on_stop=None):
    """Runs CMD, a `perftracker run --report-dir REPORT` of a job given --stop-file STOP_FILE, and
    ends it early as StopWhenDiagnosed says, calling ON_STOP (if given) as it asks the job to end:
    what a test undoes there, the job's last steps and its exit run without (a CPU quota held a
    job's exit 11-15 s longer than its diagnosis took). The result is subprocess.run's, with
    .seconds and .stopped (whether it was ended early)."""
    t0 = time.time()
    watch = StopWhenDiagnosed(report, stop_file, after_iteration)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        try:
            while p.poll() is None:
                if time.time() - t0 > timeout:
                    raise subprocess.TimeoutExpired(cmd, timeout)
                if watch.poll() and on_stop is not None:
                    on_stop()
                time.sleep(0.25)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(cmd, p.returncode, out.read(), err.read())
    result.seconds, result.stopped = time.time() - t0, watch.stopped
    return result


def in_ci():
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


class TimedResult(unittest.TextTestResult):
    """Keeps each test's wall time, printed by main() at the end (slowest first): the place to
    look when the test command grows."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds, self._started = {}, 0.0

    def startTest(self, test):
        self._started = time.time()
        super().startTest(test)

    def stopTest(self, test):
        self.seconds[test.id().split(".")[-1]] = time.time() - self._started
        super().stopTest(test)


def main():
    """unittest.main under the project's rule that no test skips silently: a skipped test (a
    missing part) makes the run exit with SKIP_RETURN_CODE, which ctest counts as skipped, and
    under CI=true a skip is a failure."""
    result = unittest.main(verbosity=2, exit=False, testRunner=unittest.TextTestRunner(
        resultclass=TimedResult, verbosity=2)).result
    print("time per test (s): " + ", ".join(f"{name} {s:.1f}" for name, s in sorted(
        result.seconds.items(), key=lambda x: -x[1])), file=sys.stderr)
    if not result.wasSuccessful():
        sys.exit(1)
    if not result.skipped:
        sys.exit(0)
    for test, why in result.skipped:
        print(f"SKIPPED {test.id()}: {why}", file=sys.stderr)
    if in_ci():
        print(f"{len(result.skipped)} test(s) skipped under CI=true: a required part is missing",
              file=sys.stderr)
        sys.exit(1)
    sys.exit(SKIP_RETURN_CODE)
