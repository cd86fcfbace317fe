"""The CUDA allocator's snapshot at an out-of-memory (python/perftracker/oom.py), on a stand-in
torch (this machine has no GPU; scripts/gpu-check.sh runs the real one): the observer attaches
only once CUDA is up, writes rank_R.cuda_oom.pickle once, and a name planted in the folder fails
the write with one line, never the job."""
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

FAKE_TORCH = r"""
import sys, types
torch = types.ModuleType("torch")
torch._C = types.SimpleNamespace(observers=[])
torch._C._cuda_attach_out_of_memory_observer = torch._C.observers.append
up = {"cuda": False}
torch.cuda = types.SimpleNamespace(is_initialized=lambda: up["cuda"],
    memory=types.SimpleNamespace(_snapshot=lambda: {"segments": [{"device": 0, "total_size": 2 ** 30}],
                                                    "device_traces": []}))
torch.distributed = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: False)
sys.modules["torch"] = torch
from perftracker.oom import OomSnapshot, OOM_CHECK_EVERY
o = OomSnapshot()
for _ in range(3 * OOM_CHECK_EVERY):
    o.tick()
assert not torch._C.observers, "attached before CUDA was up"
up["cuda"] = True
for _ in range(OOM_CHECK_EVERY):
    o.tick()
assert torch._C.observers == [o.observe] and o.attached
for _ in range(OOM_CHECK_EVERY):
    o.tick()
assert len(torch._C.observers) == 1
o.observe(0, 2 ** 31, 2 ** 30, 0)
o.observe(0, 2 ** 31, 2 ** 30, 0)  # once
print("PATH", o.path)
"""


@unittest.skipUnless(ptest.online_built(), "needs the online build (the worker package)")
class OomSnapshotTest(unittest.TestCase):
    def run_fake(self, folder):
        build = os.path.dirname(os.path.abspath(ptest.BIN))
        env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), RANK="3",
                   PERFTRACKER_MEMORY_DIR=folder)
        return subprocess.run([sys.executable, "-c", FAKE_TORCH], capture_output=True, text=True,
                              env=env, timeout=60)

    def test_the_snapshot_is_written_once_cuda_is_up_and_an_oom_comes(self):
        folder = tempfile.mkdtemp(prefix="pt_oom_")
        p = self.run_fake(folder)
        self.assertEqual(p.returncode, 0, p.stderr)
        path = os.path.join(folder, "rank_3.cuda_oom.pickle")
        self.assertIn(f"PATH {path}", p.stdout)
        with open(path, "rb") as f:
            self.assertEqual(pickle.load(f)["segments"][0]["total_size"], 2 ** 30)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual(p.stderr.count("the allocator's snapshot is in"), 1, p.stderr)

    def test_a_folder_others_may_write_in_gets_no_snapshot(self):
        # Issue 40: the folder comes from the environment; one open to all could hold a link
        # planted where the snapshot goes.
        folder = tempfile.mkdtemp(prefix="pt_oom_")
        os.chmod(folder, 0o777)
        p = self.run_fake(folder)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(os.listdir(folder), [])
        self.assertIn("PATH \n", p.stdout + "\n")
        self.assertEqual(p.stderr.count("perftracker: no snapshot of the GPU memory"), 1, p.stderr)
        self.assertIn("not a folder of this user's that only it may write in", p.stderr)

    def test_a_planted_name_fails_the_write_not_the_job(self):
        folder = tempfile.mkdtemp(prefix="pt_oom_")
        target = os.path.join(folder, "elsewhere")
        os.symlink(target, os.path.join(folder, "rank_3.cuda_oom.pickle.tmp"))
        p = self.run_fake(folder)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(target))
        self.assertIn("PATH \n", p.stdout + "\n")
        self.assertEqual(p.stderr.count("perftracker: no snapshot of the GPU memory"), 1, p.stderr)


if __name__ == "__main__":
    ptest.main()
