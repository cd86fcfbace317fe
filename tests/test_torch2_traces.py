"""Traces torch 2.13's profiler writes (tests/data/torch213, README there): a real 2-rank DDP job
on CPU (gloo) with Kineto, with_stack and record_shapes, and a trace whose names hold double
quotes torch 2.13 does not escape. What perftracker reads from them: the ProfilerStep#N
iterations, the collectives, the Python stacks, the job from distributedInfo."""
import gzip
import json
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

DATA = os.path.join(ptest.SOURCE, "tests", "data", "torch213")
RANKS = [os.path.join(DATA, f"rank-{r}.json.gz") for r in (0, 1)]
QUOTED = os.path.join(DATA, "quoted_names", "rank-0.json.gz")


def raw(path):
    with gzip.open(path, "rt") as f:
        return f.read()


def show(paths, top=400):
    """`perftracker show`: {rank: its breakdown} and {rank: its function rows (class, name, calls
    per iteration, stack)}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "b.json")
        p = ptest.run(["show", *paths, "--top", str(top), "--json", out])
        assert p.returncode == 0, p.stderr
        with open(out) as f:
            breakdown = json.load(f)["ranks"]
    rows, rank = {}, None
    for line in p.stdout.splitlines():
        m = re.match(r"rank (\d+) \(", line)
        if m:
            rank = m.group(1)
            rows[rank] = []
            continue
        m = re.match(r"\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+%\s+[\d.]+ (\S+)\s+(.*)$", line)
        if m and rank is not None:
            name, _, stack = m.group(3).partition("  <- ")
            rows[rank].append({"calls": float(m.group(1)), "class": m.group(2), "name": name,
                               "stack": stack})
    return breakdown, rows, p.stdout


class Torch213Traces(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.breakdown, cls.rows, cls.text = show(RANKS)

    def test_iterations_are_the_profiler_steps(self):
        for r, path in enumerate(RANKS):
            steps = re.findall(r'"name": "ProfilerStep#(\d+)"', raw(path))
            self.assertEqual(steps, ["3", "4", "5", "6"])
            b = self.breakdown[str(r)]
            self.assertEqual(b["iterations"] + b["warmup_iterations"] + b["partial_iterations"],
                             len(steps), self.text)
            self.assertEqual(b["partial_iterations"], 0, self.text)
        # The iterations come from the ProfilerStep#N spans (not from the optimizer steps).
        self.assertEqual(len(re.findall(r"rank \d \(.*\): 3 iterations from ProfilerStep", self.text)), 2,
                         self.text)
        d = ptest.analyze([DATA])
        self.assertEqual(d["job"]["world_size"], 2)  # distributedInfo
        self.assertEqual(d["job"]["ranks"], [0, 1])
        self.assertEqual(d["job"]["iterations"], 3, d["_text"])
        self.assertTrue(any("step #3" in n and "warm-up" in n for n in d["job"]["notes"]), d["_text"])

    def test_collectives(self):
        # DDP's one gradient bucket: one all-reduce per iteration, the gloo op on gloo's own
        # threads and the c10d dispatcher op on the training thread.
        for r in ("0", "1"):
            by_name = {x["name"]: x for x in self.rows[r] if x["class"] == "collective"}
            for name in ("gloo:all_reduce", "c10d::allreduce_"):
                self.assertIn(name, by_name, self.text)
                self.assertEqual(by_name[name]["calls"], 1.0, self.text)
        # Their sizes are not in the trace's collective metadata: torch 2.13 writes
        # record_param_comms (Collective name, In msg nelems, Process Group) for NCCL, not for
        # gloo. The gloo op carries only its input's shape.
        for path in RANKS:
            text = raw(path)
            self.assertNotIn("record_param_comms", text)
            self.assertNotIn("Collective name", text)
            self.assertIn('"name": "gloo:all_reduce"', text)
            self.assertIn('"Input Dims": [[199946]]', text)
            self.assertIn('"pg_config": [{"pg_name": "0", "pg_desc": "default_pg"', text)

    def test_python_stacks(self):
        for r in ("0", "1"):
            step = [x for x in self.rows[r] if x["class"] == "python" and x["name"].endswith(": train_step")]
            self.assertEqual(len(step), 1, self.text)
            self.assertEqual(step[0]["calls"], 1.0)
            self.assertRegex(step[0]["stack"], r"train_ddp\.py\(\d+\): worker$")
            backward = [x for x in self.rows[r] if x["name"].endswith("): backward")]
            self.assertTrue(backward and all("train_step" in x["stack"] for x in backward), self.text)
            loader = [x for x in self.rows[r] if x["class"] == "data_loader" and "__next__" in x["name"]]
            self.assertTrue(loader, self.text)

    def test_summaries_diagnose_as_the_traces(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = ptest.run(["summarize", *RANKS, "-o", tmp])
            self.assertEqual(p.returncode, 0, p.stderr)
            a, b = ptest.analyze(RANKS), ptest.analyze([tmp])
        self.assertEqual(a["job"], b["job"])
        self.assertEqual(a["findings"], b["findings"])

    def test_unescaped_quotes_in_names(self):
        # torch 2.13 writes `"name": "say "hi" / back"` and `"name": "odd "quote"`: not JSON.
        text = raw(QUOTED)
        self.assertIn('"name": "say "hi" / back"', text)
        self.assertIn('"name": "odd "quote"', text)
        with self.assertRaises(json.JSONDecodeError):
            json.loads(text)
        breakdown, rows, out = show([QUOTED])
        self.assertEqual(breakdown["0"]["iterations"], 3, out)
        names = {x["name"] for x in rows["0"]}
        self.assertIn("say 'hi' / back", names, out)
        self.assertIn("odd 'quote", names, out)
        self.assertIn("aten::mm", names, out)
        d = ptest.analyze([QUOTED])
        self.assertEqual(d["job"]["iterations"], 3, d["_text"])


if __name__ == "__main__":
    ptest.main()
