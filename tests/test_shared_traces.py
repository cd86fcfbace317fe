"""Every real Kineto trace in shared/traces is analyzed; summaries round-trip; diff works."""
import glob
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402


@unittest.skipUnless(os.path.isdir(ptest.KINETO), "shared traces not found")
class SharedTraces(unittest.TestCase):
    def test_every_trace_analyzes(self):
        files = sorted(glob.glob(os.path.join(ptest.KINETO, "**", "*.gz"), recursive=True))
        self.assertGreaterEqual(len(files), 9)
        for f in files:
            d = ptest.analyze([f])
            self.assertEqual(d["schema"], "perftracker.diagnosis/1")
            self.assertGreaterEqual(d["job"]["iterations"], 1, f)
            for g in d["findings"]:
                self.assertIn(g["class"], ("subset", "all"))
                self.assertIn(g["cause"], ("hardware", "software", "configuration", "unknown"))
                self.assertTrue(g["summary"])

    def test_the_schema_check_names_what_the_doc_does_not(self):
        # Every analyze and diff of these tests is checked against docs/diagnosis-schema.md's
        # categories (ptest.schema_problems); the check itself must see an unknown key.
        cats, common = ptest.schema_categories()
        self.assertGreaterEqual(len(cats), 25)
        self.assertIn("rank_ms", common)
        self.assertEqual(ptest.schema_problems({"findings": [
            {"category": "hang", "evidence": {"rank_3_at": "x.py:1", "stalled_seconds": 9}},
            {"category": "cpu_throttled", "evidence": {"uniform_slowdown_ratio": 1.2}},
            {"category": "gc", "evidence": {"made_up_key": 1}}, {"category": "warp_drive"}]}),
            ["gc: made_up_key", "category warp_drive"])

    def test_job128_pair(self):
        d = ptest.analyze([os.path.join(ptest.KINETO, "job128_rank-0.json.gz"),
                           os.path.join(ptest.KINETO, "job128_rank-1.json.gz")])
        self.assertEqual(d["job"]["world_size"], 128)
        self.assertEqual(d["job"]["ranks"], [0, 1])
        self.assertEqual(d["job"]["iterations"], 2)
        self.assertIn("missing_rank", [f["category"] for f in d["findings"]])

    def test_nccl_rank0(self):
        d = ptest.analyze([os.path.join(ptest.KINETO, "nccl_2rank_rank0.json.gz")])
        self.assertEqual(d["job"]["iterations"], 3)
        self.assertGreater(d["job"]["iteration_ms"]["median"], 0)

    def test_diff_compare_pair(self):
        out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
        p = ptest.run(["diff", os.path.join(ptest.KINETO, "compare_pair", "base.json.gz"),
                       os.path.join(ptest.KINETO, "compare_pair", "test.json.gz"), "--json", out])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            d = json.load(f)
        self.assertEqual(d["schema"], "perftracker.diagnosis/1")
        cats = {f["category"] for f in d["findings"]}
        self.assertTrue(cats & {"regression", "improvement"}, p.stdout)


if __name__ == "__main__":
    ptest.main()
