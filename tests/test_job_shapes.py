"""Real torch 2.x jobs of every shape (DDP, FSDP2, tensor x data parallel, pipelining, a manual
pipeline, torch.compile, the Hugging Face and Lightning trainers) under `perftracker run` with the
product's defaults: clean, nothing above 3% of an iteration and no missing rank; with a straggler
on rank 2 from the first step, the baseline window's first finding names rank 2 alone. The table
is tests/job_shapes.py; bench/online_accuracy.py --shapes repeats it for pass rates."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import job_shapes  # noqa: E402
import ptest  # noqa: E402


class JobShapes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ptest.require_torch2()
        cls.tmp = tempfile.mkdtemp(prefix="pt_shapes_")

    def check(self, name):
        shape = job_shapes.BY_NAME[name]
        for straggler in (False, True):
            tag = f"{name}-{'straggler' if straggler else 'clean'}"
            report = os.path.join(self.tmp, tag)
            p, secs = job_shapes.run_shape(ptest.BIN, ptest.TORCH_PYTHON, shape, straggler, report)
            self.assertEqual(p.returncode, 0, f"{tag}: exit {p.returncode}\n{p.stderr[-3000:]}")
            ok, named = job_shapes.judge(report, straggler)
            print(f"{tag}: {named} ({secs:.0f} s)", file=sys.stderr)
            self.assertTrue(ok, f"{tag}: {named}\n{p.stderr[-3000:]}")

    def test_ddp(self):
        self.check("ddp")

    def test_fsdp2(self):
        self.check("fsdp2")

    def test_tp_dp(self):
        self.check("tp_dp")

    def test_pipeline(self):
        self.check("pipeline")

    def test_pipeline_manual(self):
        self.check("pipeline_manual")

    def test_compiled(self):
        self.check("compiled")

    def test_hf_trainer(self):
        self.check("hf_trainer")

    def test_lightning(self):
        self.check("lightning")


if __name__ == "__main__":
    ptest.main()
