"""`perftracker run -- torchrun ...` for real (issue 23): the command starts the ranks itself.

* one node, `torchrun --standalone --nproc-per-node 4`: every rank profiled, the straggler (rank
  2) named first, and torchrun's own Python process is no rank;
* two torchrun "nodes" on loopback (`--nnodes 2 --rdzv-backend c10d`), each under a
  `perftracker run` of its own in a UTS namespace with its own host name (node A runs the
  embedded server, node B joins it with --server): the straggler, a rank of node B, is named
  with its host;
* an elastic restart (`--max-restarts 1`, rank 1 kills itself with SIGKILL at step 150): torchrun
  starts every rank again, monitoring goes on in the new attempt (a window of attempt 1 is
  opened and diagnosed, the straggler named again), and the report shows both attempts.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

JOB = os.path.join(ptest.SOURCE, "examples", "train_ddp.py")
TORCHRUN = os.path.join(os.path.dirname(ptest.TORCH_PYTHON), "torchrun")
# The DDP job of tests/job_shapes.py, long enough on a loaded 2-core machine that the baseline
# window (it opens once every rank is past its warm-up, about 35 steps in, and starts 2 s later)
# is diagnosed well before the job ends; the straggler's 8 extra matrix multiplies a step cost
# it 3.4-5.4 ms of CPU time over its peers' in a 60-70 ms step (measured over 12 windows; the
# finding's figure 3.7-13.7 ms), 3 were too few: at the 5% the diagnosis reports from, on a shared
# machine, a run sometimes named nobody.
STEPS = ["--step-sleep-ms", "40", "--fault-work", "8"]
TIMEOUT_S = 600


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_finding(diagnosis):
    f = diagnosis["findings"][0] if diagnosis["findings"] else {}
    return f, f"{f.get('category')} on ranks {f.get('ranks')} hosts {f.get('hosts')}"


class Torchrun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not ptest.online_built():
            raise unittest.SkipTest("offline build")
        v = subprocess.run([ptest.TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True).stdout
        if not v[:1].isdigit() or int(v.split(".")[0]) < 2:
            # torch 1.x's torchrun has no --local-addr (nor the dashed option names).
            raise unittest.SkipTest(f"{ptest.TORCH_PYTHON} has no torch 2.x (PT_TORCH_PYTHON: .venv/bin/python)")
        if not os.access(TORCHRUN, os.X_OK):
            raise unittest.SkipTest(f"no torchrun beside {ptest.TORCH_PYTHON} (PT_TORCH_PYTHON)")
        cls.tmp = tempfile.mkdtemp(prefix="pt_torchrun_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    def report_of(self, name):
        return os.path.join(self.tmp, name)

    def run_job(self, report, torchrun_args, job_args, env=None, until_diagnosed=False):
        """(the process, its seconds). UNTIL_DIAGNOSED: the job ends once its first window is
        diagnosed, every rank at the same step (--stop-file; ptest.run_until_diagnosed)."""
        cmd = [ptest.BIN, "run", "--report-dir", report, "--", TORCHRUN, *torchrun_args, JOB,
               *STEPS, *job_args]
        env = dict(os.environ, **(env or {}))
        if until_diagnosed:
            stop = report + ".stop"
            p = ptest.run_until_diagnosed(cmd + ["--stop-file", stop], report, stop, 0, TIMEOUT_S, env)
            return p, p.seconds
        t = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        return p, time.monotonic() - t

    def test_one_node_four_ranks(self):
        report = self.report_of("one")
        p, secs = self.run_job(report, ["--standalone", "--nproc-per-node", "4"],
                               ["--iters", "120", "--fault", "straggler", "--fault-rank", "2",
                                "--fault-start", "0"], until_diagnosed=True)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        ws = ptest.windows(report)
        self.assertTrue(ws, f"no window diagnosed\n{p.stderr[-3000:]}")
        first = ws[min(ws)]
        f, named = first_finding(first)
        print(f"one node, 4 ranks ({secs:.0f} s): window {min(ws)}: {named}", file=sys.stderr)
        self.assertEqual(first["job"]["ranks"], [0, 1, 2, 3])  # every rank profiled
        self.assertEqual(f.get("ranks"), [2], first["findings"])
        with open(os.path.join(report, "diagnosis.json")) as fh:
            end = json.load(fh)
        # One attempt: the four ranks, each its own process; torchrun's own Python is none.
        attempts = end["job"]["attempts"]
        self.assertEqual(len(attempts), 1, attempts)
        self.assertEqual(attempts[0]["ranks"], [0, 1, 2, 3])
        self.assertEqual(len(set(attempts[0]["pids"].values())), 4)
        with open(os.path.join(report, "perftracker.log")) as fh:
            log = fh.read()
        self.assertNotIn("rank ? (local -1", log)  # no worker without a rank connected

    def test_two_nodes_on_loopback(self):
        if os.geteuid() != 0 or shutil.which("unshare") is None or subprocess.run(
                ["unshare", "--uts", "--kill-child", "true"], capture_output=True).returncode != 0:
            raise unittest.SkipTest("needs root and unshare --uts (a host name per node)")
        token = os.path.join(self.tmp, "token")
        with open(os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            fh.write(os.urandom(32).hex())
        server, rdzv = free_port(), free_port()
        reports = {"nodeA": self.report_of("nodeA"), "nodeB": self.report_of("nodeB")}
        # torchrun's c10d rendezvous orders nodes by address: node A (127.0.0.1) holds ranks 0
        # and 1, node B (127.0.0.2, still loopback) ranks 2 and 3. Rank 3 is the straggler.
        job = [JOB, *STEPS, "--iters", "120", "--fault", "straggler", "--fault-rank", "3",
               "--fault-start", "0"]
        procs = {}
        t = time.monotonic()
        for node, (index, addr) in {"nodeA": (0, "127.0.0.1"), "nodeB": (1, "127.0.0.2")}.items():
            where = (["--listen", f"127.0.0.1:{server}"] if index == 0
                     else ["--server", f"127.0.0.1:{server}"])
            cmd = [ptest.BIN, "run", "--report-dir", reports[node], *where, "--token-file", token,
                   "--job-id", "two-nodes", "--", TORCHRUN, "--nnodes", "2", "--nproc-per-node",
                   "2", "--node-rank", str(index), "--rdzv-backend", "c10d", "--rdzv-endpoint",
                   f"127.0.0.1:{rdzv}", "--local-addr", addr, *job]
            # Its own UTS namespace (its own host name), the machine's network (loopback).
            shell = f"hostname {node} && exec \"$@\""
            procs[node] = subprocess.Popen(["unshare", "--uts", "--kill-child", "sh", "-c", shell, "sh",
                                            *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)
            if index == 0:
                ptest.wait_until(lambda: os.path.exists(os.path.join(reports["nodeA"], ".perftracker")), 30)
        out = {}
        try:
            for node, proc in procs.items():
                out[node] = proc.communicate(timeout=TIMEOUT_S)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
        secs = time.monotonic() - t
        for node, proc in procs.items():
            self.assertEqual(proc.returncode, 0, f"{node}: {out[node][1][-3000:]}")
        ws = ptest.windows(reports["nodeA"])  # node A's embedded server writes the report
        self.assertTrue(ws, f"no window diagnosed\n{out['nodeA'][1][-3000:]}")
        first = ws[min(ws)]
        f, named = first_finding(first)
        print(f"two nodes ({secs:.0f} s): window {min(ws)}: {named}", file=sys.stderr)
        self.assertEqual(first["job"]["ranks"], [0, 1, 2, 3])
        self.assertEqual(f.get("ranks"), [3], first["findings"])
        self.assertEqual(f.get("hosts"), ["nodeB"], f)
        with open(os.path.join(reports["nodeA"], "diagnosis.json")) as fh:
            attempts = json.load(fh)["job"]["attempts"]
        self.assertEqual(attempts[0]["hosts"], ["nodeA", "nodeB"], attempts)

    def test_elastic_restart(self):
        report = self.report_of("restart")
        # torch's c10d rendezvous shares its TCP store with the ranks by default, and a restarted
        # attempt then reads the old attempt's gloo addresses from it and fails to connect
        # (pytorch/pytorch#135712); its workaround:
        env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        p, secs = self.run_job(report, ["--standalone", "--nproc-per-node", "4", "--max-restarts", "1"],
                               ["--iters", "200", "--fault", "straggler", "--fault-rank", "2",
                                "--fault-start", "0", "--die-at-step", "150", "--die-rank", "1"],
                               env)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        with open(os.path.join(report, "diagnosis.json")) as fh:
            end = json.load(fh)
        attempts = end["job"]["attempts"]
        for a in attempts:
            print(f"elastic restart ({secs:.0f} s): {a['summary']}", file=sys.stderr)
        self.assertEqual(len(attempts), 2, attempts)
        a0, a1 = attempts
        self.assertEqual((a0["attempt"], a0["restart_count"]), (0, 0))
        self.assertEqual((a1["attempt"], a1["restart_count"]), (1, 1))
        self.assertEqual(a0["ranks"], [0, 1, 2, 3])
        self.assertEqual(a1["ranks"], [0, 1, 2, 3])
        self.assertFalse(set(a0["pids"].values()) & set(a1["pids"].values()))
        # Rank 1 ended first, without its exit hook (SIGKILL), near step 150.
        self.assertEqual(a0["ends"][0]["rank"], 1, a0)
        self.assertFalse(a0["ends"][0]["clean"], a0)
        self.assertGreaterEqual(a0["last_iteration"], 130)
        self.assertGreaterEqual(a1["last_iteration"], 150)
        # The closing lines on the terminal name both attempts.
        self.assertIn("2 attempts", p.stderr + p.stdout)
        # Monitoring went on: a window of attempt 1 was opened and diagnosed, every rank
        # reported it, and it names the straggler again.
        ws = ptest.windows(report)
        later = {w: d for w, d in ws.items()
                 if any("attempt 1 of the job" in n for n in d["job"]["notes"])}
        self.assertTrue(later, f"no window of attempt 1: {sorted(ws)}\n{p.stderr[-3000:]}")
        w = min(later)
        f, named = first_finding(later[w])
        print(f"elastic restart: window {w} (attempt 1): {named}; windows {sorted(ws)}",
              file=sys.stderr)
        self.assertEqual(later[w]["job"]["ranks"], [0, 1, 2, 3])
        self.assertNotIn("missing_rank", [x["category"] for x in later[w]["findings"]])
        self.assertEqual(f.get("ranks"), [2], later[w]["findings"])


if __name__ == "__main__":
    ptest.main()
