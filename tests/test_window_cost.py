"""What a window costs the job after it ends (issue 22): the rank writes its torch trace without
parsing it into Python objects (torch's C++ writer where Kineto is present, else the legacy
writer in python/perftracker/window.py), and the node's post-processing (the agent's summaries
and uploads, the server's diagnosis and pages) runs on threads at the lowest CPU priority.
Real torch, the product's defaults. No timing gates here: bench/online_overhead.py
--defaults-pairs measures the lost time.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

TRAIN = os.path.join(ptest.SOURCE, "examples", "train_ddp.py")
PYPKG = os.path.join(os.path.dirname(ptest.BIN), "python")

# Profiles a few steps of a small model, stops with perftracker's stop_profiler and writes the
# trace with what it returns; prints what was used and how long the stop took.
PROFILE_SCRIPT = r"""
import json, sys, time, torch
from perftracker import window
m = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(3)])
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(16, 64)
kineto = torch.autograd.kineto_available()
p = (torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if kineto
     else torch.autograd.profiler.profile())
p.__enter__()
for i in range(5):
    with torch.autograd.profiler.record_function("step " + ('"%d"' % i if not kineto else str(i))):
        opt.zero_grad(); m(x).sum().backward(); opt.step()
write = window.stop_profiler(p)
write(sys.argv[1])
print(json.dumps({"kineto": kineto, "writer": getattr(write, "func", write).__name__,
                  "torch": torch.__version__}))
"""


# The scripts' reader of a Chrome trace: the names of the events it holds.
TRACE_OPS = r"""
def ops(path):
    with open(path) as f:
        doc = json.load(f)
    return sorted({e.get("name") for e in (doc if isinstance(doc, list) else doc["traceEvents"])
                   if isinstance(e.get("name"), str)})
"""

# A window (WindowState's torch.profiler, started and ended as the training thread's edges do)
# over batches of a DataLoader in the training process, then a profile of the same loop without
# a window's silencing; prints the ops each trace holds.
LOADER_SCRIPT = r"""
import json, sys, threading, time, torch
import torch.utils.data._utils.fetch as fetch
from perftracker import loader
from perftracker.switch import Switch
from perftracker.window import ARMED, ENDED, WindowState
loader.patch_fetchers(fetch)
m = torch.nn.Linear(8, 4)
data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,)))
def steps():
    for x, y in torch.utils.data.DataLoader(data, batch_size=32):
        m(x).sum().backward()
""" + TRACE_OPS + r"""
sent = []
ws = WindowState(Switch(), sent.append)
ws.out = sys.argv[1]
ws.edge(ARMED)
steps()
ws.edge(ENDED)
deadline = time.time() + 60
while not sent and time.time() < deadline:
    time.sleep(0.05)
plain = torch.autograd.profiler.profile()
with plain:
    steps()
plain.export_chrome_trace(sys.argv[1] + ".plain.json")
print(json.dumps({"window": ops(sys.argv[1] + ".torch.json"), "plain": ops(sys.argv[1] + ".plain.json"),
                  "sent": sent, "unrecorded_after": loader.UNRECORDED_FETCH.enable_record_function is None}))
"""


# A window's torch.profiler stopped at its part's end (TORCH_DONE) while the window goes on:
# prints what was sent and written before the window's end and the ops the trace holds after it.
PART_SCRIPT = r"""
import json, os, sys, time, torch
from perftracker.switch import Switch
from perftracker.window import ARMED, ENDED, TORCH_DONE, WindowState
""" + TRACE_OPS + r"""
sent = []
ws = WindowState(Switch(), sent.append)
ws.out = sys.argv[1]
ws.edge(ARMED)
with torch.autograd.profiler.record_function("in_torch_part"):
    torch.ones(8).sum()
ws.edge(TORCH_DONE)
stopped = ws.profiler is None
with torch.autograd.profiler.record_function("after_torch_part"):
    torch.ones(8).sum()
time.sleep(0.5)
before_end = {"sent": list(sent), "file": os.path.exists(sys.argv[1] + ".torch.json")}
ws.edge(ENDED)
deadline = time.time() + 60
while not sent and time.time() < deadline:
    time.sleep(0.05)
print(json.dumps({"stopped": stopped, "before_end": before_end, "sent": sent,
                  "ops": ops(sys.argv[1] + ".torch.json")}))
"""


# A window's torch.profiler started and ended as the training thread's edges do, in a job that
# never imported inductor, then torch.profiler alone: prints whether each imported inductor and
# how long the window's start took.
INDUCTOR_SCRIPT = r"""
import json, sys, time, torch
from perftracker.switch import Switch
from perftracker.window import ARMED, ENDED, WindowState
lazy = "_inductor" in getattr(torch, "_lazy_modules", ())
ws = WindowState(Switch(), lambda msg: None)
ws.out = sys.argv[1]
t = time.perf_counter()
ws.edge(ARMED)
start_s = time.perf_counter() - t
torch.ones(4).sum()
ws.edge(ENDED)
window = "torch._inductor" in sys.modules
p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
p.__enter__()
p.__exit__(None, None, None)
print(json.dumps({"lazy": lazy, "window_imported": window, "start_s": start_s,
                  "profiler_imported": "torch._inductor" in sys.modules,
                  "still_lazy": "_inductor" in getattr(torch, "_lazy_modules", ())}))
"""

# torch's Flight Recorder dump with its stacks, as the collector takes it at a rank's exit and on
# a hang, in a process that never imported inductor (no torch.optim optimizer); then torch's own
# call, which imports it (so the check can fail).
FR_SCRIPT = r"""
import json, os, pickle, sys, time, torch, torch.distributed as dist
from perftracker.collectives import _torch_flight_recorder
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
def sync_step():
    dist.all_reduce(torch.ones(3))
for _ in range(5):
    sync_step()
t = time.perf_counter()
dump = _torch_flight_recorder()
dump_s = time.perf_counter() - t
info = {"has_fr": dump is not None, "dump_s": dump_s,
        "dump_imported": "torch._inductor" in sys.modules}
if dump is not None:
    frames = pickle.loads(dump)["entries"][-1].get("frames") or []
    info["functions"] = [f.get("name") for f in frames]
    import torch._C._distributed_c10d as c
    (getattr(c, "_dump_fr_trace", None) or c._dump_nccl_trace)(True, True, False)
    info["torch_imported"] = "torch._inductor" in sys.modules
print(json.dumps(info))
"""


def launcher_threads(pid):
    """{tid: (name, nice)} of the threads of process PID."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (name, int(fields[16]))  # field 19 of stat: nice
    return out


# The profiler's own warning (torch's text) inside window.quiet_profiler, then another warning
# inside it, then the profiler's outside it: only the last two may reach stderr.
QUIET_SCRIPT = r"""
import warnings
from perftracker import window
TORCH = ("Warning: Profiler clears events at the end of each cycle. Only events from the current "
         "cycle will be reported. To keep events across cycles, set acc_events=True.")
with window.quiet_profiler():
    warnings.warn(TORCH)
    warnings.warn("the job's own warning")
warnings.warn(TORCH + " (outside)")
"""


class WindowCostTest(unittest.TestCase):
    def test_the_profilers_own_warnings_stay_off_the_terminal(self):
        env = dict(os.environ, PYTHONPATH=PYPKG)
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", QUIET_SCRIPT], capture_output=True,
                           text=True, env=env, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertIn("the job's own warning", p.stderr)
        self.assertEqual(p.stderr.count("Profiler clears events"), 1, p.stderr)
        self.assertIn("(outside)", p.stderr)

    def test_trace_written_without_torch_parse_and_read_back(self):
        tmp = tempfile.mkdtemp(prefix="pt_wcost_")
        trace = os.path.join(tmp, "rank-0.json")
        env = dict(os.environ, PYTHONPATH=PYPKG)
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", PROFILE_SCRIPT, trace], capture_output=True,
                           text=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        info = json.loads(p.stdout.strip().splitlines()[-1])
        # Where Kineto is present torch's C++ writer (save or its export), else perftracker's.
        if info["kineto"]:
            self.assertIn(info["writer"], ("save", "export_chrome_trace"), info)
        else:
            self.assertEqual(info["writer"], "write_legacy_trace", info)
        with open(trace) as f:
            doc = json.load(f)  # valid JSON, even with quotes in a name
        events = doc if isinstance(doc, list) else doc["traceEvents"]
        names = {e.get("name") for e in events}
        self.assertIn("aten::addmm", names)
        self.assertFalse(names & {"profiler::_record_function_exit", "[memory]"})
        if not info["kineto"]:
            self.assertIn('step "3"', names)  # escaped, read back as it was
        # The summarizer reads what was written: the model's ops are its functions.
        shown = ptest.run(["show", trace, "--json", os.path.join(tmp, "show.json")])
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertIn("aten::addmm", shown.stdout)

    def test_a_window_leaves_the_training_process_batch_fetch_unrecorded(self):
        """The dataset's indexing and the collate's stack (hundreds of tiny ops a batch) are not
        in a window's torch trace; the model's ops are; the same loop profiled without a window
        has them (so the check can fail)."""
        tmp = tempfile.mkdtemp(prefix="pt_wcost_loader_")
        out = os.path.join(tmp, "rank-0.python.json")
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", LOADER_SCRIPT, out], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=PYPKG), timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        info = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertTrue(info["sent"] and info["sent"][0].get("path"), info["sent"])
        self.assertIn("aten::stack", info["plain"])  # default_collate stacks the samples
        self.assertIn("aten::addmm", info["window"])
        self.assertNotIn("aten::stack", info["window"])
        self.assertNotIn("aten::select", info["window"])  # TensorDataset's indexing
        self.assertTrue(info["unrecorded_after"])

    def test_torch_profiler_records_the_windows_first_iterations_and_exports_at_its_end(self):
        """At TORCH_DONE (base/window_defaults.h kTorchProfilerIterations done) the profiler stops
        on the training thread; its trace is written only once the window ends, so that the
        writer's GIL does not slow the window's later iterations, and holds only its part."""
        out = os.path.join(tempfile.mkdtemp(prefix="pt_wcost_part_"), "rank-0.python.json")
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", PART_SCRIPT, out], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=PYPKG), timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        info = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertTrue(info["stopped"], info)
        self.assertEqual(info["before_end"], {"sent": [], "file": False})
        self.assertEqual([m.get("path") for m in info["sent"]], [out + ".torch.json"])
        self.assertIn("in_torch_part", info["ops"])
        self.assertNotIn("after_torch_part", info["ops"])

    def test_a_window_does_not_import_inductor(self):
        """torch 2.x's profiler start looks up torch._inductor, a lazy import of all of inductor
        (1.2-1.5 s on the training thread here): a window in a job that never imported it
        leaves it unimported; torch.profiler alone imports it (so the check can fail)."""
        out = os.path.join(tempfile.mkdtemp(prefix="pt_wcost_inductor_"), "rank-0.python.json")
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", INDUCTOR_SCRIPT, out], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=PYPKG), timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        info = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"window start {info['start_s'] * 1e3:.1f} ms", file=sys.stderr)
        self.assertFalse(info["window_imported"], info)
        if info["lazy"]:  # torch 2.x: its own start imports it, and the lazy import is back
            self.assertTrue(info["profiler_imported"], info)
            self.assertTrue(info["still_lazy"], info)

    def test_a_flight_recorder_dump_does_not_import_inductor(self):
        """torch 2.x's Flight Recorder dump reads torch._inductor while it symbolizes its stacks:
        a second of each rank's exit (0.99-1.16 s here) in a job without inductor. The
        collector's dump leaves it unimported and keeps the stacks; torch's own call imports it."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = subprocess.run([ptest.TORCH_PYTHON, "-c", FR_SCRIPT, str(port)], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=PYPKG), timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        info = json.loads(p.stdout.strip().splitlines()[-1])
        if not info["has_fr"]:  # torch 1.x: no Flight Recorder
            self.assertLess(ptest.torch_major(ptest.TORCH_PYTHON), 2, info)
            return
        print(f"Flight Recorder dump {info['dump_s'] * 1e3:.1f} ms", file=sys.stderr)
        self.assertFalse(info["dump_imported"], info)
        self.assertIn("sync_step", info["functions"], info)  # the stacks are kept
        self.assertTrue(info["torch_imported"], info)

    def test_post_processing_threads_run_at_the_lowest_priority(self):
        report = tempfile.mkdtemp(prefix="pt_wcost_run_")
        cmd = [ptest.BIN, "run", "--nproc", "2", "--report-dir", report, "--",
               # Each step waits 30 ms (as a GPU-bound step waits for its kernels): on torch 2.x a
               # step of this model alone is 7-10 ms, and 300 of them ended before the baseline
               # window, which starts 2 s of iterations ahead.
               ptest.TORCH_PYTHON, TRAIN, "--iters", "300", "--step-sleep-ms", "30"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = {}  # tid -> (name, nice)
        try:
            deadline = time.time() + 120
            while proc.poll() is None and time.time() < deadline:
                seen.update(launcher_threads(proc.pid))  # noqa
                time.sleep(0.2)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(proc.returncode, 0, err[-2000:])
        threads = sorted(seen.values())
        low = {name for name, nice in threads if nice == 19}
        # The server's publisher and the agent's post-processing thread; the agent's memory
        # sampler keeps the normal priority (at the lowest it would miss its readings while the
        # ranks take every core).
        self.assertEqual(low, {"pt-publish", "pt-agent-post"}, f"threads seen: {threads}")
        self.assertIn(("pt-agent-rss", 0), threads)
        # The launcher's other threads (the agent's relay loop, the server's timer) keep theirs.
        self.assertTrue(any(nice == 0 for _, nice in threads), threads)
        # And the windows still got diagnosed, from background threads.
        with open(os.path.join(report, "windows", "1", "diagnosis.json")) as f:
            self.assertIn("findings", json.load(f))


if __name__ == "__main__":
    ptest.main()
