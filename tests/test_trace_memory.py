"""Memory in traces recorded with torch.profiler's profile_memory=True (torch 2.x, real CPU
runs of tests/support/memory_job.py): `analyze` shows each rank's memory timeline and peak and
names memory that grows through the profiled iterations, and where it was kept (the Python
function with with_stack=True, else the op), and stays quiet when it does not;
`diff` names a peak that rose and nothing when the peaks match. Torch 1.13's legacy trace
format holds no memory records: such a trace has no memory table and no memory finding."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

JOB = os.path.join(ptest.SOURCE, "tests", "support", "memory_job.py")
MIB = 2**20
MEMORY_CATEGORIES = {"memory_growth", "memory_peak"}


def record(path, *args, python=None):
    p = subprocess.run([python or ptest.TORCH_PYTHON, JOB, path, *args], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return path


class TraceMemory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ptest.require_torch2()
        cls.tmp = tempfile.mkdtemp(prefix="pt_trace_memory_")
        cls.leak = record(os.path.join(cls.tmp, "leak.json"), "--leak-mib", "16")
        cls.leak_stack = record(os.path.join(cls.tmp, "leak_stack.json"), "--leak-mib", "16",
                                "--with-stack")
        cls.clean = record(os.path.join(cls.tmp, "clean.json"))
        cls.clean2 = record(os.path.join(cls.tmp, "clean2.json"), "--steps", "6")
        cls.big = record(os.path.join(cls.tmp, "big.json"), "--batch", "8192", "--steps", "6")

    def test_a_leak_is_named_with_its_rate_and_timeline(self):
        d = ptest.analyze([self.leak])
        first = d["findings"][0]
        self.assertEqual(first["category"], "memory_growth", d["_text"])
        self.assertEqual(first["ranks"], [0])
        self.assertEqual(first["evidence"]["device"], "cpu")
        # 16 MiB kept every step, as the allocator counted it.
        self.assertAlmostEqual(first["evidence"]["bytes_per_iteration"] / MIB, 16, delta=0.5)
        self.assertIn("grows 16.0 MiB per iteration", first["summary"])
        (m,) = d["job"]["memory"]
        self.assertEqual((m["rank"], m["device"]), (0, "cpu"))
        ends = m["iteration_end_bytes"]
        self.assertEqual(len(ends), m["iterations"])
        self.assertGreaterEqual(len(ends), 4)
        self.assertTrue(all(b - a > 15 * MIB for a, b in zip(ends, ends[1:])), ends)
        self.assertGreaterEqual(m["peak_allocated_bytes"], ends[-1])
        self.assertNotIn("peak_reserved_bytes", m)  # the CPU keeps no cache
        self.assertIn("memory (the traces' memory records", d["_text"])
        self.assertRegex(d["_text"], r"rank +0 cpu +peak .* over \d+ iterations \(\+16\.0 MiB/iteration\)")
        # Without Python frames the place is the op the program called.
        self.assertEqual(first["evidence"]["kept_at"], "aten::ones", first["summary"])
        self.assertAlmostEqual(first["evidence"]["kept_bytes_per_iteration"] / MIB, 16, delta=0.01)

    def test_a2_with_python_frames_the_leak_is_named_by_its_function(self):
        d = ptest.analyze([self.leak_stack])
        first = d["findings"][0]
        self.assertEqual(first["category"], "memory_growth", d["_text"])
        # memory_job.py's remember(), called from main(): the line that keeps the tensors.
        self.assertRegex(first["evidence"]["kept_at"], r"memory_job\.py\(\d+\): remember$")
        fn = first["functions"][0]
        self.assertEqual(fn["name"], first["evidence"]["kept_at"])
        self.assertEqual(fn["kind"], "python_function")
        self.assertRegex(fn["stack"][-1], r"memory_job\.py\(\d+\): main$")
        self.assertAlmostEqual(first["evidence"]["kept_bytes_per_iteration"] / MIB, 16, delta=0.01)
        self.assertEqual(first["evidence"]["kept_by_op"], "aten::ones")
        self.assertRegex(first["summary"], r"kept at memory_job\.py\(\d+\): remember \(aten::ones, called "
                         r"from memory_job\.py\(\d+\): main\): 16\.0 MiB per iteration in (\d+) of rank 0's "
                         r"\1 profiled iterations")
        (m,) = d["job"]["memory"]
        self.assertEqual(m["kept"][0]["function"], first["evidence"]["kept_at"])
        self.assertRegex(d["_text"], r"kept past its iteration most at memory_job\.py\(\d+\): remember "
                         r"\(aten::ones\): 16\.0 MiB per iteration")

    def test_b_a_clean_run_has_a_timeline_and_no_memory_finding(self):
        d = ptest.analyze([self.clean])
        self.assertEqual([f for f in d["findings"] if f["category"] in MEMORY_CATEGORIES], [], d["_text"])
        (m,) = d["job"]["memory"]
        self.assertLess(abs(m["bytes_per_iteration"]), MIB)
        self.assertGreater(m["peak_allocated_bytes"], 0)

    def test_c_diff_names_a_higher_peak_and_nothing_for_the_same_one(self):
        d = ptest.diff(self.clean, self.big)
        peaks = [f for f in d["findings"] if f["category"] == "memory_peak"]
        self.assertEqual(len(peaks), 1, d["_text"])
        ev = peaks[0]["evidence"]
        self.assertGreater(ev["peak_allocated_bytes"], ev["base_peak_allocated_bytes"] + 64 * MIB)
        self.assertIn("peak allocated memory on cpu is higher in TEST", peaks[0]["summary"])
        same = ptest.diff(self.clean, self.clean2)
        self.assertEqual([f for f in same["findings"] if f["category"] in MEMORY_CATEGORIES], [],
                         same["_text"])

    def test_d_summaries_carry_the_memory(self):
        out = os.path.join(self.tmp, "leak.summary")
        p = ptest.run(["summarize", self.leak, "-o", out])
        self.assertEqual(p.returncode, 0, p.stderr)
        d = ptest.analyze([out])
        self.assertEqual(d["findings"][0]["category"], "memory_growth")
        self.assertEqual(d["job"]["memory"], ptest.analyze([self.leak])["job"]["memory"])

    def test_e_legacy_torch_traces_hold_no_memory_records(self):
        if ptest.torch_major("/usr/bin/python3") != 1:
            self.skipTest("/usr/bin/python3 has no torch 1.x (Debian's python3-torch)")
        legacy = record(os.path.join(self.tmp, "legacy.json"), "--leak-mib", "16", "--steps", "6",
                        python="/usr/bin/python3")
        d = ptest.analyze([legacy])
        self.assertNotIn("memory", d["job"])
        self.assertEqual([f for f in d["findings"] if f["category"] in MEMORY_CATEGORIES], [])


if __name__ == "__main__":
    ptest.main()
