"""A pipeline job's roles under `perftracker run` with the product's defaults (torch 2.x,
examples/jobs/pipeline.py: 2 stages x 2 replicas, rank = 2 * replica + stage, a DataLoader on
stage 0 only). A rank is compared with the ranks of its own stage; a stage-1 rank, whose
collectives carry other tensors and mostly wait, is never "more work" than a stage-0 one.

- One stage-0 rank's DataLoader slow, on a busy host (a competing process takes a core): its
  loader is the first finding, and no finding on another rank costs as much (the issue-36 run on
  a busy host put "rank 1 does more work: its gloo:all_reduce inputs are 2.0x" first).
- A small straggler on a stage-0 rank (extra matmuls worth about 12 ms a step, which the
  pipeline turns into a few percent of the ~115 ms step): named, on its rank alone.
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402
from job_shapes import JOBS, share  # noqa: E402

PIPELINE = os.path.join(JOBS, "pipeline.py")
RANK = 2  # replica 1, stage 0: it has a DataLoader


class PipelineRoles(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ptest.require_torch2()
        cls.tmp = tempfile.mkdtemp(prefix="pt_pipeline_")

    def run_job(self, name, *args, busy=False):
        """The first window's findings and the job's output (for messages)."""
        report = os.path.join(self.tmp, name)
        competitor = None
        if busy:  # a process that wants a whole core for as long as the job runs
            competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            # The job ends once its first window is diagnosed, every rank at the same step
            # (--stop-file): nothing after it is judged (4-5 s of its 90 steps here).
            stop = report + ".stop"
            p = ptest.run_until_diagnosed(
                [ptest.BIN, "run", "--nproc", "4", "--report-dir", report, "--", ptest.TORCH_PYTHON,
                 PIPELINE, "--steps", "90", "--print-every", "0", *args, "--stop-file", stop],
                report, stop, 0, timeout=600)
        finally:
            if competitor:
                competitor.kill()
                competitor.wait()
        out = p.stderr[-5000:]
        self.assertEqual(p.returncode, 0, out)
        ws = ptest.windows(report)
        self.assertTrue(ws, "no window was diagnosed\n" + out)
        first = ws[min(ws)]["findings"]
        print(f"{name}: " + ("; ".join(f"{f['category']} {f['ranks']} {f['impact']['ms_per_iteration']:.1f} ms"
                                       for f in first) or "no findings"), file=sys.stderr)
        return first, out

    def test_one_loader_on_a_busy_host_is_named_first(self):
        first, out = self.run_job("loader", "--fault", "slow-loader", "--fault-rank", str(RANK), "--fault-start", "0",
                                  "--fault-ms", "40", busy=True)
        self.assertTrue(first, out)
        f = first[0]
        self.assertEqual(f["ranks"], [RANK], out)
        self.assertEqual(f["category"], "data_loader", out)
        # What it costs is about the 40 ms a batch sleeps (the profiler adds some), not more than
        # an iteration; no other rank's finding claims as much.
        self.assertLess(f["impact"]["ms_per_iteration"], 1.5 * 40 + 10, out)
        for g in first[1:]:
            self.assertLess(g["impact"]["ms_per_iteration"], f["impact"]["ms_per_iteration"], out)
            self.assertNotEqual(g["category"], "more_work", out)

    def test_a_small_straggler_is_named(self):
        work, per = ptest.fault_work_for(12)
        first, out = self.run_job("straggler", "--fault", "straggler", "--fault-rank", str(RANK), "--fault-start", "0",
                                  "--fault-size", "256", "--fault-work", str(work))
        self.assertTrue(first, f"{work} matmuls of {per:.2f} ms: no findings\n" + out)
        self.assertEqual(first[0]["ranks"], [RANK], out)
        # The cost is bounded by the rank's own excess (cost_bound.h): no more than the iteration.
        self.assertLess(share(first[0]), 1.0, out)


if __name__ == "__main__":
    ptest.main()
