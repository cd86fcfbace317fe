"""Causes from the OS's evidence and the job's own baseline, on real faults (issue 24):

- a rank that computes alone for seconds while its peers wait (a one-off evaluation or checkpoint
  on one rank) sets off the hang detector; when its step then completes the hang report is
  amended: the rank was slow, not hung;
- every rank held by one cgroup CPU quota from mid-run: the peers stay alike, so only the
  comparison with the job's own baseline window can say what changed, and names the quota;
- a rank that saves a 16 MiB checkpoint every step and fsyncs it stalls on storage I/O: named
  io_stall with the bytes it writes per iteration against its peers';
- a rank that keeps 1 MiB every step (a leak): its memory growth is found from the agent's
  always-on RSS samples, with its size per iteration and the iterations left before the host's
  memory runs out, though the job never slows;
- every rank keeping Python objects every step (a metrics history): the job's own leak, named
  where the objects are made from the ranks' sampled Python heap; every rank filling and
  emptying a cache (a sawtooth): no leak;
- a rank sharing its core with a busy process (2 ranks bound to a core each): its run-queue wait
  per second of CPU names it, not its waiting peer;
- a tenth of a CPU for one rank (a cgroup quota): throttled, not hung;
- a rank with 8x the rows per batch (longer sequences): more work, its larger inputs beside its
  peers', recorded by the slowdown window (the baseline window records no shapes).

Real torch (PT_TORCH_PYTHON), gloo, 4 ranks under `perftracker run` with the product's defaults;
the job waits 30 ms in every step as in test_online_run.py (its FAULT_AT comment says why).
The quota needs root and a cgroup file system with the cpu controller (v1 or v2); where there is
none the test says so and, under CI, fails.
"""
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402
from test_online_run import FAULT_AT, STEP, run_job  # noqa: E402

V1 = "/sys/fs/cgroup/cpu"
V1_MEMORY = "/sys/fs/cgroup/memory"
V2 = "/sys/fs/cgroup"


class CpuQuota:
    """A cgroup whose CPU quota is CPUS, removed by close(); `error` says why it could not be made."""

    def __init__(self, cpus, period_us=100000):
        self.path, self.error, self.parent = None, None, None
        self.lifted = None  # the quota in CPUs when lift() took it away
        name = f"pt_quota_{os.getpid()}"
        quota = int(cpus * period_us)
        try:
            if os.path.exists(os.path.join(V1, "cpu.cfs_quota_us")):
                self.parent, self.path = V1, os.path.join(V1, name)
                os.mkdir(self.path)
                self._write("cpu.cfs_period_us", str(period_us))
                self._write("cpu.cfs_quota_us", str(quota))
            elif os.path.exists(os.path.join(V2, "cgroup.controllers")):
                with open(os.path.join(V2, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
                self.parent, self.path = V2, os.path.join(V2, name)
                os.mkdir(self.path)
                self._write("cpu.max", f"{quota} {period_us}")
            else:
                self.error = "no cgroup file system with the cpu controller"
        except OSError as e:
            self.error = f"cannot make a cgroup with a CPU quota: {e}"
            self.close()

    def cpus(self):
        """The quota now, in CPUs (the job may have set it), or the one lift() took away."""
        if self.lifted is not None:
            return self.lifted
        if os.path.exists(os.path.join(self.path, "cpu.max")):
            with open(os.path.join(self.path, "cpu.max")) as f:
                quota, period = f.read().split()
        else:
            with open(os.path.join(self.path, "cpu.cfs_quota_us")) as f:
                quota = f.read()
            with open(os.path.join(self.path, "cpu.cfs_period_us")) as f:
                period = f.read()
        return int(quota) / int(period)

    def lift(self):
        """No quota from now on (the job was diagnosed and is told to end: its last steps and its
        exit, torch's teardown in each rank, would otherwise take the quota's time, 11-15 s
        here)."""
        self.lifted = self.cpus()
        if os.path.exists(os.path.join(self.path, "cpu.max")):
            self._write("cpu.max", "max")
        else:
            self._write("cpu.cfs_quota_us", "-1")

    def _write(self, name, text):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(text)

    def close(self):
        if not self.path or not os.path.isdir(self.path):
            return
        try:  # whatever is left (the job has ended) goes back to the parent
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                for pid in f.read().split():
                    with open(os.path.join(self.parent, "cgroup.procs"), "w") as g:
                        g.write(pid)
        except OSError:
            pass
        try:
            os.rmdir(self.path)
        except OSError:
            pass


class MemoryLimit:
    """A memory cgroup limited to MIB MiB (v1 memory controller, or v2), removed by close();
    `error` says why it could not be made."""

    def __init__(self, mib):
        self.path, self.error, self.parent = None, None, None
        name = f"pt_mem_{os.getpid()}"
        limit = str(int(mib * 2 ** 20))
        try:
            if os.path.exists(os.path.join(V1_MEMORY, "memory.limit_in_bytes")):
                self.parent, self.path = V1_MEMORY, os.path.join(V1_MEMORY, name)
                os.mkdir(self.path)
                self._write("memory.limit_in_bytes", limit)
                if os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")):
                    self._write("memory.memsw.limit_in_bytes", limit)  # no swap to spill into
            elif os.path.exists(os.path.join(V2, "cgroup.controllers")):
                with open(os.path.join(V2, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory")
                self.parent, self.path = V2, os.path.join(V2, name)
                os.mkdir(self.path)
                self._write("memory.max", limit)
                self._write("memory.swap.max", "0")
            else:
                self.error = "no cgroup file system with the memory controller"
        except OSError as e:
            self.error = f"cannot make a cgroup with a memory limit: {e}"
            self.close()

    _write = CpuQuota._write
    close = CpuQuota.close


def window_findings(report):
    """{window id: its findings} of every window and hang of REPORT."""
    out = {}
    for p in glob.glob(os.path.join(report, "windows", "*", "diagnosis.json")):
        with open(p) as f:
            out[int(p.split(os.sep)[-2])] = json.load(f)["findings"]
    return out


class OsJobs:
    """Runs 4-rank train_ddp.py jobs under `perftracker run` (mixed into a TestCase)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pt_os_")

    def job(self, name, *train_args, nproc=4, run_out=False, on_stop=None, opened_after=0):
        """({window id: its findings}, the job's output for messages). A job with a fault ends once
        the first window that began at or after the fault's start (plus OPENED_AFTER iterations)
        is diagnosed, unless RUN_OUT (ON_STOP is called then: ptest.run_until_diagnosed)."""
        report = os.path.join(self.tmp, name)
        until = None
        if not run_out and "--fault-start" in train_args:
            until = int(train_args[train_args.index("--fault-start") + 1]) + opened_after
        p = run_job(report, list(train_args), nproc=nproc, until=until, on_stop=on_stop)
        out = f"--- stdout\n{p.stdout[-6000:]}\n--- stderr\n{p.stderr[-6000:]}"
        self.assertEqual(p.returncode, 0, out)
        ws = window_findings(report)
        print(f"{name}: {p.seconds:.1f} s, windows " + "; ".join(
            f"{w}: " + (", ".join(f"{f['category']} {f['ranks']}" for f in fs) or "none")
            for w, fs in sorted(ws.items())), file=sys.stderr)
        return ws, out

    def kept_place(self, leaks, function, op, mib, delta, out):
        """The latest of the memory_growth findings LEAKS that names where memory is kept, checked
        to name train_ddp.py's FUNCTION, allocating through OP, MIB a step within DELTA."""
        named = [g for g in leaks if "kept_at" in g.get("evidence", {})]
        self.assertTrue(named, out)
        g = named[-1]
        self.assertRegex(g["evidence"]["kept_at"], rf"train_ddp\.py\(\d+\): {function}$", out)
        self.assertEqual(g["evidence"]["kept_by_op"], op, out)
        self.assertAlmostEqual(g["evidence"]["kept_bytes_per_iteration"] / 2 ** 20, mib, delta=delta)
        return g


@unittest.skipUnless(ptest.online_built() and ptest.torch_available(), "needs the online build and torch")
class OsCauses(OsJobs, unittest.TestCase):
    def test_a_stall_that_ends_is_slow_not_a_hang(self):
        # Rank 2 computes for 9 s at iteration 130 while its peers wait in the all-reduce: the
        # hang detector fires (5 mean iterations of silence), the server confirms it after 5 s
        # and reports a hang; then rank 2's step completes and the report says what it was.
        ws, out = self.job("stall", "--iters", "240", *STEP, "--fault", "stall", "--fault-rank", "2",
                           "--fault-start", FAULT_AT, "--fault-ms", "9000", run_out=True)
        every = [f for fs in ws.values() for f in fs]
        self.assertFalse([f for f in every if f["category"] == "hang"], out)
        slow = [f for f in every if "slow, not hung" in f["summary"]]
        self.assertTrue(slow, out)
        self.assertEqual(slow[0]["category"], "straggler", out)
        self.assertEqual(slow[0]["ranks"], [2], out)
        self.assertGreaterEqual(slow[0]["evidence"]["stalled_seconds"], 5, out)

    def test_every_rank_throttled_is_named_against_the_baseline(self):
        # From iteration 130 every rank shares one quota of a quarter of a CPU (the four use half
        # a CPU together): every rank slows alike, the peers stay alike, and the slowdown window
        # must say what changed since the baseline window.
        quota = CpuQuota(0.25)
        if quota.error:
            self.skipTest(quota.error)
        try:
            ws, out = self.job("all_quota", "--iters", "400", *STEP, "--fault", "cpu-quota",
                               "--fault-rank", "all", "--fault-start", FAULT_AT,
                               "--fault-cgroup", quota.path, on_stop=quota.lift)
        finally:
            quota.close()
        self.assertGreaterEqual(len(ws), 2, out)
        later = [f for w, fs in ws.items() if w > min(ws) for f in fs]
        named = [f for f in later if f["category"] == "cpu_throttled" and f["ranks"] == [0, 1, 2, 3]]
        self.assertTrue(named, out)
        self.assertIn("baseline window", named[0]["summary"], out)
        self.assertGreaterEqual(named[0]["evidence"]["throttled_share"], 0.2, out)

    def test_every_rank_throttled_from_inside_the_baseline_is_still_named(self):
        # Issue 36: the quota begins at iteration 40, about where the baseline window profiles
        # (once every rank reported 20 iterations, 2 s ahead): before, inside or right after it.
        # A baseline holding part of the fault must not hide it: the OS's own account (every
        # rank throttled in most periods) and the healthy rate from the unprofiled iterations
        # name it in the first window that profiled it, and the report says what it compared
        # against.
        quota = CpuQuota(0.25)
        if quota.error:
            self.skipTest(quota.error)
        try:
            ws, out = self.job("all_quota_early", "--iters", "200", *STEP, "--fault", "cpu-quota",
                               "--fault-rank", "all", "--fault-start", "40",
                               "--fault-cgroup", quota.path, on_stop=quota.lift)
        finally:
            quota.close()
        # The job's own diagnosis (its latest window's): whichever window profiled the quota
        # first, the baseline itself or a slowdown window, names it on every rank, first.
        with open(os.path.join(self.tmp, "all_quota_early", "diagnosis.json")) as f:
            final = json.load(f)
        self.assertTrue(final["findings"], out)
        first = final["findings"][0]
        self.assertEqual(first["category"], "cpu_throttled", out)
        self.assertEqual(first["ranks"], [0, 1, 2, 3], out)
        self.assertGreaterEqual(first["evidence"]["throttled_share"], 0.5, out)
        notes = final["job"]["notes"]
        self.assertTrue([n for n in notes if n.startswith("compared with: ")], notes)

    def test_a_leak_is_named_with_its_growth_and_the_iterations_left(self):
        # The leak begins after 200 healthy iterations (a fit over the whole run missed such a
        # leak: issue 37); it is named, and placed where it began.
        ws, out = self.job("leak", "--iters", "420", *STEP, "--fault", "leak", "--fault-rank", "1",
                           "--fault-start", "200", "--fault-mb", "1", nproc=2, run_out=True)
        every = [f for fs in ws.values() for f in fs]
        leaks = [f for f in every if f["category"] == "memory_growth"]
        self.assertTrue(leaks, out)
        f = leaks[0]
        self.assertEqual(f["ranks"], [1], out)
        mib = f["evidence"]["bytes_per_iteration"] / 2 ** 20
        self.assertGreater(mib, 0.8, out)
        self.assertLess(mib, 2.0, out)
        self.assertGreater(f["evidence"]["iterations_left"], 0, out)
        self.assertGreaterEqual(f["evidence"]["first_iteration"], 180, out)
        self.assertIn("rank 1's memory grows every iteration", f["summary"], out)
        # The window the growth opened recorded rank 1's allocations: where it keeps memory, the
        # training step's function (train_ddp.py's train_step()) calling torch.ones, 1 MiB a step
        # (an iteration whose allocation fell outside the profiler's step marks counts none).
        # On a torch without Kineto (1.13) the collector follows the rank's tensors itself; on
        # 2.x torch.profiler's profile_memory records them.
        g = self.kept_place(leaks, "train_step", "aten::ones", 1, 0.2, out)
        self.assertEqual(g["functions"][0]["name"], g["evidence"]["kept_at"], out)
        # Recording where rank 1 keeps memory does not make it a slow rank: its ops' time stays
        # in the program's calls of them (the recorder's own calls go unrecorded).
        window = [w for w, fs in ws.items() if g in fs][0]
        self.assertFalse([f for f in ws[window] if f["category"] in ("python", "straggler")], out)
        # Its allocation is no "more work on larger inputs" (its peers make no such calls).
        self.assertFalse([g for g in every if g["category"] == "more_work"], out)

    def test_python_objects_kept_by_every_rank_are_the_jobs_own_leak_named_where_made(self):
        # Every rank keeps 2 MiB of Python floats a step (a metrics history) from iteration 150:
        # the job's own code, not one rank's. The growth's window samples the ranks' Python heap
        # (torch's allocator never sees these) and names the function that makes what is kept.
        ws, out = self.job("pyleak", "--iters", "340", *STEP, "--fault", "pyleak", "--fault-rank", "all",
                           "--fault-start", "150", "--fault-mb", "2", nproc=2, run_out=True)
        leaks = [f for fs in ws.values() for f in fs if f["category"] == "memory_growth"]
        self.assertTrue(leaks, out)
        self.assertTrue(all(f["ranks"] == [0, 1] for f in leaks), out)
        self.assertIn("every rank's memory grows every iteration", leaks[0]["summary"], out)
        # A sample every 64 KiB on average: the estimate is within a third of the 2 MiB kept.
        g = self.kept_place(leaks, "log_metrics", "Python objects", 2, 0.7, out)
        self.assertRegex(g["summary"], r"called from \S*train_ddp\.py\(\d+\): train_step\)", out)

    def test_a_sawtooth_on_every_rank_is_no_leak(self):
        # Every rank keeps 16 MiB a step and lets them all go every 20 steps (a cache filled and
        # emptied) from iteration 40: memory rises and falls by 300 MiB, and is no leak. Steps of
        # ~25 ms (a 10 ms wait): the cycle is 0.5 s, well inside what the agent's readings see.
        ws, out = self.job("sawtooth", "--iters", "300", "--step-sleep-ms", "10", "--fault", "sawtooth",
                           "--fault-rank", "all", "--fault-start", "40", "--fault-mb", "16", nproc=2,
                           run_out=True)
        self.assertFalse([f for fs in ws.values() for f in fs if f["category"] == "memory_growth"], out)

    def test_slow_dataloader_workers_are_named_with_their_function(self):
        # From iteration 130 rank 1's two DataLoader worker processes sleep 200 ms in the collate
        # function per batch: a batch every 100 ms where a step takes ~45 ms.
        ws, out = self.job("loader_workers", "--iters", "320", *STEP, "--loader-workers", "2",
                           "--fault", "slow-loader", "--fault-rank", "1", "--fault-start", FAULT_AT,
                           "--fault-ms", "200")
        later = [f for w, fs in ws.items() if w > min(ws) for f in fs] if ws else []
        self.assertTrue(later, "no finding after the baseline window\n" + out)
        f = later[0]
        self.assertEqual(f["ranks"], [1], out)
        self.assertEqual(f["category"], "data_loader", out)
        self.assertIn("SleepyCollate.__call__", f["summary"], out)
        self.assertIn("DataLoader worker processes", f["summary"], out)
        self.assertGreater(f["evidence"]["loader_ms_per_batch"], 150, out)
        self.assertLess(f["evidence"]["peers_loader_ms_per_batch"], 20, out)
        # The peers wait for it in DDP's all-reduce: their wait is no finding of their own.
        self.assertFalse([g for g in later if g["ranks"] == [0, 2, 3]], out)

    def test_a_checkpoint_every_step_is_an_io_stall(self):
        ws, out = self.job("checkpoint", "--iters", "320", *STEP, "--fault", "checkpoint", "--fault-rank", "2",
                           "--fault-start", FAULT_AT, "--fault-mb", "16")
        later = [f for w, fs in ws.items() if w > min(ws) for f in fs] if ws else []
        self.assertTrue(later, "no finding after the baseline window\n" + out)
        f = later[0]
        self.assertEqual(f["ranks"], [2], out)
        self.assertEqual(f["category"], "io_stall", out)
        self.assertGreater(f["evidence"]["write_bytes_per_iteration"], 8 * 2 ** 20, out)
        # The peers wait for it in run_backward (DDP's all-reduce): its echo is no finding.
        self.assertFalse([g for g in later if g["ranks"] == [0, 1, 3]], out)

    def test_every_rank_checkpointing_every_step_is_an_all_rank_io_stall(self):
        # Every rank saves a 16 MiB checkpoint with fsync each step from the first: no rank is
        # slower than its peers and no baseline window was healthy; the host's storage pressure
        # (PSI) and every rank's writes name it in the first window.
        ws, out = self.job("checkpoint_all", "--iters", "120", *STEP, "--fault", "checkpoint", "--fault-rank",
                           "all", "--fault-start", "0", "--fault-mb", "16")
        self.assertTrue(ws and ws[min(ws)], "no finding in the baseline window\n" + out)
        f = ws[min(ws)][0]
        self.assertEqual(f["class"], "all", out)
        self.assertEqual(f["category"], "io_stall", out)
        self.assertEqual(f["ranks"], [0, 1, 2, 3], out)
        self.assertGreater(f["evidence"]["storage_bytes_per_iteration"], 8 * 2 ** 20, out)
        self.assertGreaterEqual(f["evidence"]["io_stall_share"], 0.1, out)

    def test_a_rank_killed_for_memory_is_out_of_memory(self):
        # From iteration 40 rank 1 keeps 4 MiB a step inside a 600 MiB memory cgroup until the
        # kernel's OOM killer ends it: the job's diagnosis says out of memory, which limit, and
        # quotes no profiler chatter as its error.
        limit = MemoryLimit(600)
        if limit.error:
            self.fail(limit.error)
        try:
            report = os.path.join(self.tmp, "oom")
            p = run_job(report, ["--iters", "400", *STEP, "--fault", "leak", "--fault-rank", "1", "--fault-start",
                                 "40", "--fault-mb", "4", "--fault-cgroup", limit.path])
        finally:
            limit.close()
        out = f"--- stderr\n{p.stderr[-6000:]}"
        self.assertNotEqual(p.returncode, 0, out)
        with open(os.path.join(report, "diagnosis.json")) as f:
            d = json.load(f)
        crash = [f for f in d["findings"] if f["category"] == "rank_crash"]
        self.assertTrue(crash, out)
        c = crash[0]
        self.assertEqual(c["ranks"], [1], out)
        self.assertIn("out of memory", c["summary"], out)
        self.assertIn("600 MiB", c["summary"], out)
        self.assertEqual(c["evidence"]["oom_kill"], 1, out)
        self.assertNotIn("USDT", c["summary"], out)
        self.assertNotIn("profiler_st", c["evidence"].get("error_output", ""), out)
        # c10's warning while the memory window records allocations is the profiler's too.
        self.assertNotIn("profiler results", c["evidence"].get("error_output", ""), out)
        # The growth that led there, where the memory rule found it before the kill.
        if [g for g in d["findings"] if g["category"] == "memory_growth" and 1 in g["ranks"]]:
            self.assertIn("memory had grown", c["summary"], out)
            self.assertIn("memory_growth_first_iteration", c["evidence"], out)

    def test_a_rank_sharing_its_core_is_denied_the_cpu(self):
        # Two ranks bound to a core each; from iteration 300 a busy process runs on rank 1's. No
        # step wait: the ranks are CPU-bound (hidden 1024: ~25 ms steps), so the competitor
        # halves rank 1's CPU and rank 0 waits for it in DDP's all-reduce.
        # The job ends once a window that opened after the fault is diagnosed: one that began 70
        # iterations after it (a window starts 2 s after it opens, 60-70 of these steps before the
        # fault). A window that opened before the fault and began just after it (CI: the VM's
        # drift opened one at ~250 that began at 307) measures the OS from its command on, over
        # its lead, mostly before the fault, and names nothing; the worker's trigger then opens
        # another (1.5x the drift's trigger level is past the cooldown's escalation).
        ws, out = self.job("contention", "--iters", "700", "--hidden", "1024", "--fault", "cpu-contention",
                           "--fault-rank", "1", "--fault-start", "300", nproc=2, opened_after=70)
        later = [f for w, fs in ws.items() if w > min(ws) for f in fs] if ws else []
        self.assertTrue(later, "no finding after the baseline window\n" + out)
        f = later[0]
        self.assertEqual(f["ranks"], [1], out)
        self.assertEqual(f["category"], "cpu_contention", out)
        # Named for its wait for a CPU: at least policy kRunQueueWaitRatio (1.5x) its peer's per
        # CPU second, what the product requires beside a slower function (.ci/run at 7d4f4c7:
        # 0.97 against 0.53 s, 1.8x, the window opened 10 iterations after the competitor did;
        # the 2x asserted before is kRunQueueAloneRatio, for a rank no slower function names).
        self.assertGreaterEqual(f["evidence"]["runq_wait_per_cpu_s"],
                                1.5 * f["evidence"]["peers_runq_wait_per_cpu_s"], out)
        # Rank 0 waits for it: neither its wait nor the pair's is a finding of its own.
        self.assertFalse([g for g in later if g["ranks"] in ([0], [0, 1])], out)

    def test_a_quota_on_one_rank_is_throttling_not_a_hang(self):
        # From iteration 130 rank 2 gets 40% of the CPU it used before: its compute takes 2.5x as
        # long. (A step is ~10 ms of CPU and a 30 ms wait here, a quarter of a CPU; a fixed tenth
        # of a CPU barely slowed a faster machine's rank, whose step needs 4 ms, and no window
        # came.)
        quota = CpuQuota(1.0)
        if quota.error:
            self.skipTest(quota.error)
        try:
            ws, out = self.job("quota", "--iters", "320", *STEP, "--fault", "cpu-quota", "--fault-rank", "2",
                               "--fault-start", FAULT_AT, "--fault-cgroup", quota.path,
                               "--fault-cpu-share", "0.4", on_stop=quota.lift)
            cpus = quota.cpus()
        finally:
            quota.close()
        latest = ws[max(ws)] if ws else []
        self.assertTrue(latest, "no finding\n" + out)
        f = latest[0]
        self.assertEqual(f["ranks"], [2], out)
        self.assertEqual(f["category"], "cpu_throttled", out)
        self.assertIn(f"quota of {cpus:.2f} CPUs", f["summary"], out)
        self.assertGreaterEqual(f["evidence"]["throttled_periods_share"], 0.2, out)
        every = [g for fs in ws.values() for g in fs]
        self.assertFalse([g for g in every if g["category"] == "hang"], out)
        # Every rank's all-reduce waits for it: its echo, no finding of the job's.
        self.assertFalse([g for g in latest if g["ranks"] == [0, 1, 2, 3]], out)

    def test_more_work_is_named_with_the_input_shapes(self):
        # From iteration 130 rank 2's batches hold 8x the rows (hidden 512: the weights are as
        # large as the batch, so the total of an op's inputs grows 2.3x and its data input 8x).
        # 4x the rows slowed the job by 9% in one bench run of five: under the slowdown
        # trigger's threshold there (14-16%, from the job's own noise), so no window opened.
        ws, out = self.job("skew", "--iters", "320", *STEP, "--hidden", "512", "--fault", "skew",
                           "--fault-rank", "2", "--fault-start", FAULT_AT, "--fault-scale", "8")
        later = [f for w, fs in ws.items() if w > min(ws) for f in fs] if ws else []
        self.assertTrue(later, "no finding after the baseline window\n" + out)
        f = later[0]
        self.assertEqual(f["ranks"], [2], out)
        self.assertEqual(f["category"], "more_work", out)
        # torch 2.x names aten::linear's inputs, 1.13 aten::addmm's (bias first): either way the
        # rank's [512, 512] data against its peers' [64, 512].
        self.assertIn("[64, 512]", f["summary"], out)
        self.assertEqual(f["evidence"]["input_elements_ratio"], 8.0, out)
        for g in (g for fs in ws.values() for g in fs):
            self.assertNotIn(g["category"], ("cpu_contention", "cpu_throttled", "hang"), out)



# Runs DataLoader(num_workers=2) with loader.py's patch under the job's Python; prints each
# worker file's (batches, dataset ns, collate ns, dataset name, collate name) while the workers
# live, then the files left once they ended (the agent removes them; src/agent/loader_stats_test.cc).
LOADER_SCRIPT = textwrap.dedent("""
    import glob, json, os, struct, sys, time
    import torch, torch.utils.data
    from perftracker import loader
    import torch.utils.data._utils.fetch as fetch
    loader.patch_fetchers(fetch)
    folder = sys.argv[1]
    os.environ["PERFTRACKER_AGENT_SOCKET"] = os.path.join(folder, "agent.sock")
    def slow_collate(batch):
        time.sleep(0.02)
        return torch.utils.data._utils.collate.default_collate(batch)
    data = torch.utils.data.TensorDataset(torch.arange(24.0))
    dl = torch.utils.data.DataLoader(data, batch_size=2, num_workers=2, collate_fn=slow_collate,
                                     persistent_workers=True)
    it = iter(dl)
    got = [next(it) for _ in range(12)]
    time.sleep(0.2)
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "loader-*"))):
        b = open(path, "rb").read()
        assert b[:4] == b"PTLW" and len(b) == 512, (path, len(b))
        seq, batches, ds, co = struct.unpack_from("<QQQQ", b, 8)
        names = [b[40 + 128 * k:168 + 128 * k].split(b"\\0")[0].decode() for k in (0, 1)]
        rows.append([seq, batches, ds, co] + names)
    del it, dl
    time.sleep(1.0)
    print(json.dumps({"files": rows, "left": glob.glob(os.path.join(folder, "loader-*"))}))
""")


@unittest.skipUnless(ptest.torch_available(), "needs torch")
class LoaderWorkerFiles(unittest.TestCase):
    def test_each_worker_counts_its_batches_and_names_its_functions(self):
        pythons = sorted({ptest.TORCH_PYTHON, "/usr/bin/python3"})  # torch 2.x and Debian's 1.13
        for python in pythons:
            with self.subTest(python=python), tempfile.TemporaryDirectory() as folder:
                env = dict(os.environ, PYTHONPATH=os.path.join(ptest.SOURCE, "python"))
                p = subprocess.run([python, "-c", LOADER_SCRIPT, folder], capture_output=True, text=True,
                                   timeout=120, env=env)
                self.assertEqual(p.returncode, 0, p.stderr[-3000:])
                got = json.loads(p.stdout.strip().splitlines()[-1])
                files = got["files"]
                self.assertEqual(len(files), 2, got)  # one per worker process
                self.assertEqual(sum(f[1] for f in files), 12, got)  # every batch, counted once
                for seq, batches, dataset_ns, collate_ns, dataset_fn, collate_fn in files:
                    self.assertEqual(seq % 2, 0, got)
                    self.assertGreaterEqual(collate_ns, batches * 0.02e9, got)  # the 20 ms sleep
                    self.assertLess(dataset_ns, collate_ns, got)
                    self.assertTrue(dataset_fn.startswith("TensorDataset.__getitem"), got)
                    self.assertTrue(collate_fn.startswith("slow_collate (<string>:"), got)
                # Kept for the agent's last reading of a window that ends as they exit.
                self.assertEqual(len(got["left"]), 2, got)


if __name__ == "__main__":
    ptest.main()
