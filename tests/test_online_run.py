"""The online path end to end: `perftracker run --nproc 4 -- python examples/train_ddp.py` with a
real fault that switches on after the detector learned the baseline. The in-worker detector
fires, the embedded server opens one window on every rank, the agent summarizes and uploads,
and DIR/diagnosis.json must name the fault. Real torch (PT_TORCH_PYTHON: torch 2.13, and
Debian's 1.13 for the legacy smoke set), gloo, 4 ranks.

Every number is the product's default. Four ranks share this machine's two cores, so a healthy
iteration varies by about 15%; the slowdown trigger measures that noise itself and fires only on
a shift well beyond it (worker/shift_detector.h). The faults below cost 40% or more; the baseline
window (every rank past its warm-up) comes first in every run, and must find nothing on a clean
job.
"""
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

TRAIN = os.path.join(ptest.SOURCE, "examples", "train_ddp.py")
# Every detector and diagnosis number is the product's default. A fault starts at iteration 130:
# after learning (10), the slowdown trigger's warm-up (10) and reference (50), and the baseline
# window, which opens once every rank is past 20 iterations, at least 2 s ahead of the furthest
# rank (server/scheduler.h), and profiles 10. So a job with a fault at 130 waits 30 ms in every
# step (STEP: as a GPU-bound step waits for its kernels): a step lasts 40-50 ms on torch 2.13 and
# ~90 ms on 1.13 here, and the baseline window profiles about iterations 75-95 (60-70 on 1.13).
# Without the wait a 2.13 step lasts 7-15 ms, the 2 s lead is well over 100 of them, and the
# window opened at 151, after the fault: it found the fault and no slowdown window came.
FAULT_AT = "130"
STEP = ["--step-sleep-ms", "30"]


def run_job(report, train_args, run_args=(), timeout=400, env=None, wrapper=(), nproc=4, until=None,
            on_stop=None):
    """Runs train_ddp.py under `perftracker run`; with UNTIL, the job ends once a window that began
    at iteration UNTIL or later was diagnosed (ptest.run_until_diagnosed, which calls ON_STOP
    then), else at --iters."""
    cmd = [ptest.BIN, "run", "--nproc", str(nproc), "--report-dir", report, *run_args, "--",
           *wrapper, ptest.TORCH_PYTHON, TRAIN, *train_args]
    e = dict(os.environ, **(env or {}))
    if until is not None:
        stop = report.rstrip("/") + ".stop"
        return ptest.run_until_diagnosed(cmd + ["--stop-file", stop], report, stop, until, timeout, e,
                                         on_stop=on_stop)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    p.seconds = time.time() - t0
    return p


class Netns:
    """A network namespace joined to the host by a veth pair (10.231.N.1 host side, .2 inside).
    Needs root and iproute2; `error` says why not when it cannot be made."""

    def __init__(self):
        n = os.getpid() % 250 + 1
        self.name, self.outer, self.inner = f"pt{os.getpid()}", f"pth{os.getpid()}", f"ptn{os.getpid()}"
        self.host_ip, ip_in = f"10.231.{n}.1", f"10.231.{n}.2"
        self.error = None
        steps = [["ip", "netns", "add", self.name],
                 ["ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner],
                 ["ip", "link", "set", self.inner, "netns", self.name],
                 ["ip", "addr", "add", f"{self.host_ip}/24", "dev", self.outer],
                 ["ip", "link", "set", self.outer, "up"],
                 ["ip", "netns", "exec", self.name, "ip", "addr", "add", f"{ip_in}/24", "dev", self.inner],
                 ["ip", "netns", "exec", self.name, "ip", "link", "set", self.inner, "up"],
                 ["ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up"]]
        for cmd in steps:
            try:
                p = subprocess.run(cmd, capture_output=True, text=True)
            except OSError as e:
                self.error = str(e)
                break
            if p.returncode != 0:
                self.error = f"{' '.join(cmd)}: {p.stderr.strip()}"
                break
        if self.error:
            self.close()

    def close(self):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True)


def load(report):
    with open(os.path.join(report, "diagnosis.json")) as f:
        return json.load(f)


def windows(report):
    d = os.path.join(report, "windows")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


@unittest.skipUnless(ptest.online_built() and ptest.torch_available(), "needs the online build and torch")
class OnlineRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pt_run_")

    def job(self, name, *train_args, run_args=(), expect_rc=0, run_out=False, **kw):
        """Runs a job into TMP/NAME and returns its diagnosis. A job with a fault ends once the
        first window that began at or after the fault's start is diagnosed, unless RUN_OUT."""
        report = os.path.join(self.tmp, name)
        if not run_out and "--fault-start" in train_args:
            kw["until"] = int(train_args[train_args.index("--fault-start") + 1])
        p = run_job(report, list(train_args), run_args, **kw)
        out = f"--- stdout\n{p.stdout[-6000:]}\n--- stderr\n{p.stderr[-6000:]}"
        if expect_rc is not None:
            self.assertEqual(p.returncode, expect_rc, out)
        self.assertTrue(os.path.exists(os.path.join(report, "diagnosis.json")), out)
        d = load(report)
        d["_out"] = out
        d["_path"] = os.path.join(report, "diagnosis.json")
        d["_report"] = report
        d["_stderr"] = p.stderr
        log_path = os.path.join(report, "perftracker.log")
        d["_log"] = ""
        if os.path.exists(log_path):
            with open(log_path) as f:
                d["_log"] = f.read()
        onset = re.search(r"fault \S+ on at step \d+ \(unix ([0-9.]+)\)", p.stderr)
        # The first diagnosis after the fault (the baseline window's comes before it).
        done = [float(t) for t in re.findall(r"(?:window|hang) \d+ diagnosed \(unix ([0-9.]+)\)", d["_log"])
                if onset and float(t) >= float(onset.group(1))]
        delay = f", fault to diagnosis {done[0] - float(onset.group(1)):.1f} s" if done else ""
        early = ", ended once diagnosed" if getattr(p, "stopped", False) else ""
        print(f"{name}: {p.seconds:.1f} s, windows {windows(report)}{delay}{early}", file=sys.stderr)
        return d

    def assertCheck(self, d, expect):
        ok, msg = ptest.check(d["_path"], expect)
        self.assertTrue(ok, msg + "\n" + d["_out"])

    def assertFired(self, d):
        self.assertTrue(windows(d["_report"]), "no window fired\n" + d["_out"])
        # The whole run's iteration statistics are there, per rank.
        per = d["job"]["run_iteration_ms"]["per_rank"]
        self.assertEqual(sorted(per), ["0", "1", "2", "3"], d["_out"])
        self.assertGreater(per["0"]["count"], 50)

    def test_1_straggler(self):
        # Rank 2 computes ~40 ms more per step (on torch 1.13 that was --fault-work 8): the step
        # about doubles.
        work, per = ptest.fault_work_for(40)
        print(f"straggler: --fault-work {work} ({per:.2f} ms per matmul)", file=sys.stderr)
        d = self.job("straggler", "--iters", "320", *STEP, "--fault", "straggler", "--fault-rank", "2",
                     "--fault-start", FAULT_AT, "--fault-work", str(work))
        self.assertFired(d)
        f = d["findings"][0]
        self.assertEqual(f["ranks"], [2], d["_out"])
        self.assertNotEqual(f["cause"], "unknown", d["_out"])
        self.assertCheck(d, "rank=2")
        # The terminal is the user's: the start line, the window, its report, the end summary;
        # agent and server details only in DIR/perftracker.log.
        err = d["_stderr"]
        self.assertIn("rank(s) started", err)
        self.assertIn("window 1 opened (baseline", err)
        # Opened by a rank's detector or by the server's own look at every rank's iterations,
        # whichever fires first (both do, within a second).
        self.assertRegex(err, r"window 2 opened \(slowdown (on rank \d|since iteration \d+ \(server\))")
        self.assertIn("window 2 diagnosed", err)
        # Its extra matmuls are called from Python (<built-in method mm> holds them online): more
        # compute, not slow Python code (policy kOpWorkShareOfPython).
        self.assertIn("rank 2 is a straggler", err)
        self.assertIn("job ended (exit 0)", err)
        self.assertNotIn("perftracker agent:", err)
        self.assertNotIn("perftracker server:", err)
        ours = [x for x in err.splitlines() if x.startswith("perftracker")]
        self.assertLessEqual(len(ours), 8, err)
        self.assertLess(len(err.splitlines()), 60, err)
        self.assertIn("registered", d["_log"])
        # A window a rank's detector opened went through its agent. The server's watch may open
        # it first and the job then ends once it is diagnosed: .ci/run at 1af9bb7 on torch 1.13
        # (100 ms steps, +25% from the fault) named rank 2 rightly from the server's window at
        # iteration 164, while the detectors, whose noise-set levels were +36-69%, had not fired
        # by the job's stop at 187 (test_worker_detector's test_b checks that a detector fires).
        if re.search(r"window 2 opened \(slowdown on rank", err):
            self.assertIn("detector: slowdown", d["_log"])

    def test_2_one_slow_loader(self):
        d = self.job("loader1", "--iters", "320", *STEP, "--fault", "slow-loader", "--fault-rank", "1",
                     "--fault-start", FAULT_AT, "--fault-ms", "80")
        self.assertFired(d)
        self.assertCheck(d, "rank=1,function~dataloader|collate|loader")

    def test_3_every_loader_slow(self):
        d = self.job("loader_all", "--iters", "320", *STEP, "--fault", "slow-loader", "--fault-rank", "all",
                     "--fault-start", FAULT_AT, "--fault-ms", "40")
        self.assertFired(d)
        f = d["findings"][0]
        self.assertEqual(f["cause"], "software", d["_out"])
        self.assertCheck(d, "all,function~dataloader|collate|loader")

    def test_4_slow_link_of_one_rank(self):
        ns = Netns()
        if ns.error:
            self.skipTest(f"cannot create a network namespace here: {ns.error}")
        try:
            env = {"PT_SLOW_RANK": "2", "PT_NETNS": ns.name, "PT_IF_NS": ns.inner,
                   "PT_IF_HOST": ns.outer}
            # Rank 2's own egress (inside its namespace) is rate-limited from iteration FAULT_AT.
            tbf = f"tc qdisc add dev {ns.inner} root tbf rate 100mbit burst 32kbit latency 100ms"
            d = self.job("link", "--iters", "320", *STEP, "--fault", "cmd", "--fault-rank", "2",
                         "--fault-start", FAULT_AT, "--fault-cmd", tbf,
                         run_args=["--master-addr", ns.host_ip], env=env,
                         wrapper=[os.path.join(ptest.SOURCE, "tests", "netns_rank.sh")])
        finally:
            ns.close()
        self.assertFired(d)
        self.assertTrue(d["findings"], "no finding\n" + d["_out"])
        f = d["findings"][0]
        self.assertEqual(f["ranks"], [2], d["_out"])
        self.assertEqual(f["category"], "communication", d["_out"])
        self.assertCheck(d, "rank=2,category~communication")

    def test_5_hang_names_the_rank_and_its_line(self):
        d = self.job("hang", "--iters", "450", *STEP, "--fault", "hang", "--fault-rank", "2",
                     "--fault-start", FAULT_AT, run_args=["--on-hang", "kill"], expect_rc=None,
                     run_out=True)
        self.assertCheck(d, "hang=2")
        f = [x for x in d["findings"] if x["category"] == "hang"][0]
        where = " ".join(x["name"] for x in f["functions"])
        self.assertIn("train_ddp.py:", where, d["_out"])

    def test_6_gc(self):
        d = self.job("gc", "--iters", "320", *STEP, "--fault", "gc", "--fault-rank", "3",
                     "--fault-start", FAULT_AT, "--gc-garbage", "80000")
        self.assertFired(d)
        self.assertCheck(d, "rank=3,category~gc")

    def test_6b_call_heavy_gc_heavy_rank(self):
        # Rank 3 runs tokenizer-like Python every step: 80,000 short calls building 160,000
        # GC-tracked objects, so the cyclic GC runs hundreds of times per step. The window must
        # name it with its function (or the collections it triggers), count every call, stall
        # no rank into a hang report, and have every rank's torch.profiler part.
        calls = 80000
        d = self.job("callheavy", "--iters", "110", "--fault", "call-heavy", "--fault-rank", "3",
                     "--fault-start", "0", "--calls", str(calls),
                     run_args=["--profile-at-iteration", "30"])
        self.assertTrue(windows(d["_report"]), "no window\n" + d["_out"])
        self.assertTrue(d["findings"], "no finding\n" + d["_out"])
        f = d["findings"][0]
        self.assertEqual(f["ranks"], [3], d["_out"])
        where = " ".join(x["name"] + " " + " ".join(x.get("stack", [])) for x in f["functions"])
        self.assertRegex(where, r"tokenize", d["_out"])
        self.assertNotIn("detector: hang", d["_log"], d["_log"][-3000:])
        self.assertFalse([x for x in d["findings"] if x["category"] == "hang"], d["_out"])
        self.assertNotIn("no torch.profiler data", json.dumps(d["job"]["notes"]), d["_out"])
        # Every call counted: tokenize_word runs exactly `calls` times in each iteration.
        trace = os.path.join(d["_report"], "traces", "window-1", "rank-3.python.json")
        show = ptest.run(["show", trace, "--top", "200"])
        self.assertEqual(show.returncode, 0, show.stderr)
        rows = [x for x in show.stdout.splitlines() if ": tokenize_word" in x.split("<-")[0]]
        self.assertEqual(len(rows), 1, show.stdout)
        self.assertIn(f"{calls}.0", rows[0].split(), rows[0])

    def test_7_clean(self):
        # The baseline window profiles every clean run: it must find nothing. A slowdown window
        # may come from outside (four ranks share two cores with whatever else runs here, and
        # this VM's speed shifts by a third at times); it too must find nothing. 600 steps: at
        # 9 ms a step (a quiet machine) 320 ended before the baseline window's start iteration.
        d = self.job("clean", "--iters", "600")
        ws = windows(d["_report"])
        self.assertIn("1", ws, "no baseline window\n" + d["_out"])
        self.assertIn("window 1 opened (baseline", d["_stderr"])
        # The terminal holds perftracker's lines and the job's, not the profiler's own log
        # (Kineto's "USDT: ... profiler_start" lines, torch.profiler's warnings about its cycles).
        chatter = [x for x in d["_stderr"].splitlines()
                   if x.startswith(("USDT:", "STAGE:")) or "Profiler clears events" in x]
        self.assertEqual(len(chatter), 0, "\n".join(chatter[:8]))
        for w in ws:
            with open(os.path.join(d["_report"], "windows", w, "diagnosis.json")) as f:
                found = json.load(f)["findings"]
            self.assertEqual(self.outside_slowdowns(d, found), [], f"window {w}\n" + d["_out"])
        self.assertEqual(self.outside_slowdowns(d, d["findings"]), [], d["_out"])
        self.assertEqual(len(d["job"]["run_iteration_ms"]["per_rank"]), 4, d["_out"])
        if not d["findings"]:
            self.assertCheck(d, "clean")

    def outside_slowdowns(self, d, findings):
        """FINDINGS less the one a clean job may have: this VM slowing every rank just before the
        baseline window and staying slow (measured in CI: 49 ms an iteration to 59 ms from
        iteration 76 to 275, the baseline window at 78). No profile is healthy then, so the
        product names the rate alone, cause unknown; the finding stays only if the job's own
        recorded iterations show that slowdown (a claimed one they do not show fails)."""
        left = []
        for f in findings:
            ev = f.get("evidence", {})
            if (f["category"] != "regression" or f["cause"] != "unknown" or
                    "spoiled" not in ev.get("reference", "") or "slowdown_iteration" not in ev):
                left.append(f)
                continue
            at = int(ev["slowdown_iteration"])
            with sqlite3.connect(f"file:{os.path.join(d['_report'], 'perftracker.db')}?mode=ro",
                                 uri=True) as c:
                rows = c.execute("SELECT step, ms FROM iteration_series").fetchall()
            before = sorted(ms for step, ms in rows if 20 <= step < at)
            after = sorted(ms for step, ms in rows if at <= step < at + 60)
            ratio = after[len(after) // 2] / before[len(before) // 2] if before and after else 0
            print(f"clean: an outside slowdown from iteration {at}: the recorded iterations ran "
                  f"{ratio:.2f}x (the finding says {ev['recent_ms'] / ev['healthy_ms']:.2f}x)",
                  file=sys.stderr)
            if ratio < 1.1:
                left.append(f)
        return left

    def test_12_problems_present_from_the_start(self):
        # A fault from the first iteration never makes the job slower than it was: no slowdown
        # trigger can fire. The baseline window finds it by comparing the ranks. (STEP: without
        # the wait, 200 torch 2.13 steps ended before the baseline window's iterations.)
        d = self.job("loader_from_0", "--iters", "200", *STEP, "--fault", "slow-loader", "--fault-rank", "1",
                     "--fault-start", "0", "--fault-ms", "12")
        self.assertIn("window 1 opened (baseline", d["_stderr"])
        self.assertCheck(d, "rank=1,function~dataloader|collate|loader")
        # Rank 2 computes ~20 ms more per step (on torch 1.13 that was --fault-work 3).
        work, per = ptest.fault_work_for(20)
        print(f"straggler_from_0: --fault-work {work} ({per:.2f} ms per matmul)", file=sys.stderr)
        d = self.job("straggler_from_0", "--iters", "200", *STEP, "--fault", "straggler", "--fault-rank", "2",
                     "--fault-start", "0", "--fault-work", str(work))
        self.assertIn("window 1 opened (baseline", d["_stderr"])
        self.assertCheck(d, "rank=2")

    def test_13_five_percent_slowdown_on_a_quiet_job(self):
        # A quiet job: two ranks whose steps mostly wait (50 ms, as GPU-bound steps wait for
        # their kernels) around a small model, so the iteration time varies by ~1-2% (this VM's
        # CPU speed shifts by a third at times: the small compute part keeps that under 3%).
        # From iteration 150 every rank's loader sleeps 2.7 ms more: a sustained 5% slowdown,
        # caught with the defaults. The same job without the fault finds nothing (this VM also
        # slows down by 5-10% for seconds at a time by itself, so a window may open on it; the
        # benchmark bench/online_accuracy.py counts those, and measures the rate over repeats).
        # The premise is checked, not assumed. Each rank's detector reports at exit the level it
        # fires above: a run that misses the slowdown is excused only when every rank measured
        # its noise above +4.5% (not a quiet run: the trigger is right to ignore 5% there). And
        # this VM shifts by ~5% for seconds by itself (a slowdown window on a clean job, counted
        # by bench/online_accuracy.py): a run with a trigger before the fault cannot show when
        # the fault was caught. Such runs are reported and replaced, up to 8 runs (about a third
        # of them are, measured on this VM alone; under .ci/run's load at e700ac3 four of six
        # were, triggers at iterations 85-144, and the test failed on that premise though the one
        # valid run caught the fault); one must catch the slowdown. Its clean twin is the same
        # job before its fault: the windows there find nothing (a separate clean run of the job
        # cost ~20 s more). (Two were required until the test command had to fit in 30 minutes:
        # each pair costs ~40 s, and the rate over many runs is bench/online_accuracy.py's.)
        args = ["--iters", "320", "--step-sleep-ms", "50", "--hidden", "64", "--batch", "16"]
        caught = 0
        for k in range(8):
            if caught == 1:
                break
            d = self.job(f"quiet_fault{k}", *args, "--fault", "slow-loader", "--fault-rank", "all",
                         "--fault-start", "150", "--fault-ms", "2.7", nproc=2)
            # The same job before its fault is its clean twin: every window wholly before
            # iteration 150 (the baseline window, and one this VM's own drift opened) finds
            # nothing, in every run, replaced ones too.
            before = [(w, int(b)) for w, b in re.findall(
                r"window (\d+) opened \(.*?profiling iterations \d+\.\.(\d+)", d["_stderr"])]
            self.assertIn("1", [w for w, _ in before], "no baseline window\n" + d["_out"])
            for w, last in before:
                if last >= 150:
                    continue
                with open(os.path.join(d["_report"], "windows", w, "diagnosis.json")) as f:
                    self.assertEqual(json.load(f)["findings"], [], f"window {w}\n" + d["_out"])
            levels = [float(x) for x in re.findall(
                r"detector at exit: .*? fires above [\d.]+ ms \(\+([\d.]+)%\)", d["_log"])]
            # Each rank's level and its recent median at exit: a fault whose rise stayed under
            # the level on every rank was not a 5% slowdown in that run (.ci/run at 8c90008: the
            # 2.7 ms raised the median by 2.0 ms, +3.7% against a +4.0% level).
            state = [(float(lvl), float(rec)) for lvl, rec in re.findall(
                r"detector at exit: .*? fires above ([\d.]+) ms .*?recent median ([\d.]+) ms", d["_log"])]
            fired = [int(a) for a in re.findall(r"slowdown at iteration (\d+)", d["_log"])]
            self.assertEqual(len(levels), 2, "no detector state at exit\n" + d["_log"][-3000:])
            # Detector iterations are numbered by the steps before them: the fault is at 150.
            if fired and min(fired) < 148:
                print(f"quiet_fault{k}: a slowdown trigger at iteration {min(fired)}, before the fault "
                      "(host drift), replaced", file=sys.stderr)
                continue
            if "opened (slowdown" not in d["_stderr"] and state and all(rec <= lvl for lvl, rec in state):
                print(f"quiet_fault{k}: the fault's rise stayed under the level on every rank "
                      f"({state}), replaced", file=sys.stderr)
                continue
            if "opened (slowdown" not in d["_stderr"]:
                self.assertGreater(min(levels), 4.5, "the 5% slowdown was not caught\n" + d["_log"][-3000:])
                print(f"quiet_fault{k}: not quiet (fires above +{min(levels):.1f}%), replaced", file=sys.stderr)
                continue
            caught += 1
        self.assertEqual(caught, 1, "no quiet run in eight: this host is too noisy for the test")

    def test_8_exit_code_is_the_jobs(self):
        report = os.path.join(self.tmp, "exit")
        p = run_job(report, ["--iters", "5", "--no-such-flag"], run_args=["-v"])
        self.assertEqual(p.returncode, 2, p.stderr[-2000:])  # argparse's usage error
        self.assertTrue(os.path.exists(os.path.join(report, "diagnosis.json")))
        # Errors always print; -v adds the agent's and server's lines.
        self.assertRegex(p.stderr, r"perftracker: error: rank \d exited with code 2")
        self.assertRegex(p.stderr, r"perftracker server: agent-1-[0-9a-f]+ registered")
        self.assertIn("job ended (exit 2)", p.stderr)

    def test_9_ctrl_c_stops_every_rank(self):
        report = os.path.join(self.tmp, "sigint")
        cmd = [ptest.BIN, "run", "--nproc", "4", "--report-dir", report, "--", ptest.TORCH_PYTHON,
               TRAIN, "--iters", "100000"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ))
        # Ctrl-C while every rank trains (each has learned its iteration), not at a fixed time:
        # on a quiet machine that is 5 s in, on a loaded one later.
        log = os.path.join(report, "perftracker.log")

        def training():
            try:
                with open(log) as f:
                    return f.read().count("learned iteration pattern") >= 4
            except OSError:
                return False
        if not ptest.wait_until(training, 120):
            p.kill()
            self.fail("the ranks never trained\n" + p.communicate()[1][-3000:])
        time.sleep(1.0)  # a second of training: the ranks are past their first steps
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err[-3000:])
        self.assertIn("stopping every rank", err)
        left = subprocess.run(["pgrep", "-f", "train_ddp.py --iters 100000"], capture_output=True,
                              text=True).stdout.strip()
        self.assertEqual(left, "", "ranks left running")
        self.assertTrue(os.path.exists(os.path.join(report, "diagnosis.json")))

    def test_11_command_launches_the_ranks(self):
        # Without --nproc the command starts the ranks (torchrun, srun, a script); they find the
        # agent through the environment. Debian's torch 1.13 torchrun fails on Python 3.11 by
        # itself (torch.distributed.elastic's to_map), so a shell stands in for the launcher.
        report = os.path.join(self.tmp, "launched")
        port = ptest_free_port()
        script = (f"for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
                  f"MASTER_PORT={port} {ptest.TORCH_PYTHON} {TRAIN} --iters 1500 & done; wait")
        cmd = [ptest.BIN, "run", "--report-dir", report, "--profile-at-iteration", "20",
               "--baseline-window", "off", "--", "sh", "-c", script]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
        self.assertEqual(p.returncode, 0, p.stderr[-4000:])
        # Window 1 is the requested one. A shared VM can shift a clean job's iteration time for
        # good (+18% measured once): the detector may open a slowdown window after it. (What the
        # windows find is test_7's and test_13's matter: here two ranks, the launcher and a
        # shell share two cores, and a host finding of CPU contention has been seen, rightly.)
        self.assertEqual(windows(report)[:1], ["1"], p.stderr[-4000:])
        self.assertIn("window 1 opened (--profile-at-iteration 20)", p.stderr)
        self.assertEqual(p.stderr.count("window 1 opened"), 1)
        with open(os.path.join(report, "windows", "1", "diagnosis.json")) as f:
            w = json.load(f)
        self.assertEqual(w["job"]["ranks"], [0, 1], p.stderr[-4000:])
        self.assertEqual(w["job"]["world_size"], 2)

    def test_10_server_killed_mid_window_training_finishes(self):
        port = ptest_free_port()
        addr = f"127.0.0.1:{port}"
        report = os.path.join(self.tmp, "killed")
        log = open(os.path.join(self.tmp, "killed_server.txt"), "w")
        server = subprocess.Popen([ptest.BIN, "server", "--listen", addr, "--report-dir", report],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            token = os.path.join(report, ".perftracker", "token")  # the server's own (issue 26)
            self.assertTrue(ptest.wait_until(lambda: os.path.exists(token), 30), "no token")
            job = subprocess.Popen(
                [ptest.BIN, "run", "--nproc", "4", "--server", addr, "--token-file", token,
                 "--report-dir", report,
                 "--profile-at-iteration", "20", "--", ptest.TORCH_PYTHON, TRAIN, "--iters", "200"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            opened = False
            for _ in range(600):
                with open(log.name) as f:
                    if "window 1 opened" in f.read():
                        opened = True
                        break
                time.sleep(0.1)
            self.assertTrue(opened, "no window opened")
            time.sleep(1.0)
            server.send_signal(signal.SIGKILL)
            out, err = job.communicate(timeout=300)
            self.assertEqual(job.returncode, 0, err[-3000:])
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
            log.close()


def ptest_free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    ptest.main()
