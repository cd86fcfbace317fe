"""`perftracker simulate`: a small simulated job with one fault, written as Kineto traces, must be
named by `perftracker analyze`; its summaries must diagnose; bad flags are one-line errors. The
what-if replay (and `perftracker whatif`) must predict what a simulated job loses to its fault:
the same job simulated without it is the measure."""
import json
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402


def simulate(out, *args):
    p = ptest.run(["simulate", "--seed", "3", "-o", out, *args])
    if p.returncode != 0:
        raise AssertionError(f"simulate failed ({p.returncode}): {p.stderr}")
    with open(os.path.join(out, "truth.json")) as f:
        return json.load(f)


class Simulate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pt_sim_")

    def test_a_slow_gpu_is_the_top_finding_of_analyze(self):
        out = os.path.join(self.tmp, "slowgpu")
        truth = simulate(out, "--workers", "16", "--layout", "tp=2,pp=1", "--iterations", "4",
                         "--traces", "--fault", "slow-gpu@rank=5")
        self.assertEqual(truth["faults"][0]["ranks"], [5])
        self.assertEqual(truth["faults"][0]["category"], "straggler")
        self.assertEqual(len(os.listdir(os.path.join(out, "traces"))), 16)
        d = ptest.analyze([os.path.join(out, "traces")])
        self.assertTrue(d["findings"], d["_text"])
        f = d["findings"][0]
        self.assertEqual(f["ranks"], [5], d["_text"])
        self.assertEqual(f["category"], "straggler", d["_text"])

    def test_b_gc_on_one_rank_with_pipeline_stages(self):
        out = os.path.join(self.tmp, "gc")
        truth = simulate(out, "--workers", "16", "--layout", "tp=2,pp=2", "--iterations", "4",
                         "--traces", "--fault", "gc@rank=6")
        self.assertEqual(truth["faults"][0]["category"], "gc")
        d = ptest.analyze([os.path.join(out, "traces")])
        # With pipeline stages the PP peers' send/recv waits still read as slow links to
        # today's engine (issue 4, diagnosis side), so the GC finding need not be first yet.
        gc = [f for f in d["findings"] if f["category"] == "gc"]
        self.assertTrue(gc, d["_text"])
        self.assertEqual(gc[0]["ranks"], [6], d["_text"])

    def test_c_diagnose_summaries_of_a_bigger_job_with_two_faults(self):
        out = os.path.join(self.tmp, "two")
        truth = simulate(out, "--workers", "256", "--layout", "tp=4,pp=4", "--fault",
                         "slow-nic@node=3", "--fault", "hang@rank=77")
        self.assertEqual([x["kind"] for x in truth["faults"]], ["slow-nic", "hang"])
        self.assertEqual(truth["faults"][0]["ranks"], list(range(24, 32)))
        self.assertEqual(truth["faults"][0]["hosts"], ["node-3"])
        self.assertEqual(truth["faults"][1]["category"], "missing_rank")
        names = os.listdir(os.path.join(out, "summaries"))
        self.assertEqual(len(names), 255)
        self.assertNotIn("rank-77.summary", names)
        js = os.path.join(out, "d.json")
        p = ptest.run(["diagnose", os.path.join(out, "summaries"), "--json", js, "-q"])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(js) as f:
            json.load(f)

    def test_d_all_rank_faults_only_change_what_the_simulator_controls(self):
        out = os.path.join(self.tmp, "all")
        truth = simulate(out, "--workers", "16", "--layout", "tp=2,pp=2", "--fault",
                         "tiny-kernels@all", "--fault", "sync@all")
        self.assertEqual([x["class"] for x in truth["faults"]], ["all", "all"])
        self.assertEqual(truth["faults"][0]["ranks"], list(range(16)))
        p = ptest.run(["show", os.path.join(out, "summaries", "rank-9.summary"), "--top", "400"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("cudaDeviceSynchronize", p.stdout)
        self.assertIn("FillFunctor", p.stdout)

    def test_f_what_if_predicts_the_job_without_its_fault(self):
        # The same job (same seed) simulated with and without a fault: the iteration it loses
        # is what removing the fault gives. The replay (diagnose/what_if.h) predicts it from the
        # faulty job alone, within 15% (issue 39); the rule's own figure is printed beside it.
        # With pipeline stages too (pp=2: each stage replayed on its own), a fault in either stage.
        cases = [("tp=2,pp=1", "slow-gpu@rank=5", 5), ("tp=2,pp=1", "slow-gpu@rank=5,size=0.3", 5),
                 ("tp=2,pp=1", "gc@rank=9", 9), ("tp=2,pp=1", "slow-loader@rank=3", 3),
                 ("tp=2,pp=1", "cpu-contention@rank=11", 11),
                 ("tp=2,pp=2", "slow-gpu@rank=5", 5), ("tp=2,pp=2", "slow-gpu@rank=13", 13),
                 ("tp=2,pp=2", "cpu-contention@rank=11", 11)]
        for layout, fault, rank in cases:
            with self.subTest(layout=layout, fault=fault):
                name = ("wi_" + layout + "_" + fault).replace("@", "_").replace(",", "_").replace("=", "")
                base = os.path.join(self.tmp, name + "_clean")
                faulty = os.path.join(self.tmp, name)
                simulate(base, "--workers", "16", "--layout", layout)
                simulate(faulty, "--workers", "16", "--layout", layout, "--fault", fault)
                clean = ptest.analyze([os.path.join(base, "summaries")])
                d = ptest.analyze([os.path.join(faulty, "summaries")])
                lost = (d["job"]["iteration_ms"]["median"] - clean["job"]["iteration_ms"]["median"])
                named = [f for f in d["findings"] if rank in f["ranks"]]
                self.assertTrue(named, d["_text"])
                f = named[0]
                predicted = f["impact"]["what_if_ms_per_iteration"]
                print(f"{layout} {fault}: lost {lost:.2f} ms/iter; replay {predicted:.2f}, rule "
                      f"{f['impact']['ms_per_iteration']:.2f} ({f['category']})", file=sys.stderr)
                self.assertGreater(lost, 0, d["_text"])
                self.assertLessEqual(abs(predicted - lost), 0.15 * lost, d["_text"])
                # The same from the command line, by rank: the rank's compute at its peers'.
                p = ptest.run(["whatif", os.path.join(faulty, "summaries"), "--rank", str(rank)])
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertRegex(p.stdout, rf"rank {rank} at its peers' median: the iteration "
                                 r"[\d.]+ ms -> [\d.]+ ms \(saves [\d.]+ ms/iter", p.stdout)
                self.assertIn(f"rank {rank} (critical)", p.stdout)

    def test_h_what_if_of_each_of_two_faults(self):
        # Two faults on a pipelined job (tp=8, pp=2, ep=2): a slow loader on rank 3 and a busy
        # neighbour on rank 300. Each is replayed against the job without it (same seed). Rank
        # 300's waits for the stage beside it absorb its extra time: removing it gives nothing,
        # though its rule claims ~100 ms (a replay that counted those transfers as arrivals
        # said 44); removing rank 3's gives ~39 ms (the same replay said 73).
        layout = ["--workers", "512", "--layout", "tp=8,pp=2,ep=2", "--fault", "slow-gpu@rank=77,size=0.25,every=4"]
        both = os.path.join(self.tmp, "two_faults")
        simulate(both, *layout, "--fault", "slow-loader@rank=3", "--fault", "cpu-contention@rank=300")
        d = ptest.analyze([os.path.join(both, "summaries")])
        for rank, left in [(3, "cpu-contention@rank=300"), (300, "slow-loader@rank=3")]:
            with self.subTest(rank=rank):
                without = os.path.join(self.tmp, f"two_faults_without_{rank}")
                simulate(without, *layout, "--fault", left)
                lost = (d["job"]["iteration_ms"]["median"] -
                        ptest.analyze([os.path.join(without, "summaries")])["job"]["iteration_ms"]["median"])
                named = [f for f in d["findings"] if f["ranks"] == [rank]]
                self.assertTrue(named, d["_text"])
                predicted = named[0]["impact"]["what_if_ms_per_iteration"]
                print(f"two faults, rank {rank}: lost {lost:.2f} ms/iter; replay {predicted:.2f}, rule "
                      f"{named[0]['impact']['ms_per_iteration']:.2f}", file=sys.stderr)
                self.assertLessEqual(abs(predicted - lost), max(0.15 * lost, 2.0), d["_text"])

    def test_i_whatif_a_collective_at_the_bus_bandwidth_given(self):
        # NVLink on node 1 four times slower (64 workers, tp=8 inside a node). At the healthy
        # link's 200 GB/s the replay re-times the slow node's tensor-parallel collectives, and
        # the cross-node ones that run below 200 in the clean job too: its saving beyond the
        # clean job's at the same bandwidth is what the job lost to the slow link.
        layout = ["--workers", "64", "--layout", "tp=8,pp=2"]
        clean, slow = os.path.join(self.tmp, "bw_clean"), os.path.join(self.tmp, "bw_slow")
        simulate(clean, *layout)
        simulate(slow, *layout, "--fault", "slow-nvlink@node=1")
        lost = (ptest.analyze([os.path.join(slow, "summaries")])["job"]["iteration_ms"]["median"]
                - ptest.analyze([os.path.join(clean, "summaries")])["job"]["iteration_ms"]["median"])
        saves = {}
        for name, path in (("clean", clean), ("slow", slow)):
            p = ptest.run(["whatif", os.path.join(path, "summaries"), "--busbw", "200"])
            self.assertEqual(p.returncode, 0, p.stderr)
            m = re.search(r"collectives at 200 GB/s bus bandwidth: the iteration [\d.]+ ms -> "
                          r"[\d.]+ ms \(saves ([\d.]+) ms/iter", p.stdout)
            self.assertTrue(m, p.stdout)
            saves[name] = float(m.group(1))
        print(f"slow nvlink: lost {lost:.1f} ms/iter; re-timed at 200 GB/s saves {saves['slow']:.1f}, "
              f"the clean job {saves['clean']:.1f}", file=sys.stderr)
        self.assertGreater(lost, 50)
        self.assertLessEqual(abs(saves["slow"] - saves["clean"] - lost), 0.15 * lost)

    def test_j_the_critical_path_runs_through_the_slow_rank_in_every_iteration(self):
        # Rank 9's GPU is 40% slower (64 workers, tp=8,pp=2): in every iteration its stage waits
        # for it, by more than the noise between the others; the other stage's last rank
        # changes with the noise.
        out = os.path.join(self.tmp, "critical")
        simulate(out, "--workers", "64", "--layout", "tp=8,pp=2", "--fault", "slow-gpu@rank=9")
        d = ptest.analyze([os.path.join(out, "summaries")])
        path = d["job"]["critical_path"]
        self.assertEqual(len(path), d["job"]["iterations"], path)
        for it in path:
            self.assertEqual(len(it["ranks"]), 2, it)  # one per stage
            mine = [c for c in it["ranks"] if c["rank"] == 9]
            self.assertEqual(len(mine), 1, it)
            others = [c for c in it["ranks"] if c["rank"] != 9]
            self.assertGreater(mine[0]["lead_ms"], 5 * others[0]["lead_ms"], it)
        self.assertIn("last to arrive at the collectives (the critical path), per iteration: "
                      f"rank 9 in {len(path)}", d["_text"])

    def test_g_whatif_errors_are_one_line(self):
        out = os.path.join(self.tmp, "wi_errors")
        simulate(out, "--workers", "8", "--layout", "tp=2,pp=1")
        summaries = os.path.join(out, "summaries")
        for args, says in [([], "name one change"), (["--rank", "99"], "rank 99: not in the job"),
                           (["--function", "no_such_fn"], "no_such_fn: no rank runs"),
                           (["--finding", "40"], "--finding 40: the diagnosis has"),
                           (["--busbw", "50", "--rank", "1"], "name one change")]:
            p = ptest.run(["whatif", summaries, *args])
            self.assertEqual(p.returncode, 1, (args, p.stdout, p.stderr))
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn(says, lines[0])

    def test_e_bad_flags_are_one_line_errors(self):
        out = os.path.join(self.tmp, "bad")
        for args, flag in [
            (["--workers", "16", "--layout", "tp=3,pp=2"], "--layout"),
            (["--workers", "16", "--layout", "tp=2,pp=2", "--fault", "slow-gpu@moon"], "--fault"),
            (["--workers", "16", "--layout", "tp=2,pp=2", "--fault", "warp-drive@rank=1"], "--fault"),
            (["--workers", "16", "--layout", "tp=2,pp=2", "--fault", "slow-gpu@rank=99"], "--fault"),
            (["--workers", "128", "--layout", "tp=2,pp=2", "--traces"], "--traces"),
        ]:
            p = ptest.run(["simulate", "--seed", "1", "-o", out, *args])
            self.assertEqual(p.returncode, 1, args)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertTrue(lines[0].startswith(f"perftracker: error: {flag}: "), lines[0])


if __name__ == "__main__":
    ptest.main()
