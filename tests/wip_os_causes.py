"""WORK IN PROGRESS (issue 24), not in .ci/run yet: the one-rank quota case opens no window or
finds nothing in some runs on this machine (see the closing notes of 2026-12-03); moved into
test_os_causes.py once it passes reliably. The data-skew case (more_work from the ops' input
shapes) passed 3 of 3 runs while the window recorded shapes; record_shapes is off again (it made
the Lightning job's clean windows name false stragglers), so it fails until shapes come back.

Causes from the OS's evidence, on real faults (issue 24): a rank held by a cgroup CPU quota is
throttled, named with its quota and throttled share, and is slow, not hung; a rank with more work
(three times the rows per batch, as longer sequences are) is a straggler, not "CPU contention",
though four ranks share this machine's two cores.

Real torch (PT_TORCH_PYTHON), gloo, 4 ranks under `perftracker run` with the product's defaults;
the job waits 30 ms in every step as in test_online_run.py (its FAULT_AT comment says why).
The quota needs root and a cgroup file system with the cpu controller (v1 or v2); where there is
none the test says so and, under CI, fails.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402
from test_online_run import FAULT_AT, STEP  # noqa: E402
from test_os_causes import CpuQuota, OsJobs  # noqa: E402


@unittest.skipUnless(ptest.online_built() and ptest.torch_available(), "needs the online build and torch")
class WipOsCauses(OsJobs, unittest.TestCase):
    def test_cpu_quota_is_throttling_not_a_hang(self):
        # A tenth of a CPU for rank 2 from iteration 130. A step is ~10 ms of CPU and a 30 ms wait, so a
        # rank uses about a quarter of a CPU: a tenth makes its compute take 2.5x as long.
        quota = CpuQuota(0.1)
        if quota.error:
            self.skipTest(quota.error)
        try:
            ws, out = self.job("quota", "--iters", "320", *STEP, "--fault", "cpu-quota", "--fault-rank", "2",
                         "--fault-start", FAULT_AT, "--fault-cgroup", quota.path)
        finally:
            quota.close()
        latest = ws[max(ws)] if ws else []
        self.assertTrue(latest, "no finding\n" + out)
        f = latest[0]
        self.assertEqual(f["ranks"], [2], out)
        self.assertEqual(f["category"], "cpu_throttled", out)
        self.assertIn("quota of 0.10 CPUs", f["summary"], out)
        self.assertGreaterEqual(f["evidence"]["throttled_periods_share"], 0.2, out)
        for g in (g for fs in ws.values() for g in fs):
            self.assertNotEqual(g["category"], "hang", out)

    def test_more_work_is_named_with_the_input_shapes(self):
        # From iteration 130 rank 2's batches hold 4x the rows (hidden 512: the weights are as
        # large as the batch, so the total of an op's inputs grows 1.4x and its data input 4x).
        ws, out = self.job("skew", "--iters", "320", *STEP, "--hidden", "512", "--fault", "skew",
                           "--fault-rank", "2", "--fault-start", FAULT_AT, "--fault-scale", "4")
        later = [f for w, fs in ws.items() if w > min(ws) for f in fs] if ws else []
        self.assertTrue(later, "no finding after the baseline window\n" + out)
        f = later[0]
        self.assertEqual(f["ranks"], [2], out)
        self.assertEqual(f["category"], "more_work", out)
        self.assertIn("[256, 512]", f["summary"], out)
        self.assertIn("vs [64, 512]", f["summary"], out)
        self.assertEqual(f["evidence"]["input_elements_ratio"], 4.0, out)
        for g in (g for fs in ws.values() for g in fs):
            self.assertNotIn(g["category"], ("cpu_contention", "cpu_throttled", "hang"), out)


if __name__ == "__main__":
    ptest.main()
