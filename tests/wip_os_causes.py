"""WORK IN PROGRESS (issue 24), not in .ci/run.
- More work: online windows do not record input shapes (python/perftracker/window.py says why),
  so it fails until they do. With shapes recorded it passed (test_os_causes at 251e9a8 in
  .ci/run; bench skew 4 of 5 at b13274e).
- A 0.1-CPU quota on one rank: passed 4 of 4 alone and in .ci/run at 251e9a8; at b542353, under
  .ci/run's load (test_online_run beside it), no slowdown window opened (bench quota-rank 4/5).
- A rank sharing its core with a busy process (2 ranks): passed in both .ci/run today and 8 of
  10 bench runs; alone at ff07990 no window opened: the detector fired at iteration 113 (before
  the baseline window, noise) and at 312 (the fault), and the server opened no window for the
  second (the first trigger's answer seems never to have cleared).

A rank with more work (8x the rows per batch, as longer sequences are) is named more_work with
its larger inputs beside its peers', not "CPU contention", though four ranks share two cores.
Real torch (PT_TORCH_PYTHON), gloo, 4 ranks under `perftracker run` with the product's defaults.
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
    def test_a_rank_sharing_its_core_is_denied_the_cpu(self):
        # Two ranks bound to a core each; from iteration 300 a busy process runs on rank 1's. No
        # step wait: the ranks are CPU-bound (hidden 1024: ~25 ms steps), so the competitor
        # halves rank 1's CPU and rank 0 waits for it in DDP's all-reduce.
        ws, out = self.job("contention", "--iters", "700", "--hidden", "1024", "--fault", "cpu-contention",
                           "--fault-rank", "1", "--fault-start", "300", nproc=2)
        later = [f for w, fs in ws.items() if w > min(ws) for f in fs] if ws else []
        self.assertTrue(later, "no finding after the baseline window\n" + out)
        f = later[0]
        self.assertEqual(f["ranks"], [1], out)
        self.assertEqual(f["category"], "cpu_contention", out)
        self.assertGreaterEqual(f["evidence"]["runq_wait_per_cpu_s"],
                                2 * f["evidence"]["peers_runq_wait_per_cpu_s"], out)
        # Rank 0 waits for it: neither its wait nor the pair's is a finding of its own.
        self.assertFalse([g for g in later if g["ranks"] in ([0], [0, 1])], out)

    def test_a_quota_on_one_rank_is_throttling_not_a_hang(self):
        # A tenth of a CPU for rank 2 from iteration 130. A step is ~10 ms of CPU and a 30 ms
        # wait, so a rank uses about a quarter of a CPU: a tenth makes its compute 2.5x as long.
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



if __name__ == "__main__":
    ptest.main()
