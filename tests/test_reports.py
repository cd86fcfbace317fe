"""Reports people look at (issue 15): the HTML page in headless Chromium (loads with no console
error and no request leaving the page, charts in the DOM, the culprit named), `analyze --html` on
every shared job, a 10,000-rank simulated job's page under 5 MB, `export-trace` as one trace with
a process per rank, and, during a real 4-rank torch run with a straggler, `/metrics` checked by
promtool, the run's report.html and its window's timeline."""
import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402
from ptest import wait_until  # noqa: E402

TRAIN = os.path.join(ptest.SOURCE, "examples", "train_ddp.py")
# The shared traces, one job per entry (a job's ranks together).
JOBS = {
    "single_rank_triton": ["single_rank_triton.json.gz"],
    "nccl_2rank": ["nccl_2rank_rank0.json.gz"],
    "job128": ["job128_rank-0.json.gz", "job128_rank-1.json.gz"],
    "resnet": ["resnet_ns_rank-0.pt.trace.json.gz"],
    "cpu_only": ["cpu_only_rank-34.pt.trace.json.gz"],
    "alexnet": ["alexnet_single.json.gz"],
    "compare_base": ["compare_pair/base.json.gz"],
}
PAGE_LIMIT = 5 << 20


def chromium():
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    raise AssertionError("chromium is missing: scripts/deps.sh installs it (Debian's chromium)")


def load_in_chromium(test, page, screenshot=None):
    """Loads PAGE in headless Chromium; fails the test on a console message of level error or
    warning (a CSP violation, a blocked request, a script error) or a request leaving the page.
    Returns the DOM as Chromium built it."""
    profile = tempfile.mkdtemp(prefix="pt_chromium_")
    test.addCleanup(shutil.rmtree, profile, True)
    # Chromium's own background traffic (updates, sync, QUIC probes) is turned off: on a closed
    # network its failures would be logged like the page's.
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-quic",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
            "--virtual-time-budget=3000", "--window-size=1280,2200",
            # Nothing may be fetched: any host would fail, and the attempt would be logged.
            "--host-resolver-rules=MAP * ~NOTFOUND"]
    if screenshot:
        shot = subprocess.run(args + [f"--screenshot={screenshot}", "file://" + page],
                              capture_output=True, text=True, timeout=120)
        test.assertEqual(shot.returncode, 0, shot.stderr[-2000:])
    p = subprocess.run(args + ["--dump-dom", "file://" + page], capture_output=True, text=True,
                       timeout=120)
    test.assertEqual(p.returncode, 0, p.stderr[-2000:])
    console = [l for l in p.stderr.splitlines() if "CONSOLE" in l or "Refused to" in l
               or "net::ERR" in l]
    test.assertEqual(console, [], f"{page}: console messages")
    return p.stdout


def no_outside_reference(test, html):
    test.assertIsNone(re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html),
                      "the page references something outside itself")
    test.assertNotIn("<script", html)
    test.assertNotIn("<link", html)


class OfflineReports(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pt_reports_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_analyze_html_writes_a_page_per_shared_job(self):
        sizes = {}
        for job, files in JOBS.items():
            paths = [os.path.join(ptest.KINETO, f) for f in files]
            page = os.path.join(self.tmp, f"{job}.html")
            p = ptest.run(["analyze", *paths, "--html", page, "-q"])
            self.assertEqual(p.returncode, 0, f"{job}: {p.stderr}")
            with open(page) as f:
                html = f.read()
            sizes[job] = len(html)
            self.assertLess(len(html), PAGE_LIMIT)
            no_outside_reference(self, html)
            dom = load_in_chromium(self, page)
            self.assertIn("<h2>Findings</h2>", dom)
            if job != "single_rank_triton":
                self.assertIn("<svg", dom, f"{job}: no chart")
        print("analyze --html page sizes (bytes): " + ", ".join(f"{k} {v}" for k, v in sizes.items()),
              file=sys.stderr)

    def test_ten_thousand_simulated_ranks_stay_under_five_megabytes(self):
        out = os.path.join(self.tmp, "sim10k")
        p = ptest.run(["simulate", "--workers", "10240", "--layout", "tp=8,pp=4", "--fault",
                       "slow-gpu@rank=1234", "--seed", "7", "-o", out], timeout=900)
        self.assertEqual(p.returncode, 0, p.stderr)
        page = os.path.join(self.tmp, "sim10k.html")
        d = os.path.join(self.tmp, "sim10k.json")
        p = ptest.run(["diagnose", os.path.join(out, "summaries"), "--html", page, "--json", d,
                       "-q"], timeout=900)
        self.assertEqual(p.returncode, 0, p.stderr)
        size = os.path.getsize(page)
        self.assertLess(size, PAGE_LIMIT)
        with open(d) as f:
            culprits = {r for f in json.load(f)["findings"] for r in f["ranks"]}
        self.assertIn(1234, culprits)
        dom = load_in_chromium(self, page, screenshot=os.path.join(self.tmp, "sim10k.png"))
        self.assertIn(">1234<", dom)
        self.assertIn("of 10240 ranks shown", dom)
        print(f"10,000-rank page: {size} bytes", file=sys.stderr)

    def test_export_trace_has_a_process_per_rank(self):
        out = os.path.join(self.tmp, "job128.json.gz")
        files = [os.path.join(ptest.KINETO, f) for f in JOBS["job128"]]
        p = ptest.run(["export-trace", *files, "-o", out])
        self.assertEqual(p.returncode, 0, p.stderr)
        with gzip.open(out, "rt") as f:
            trace = json.load(f)
        names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        self.assertEqual(sorted(names), [0, 1])
        self.assertTrue(names[0].startswith("rank 0"), names)
        pids = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        self.assertEqual(pids, {0, 1})
        iters = [e for e in trace["traceEvents"] if e.get("ph") == "i"
                 and e["name"].startswith("iteration ")]
        self.assertTrue(iters, "no iteration markers")
        # An input given as the output is refused before anything is written.
        p = ptest.run(["export-trace", files[0], "-o", files[0]])
        self.assertNotEqual(p.returncode, 0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(ptest.online_built(), "needs the online path (the default build)")
@unittest.skipUnless(ptest.torch_available(), "needs /usr/bin/python3 with torch (apt-get install python3-torch)")
class OnlineReports(unittest.TestCase):
    def test_a_straggler_run_has_metrics_a_page_and_a_timeline(self):
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool is missing: scripts/deps.sh installs prometheus")
        tmp = tempfile.mkdtemp(prefix="pt_reports_run_")
        self.addCleanup(shutil.rmtree, tmp, True)
        report = os.path.join(tmp, "run")
        port = free_port()
        log = open(os.path.join(tmp, "run.log"), "wb")
        self.addCleanup(log.close)
        # ~10 ms of extra matmuls per step: the step doubles on torch 2.13. A fixed 8 of them
        # (~3 ms there, a quarter of a step) left no finding on a quiet fresh machine.
        work, _ = ptest.fault_work_for(10)
        job = subprocess.Popen([ptest.BIN, "run", "--nproc", "4", "--report-dir", report,
                                "--metrics", f"127.0.0.1:{port}", "--", ptest.TORCH_PYTHON, TRAIN,
                                "--iters", "320", "--fault", "straggler", "--fault-rank", "2",
                                "--fault-start", "130", "--fault-work", str(work),
                                "--stop-file", report + ".stop"],
                               stdout=log, stderr=log)
        scraped = {}

        def scrape():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    scraped["text"] = r.read().decode()
                    scraped["type"] = r.headers.get("Content-Type")
            except OSError:
                return False
            return 'perftracker_iteration_duration_seconds{' in scraped["text"] and \
                'rank="3"' in scraped["text"] and 'perftracker_memory_bytes{' in scraped["text"]

        try:
            self.assertTrue(wait_until(scrape, 120), "no per-rank metrics during the run")
            self.assertTrue(scraped["type"].startswith("text/plain; version=0.0.4"))
            metrics = os.path.join(tmp, "metrics.txt")
            with open(metrics, "w") as f:
                f.write(scraped["text"])
            with open(metrics) as f:
                check = subprocess.run([promtool, "check", "metrics"], stdin=f,
                                       capture_output=True, text=True)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            for name in ("perftracker_windows_opened_total", "perftracker_agents{",
                         "perftracker_detector_state", "perftracker_upload_bytes_total",
                         "perftracker_iterations_total"):
                self.assertIn(name, scraped["text"])
            # Every rank's resident memory (the agent reads it with each report).
            rss = re.findall(r'perftracker_memory_bytes\{[^}]*rank="(\d+)"[^}]*kind="host"\} (\d+)',
                             scraped["text"])
            self.assertTrue(rss and all(int(b) > 10 * 2 ** 20 for _, b in rss), rss)
            # The job ends once the window after the fault is diagnosed (nothing later is
            # checked), every rank at the same step.
            watch = ptest.StopWhenDiagnosed(report, report + ".stop", 130)
            self.assertTrue(wait_until(lambda: watch.poll() or job.poll() is not None, 600))
            rc = job.wait(timeout=600)
            with open(os.path.join(tmp, "run.log")) as f:
                self.assertEqual(rc, 0, f.read()[-3000:])
        finally:
            if job.poll() is None:
                job.kill()
        page = os.path.join(report, "report.html")
        self.assertTrue(os.path.exists(page), "the run wrote no report.html")
        with open(os.path.join(report, "diagnosis.json")) as f:
            d = json.load(f)
        straggler = [f for f in d["findings"] if 2 in f["ranks"]]
        self.assertTrue(straggler, f"no finding names rank 2: {[f['summary'] for f in d['findings']]}")
        with open(page) as f:
            html = f.read()
        no_outside_reference(self, html)
        self.assertIn("Iteration time per rank over the run", html)
        self.assertIn("text-anchor=\"middle\" class=\"lbl bad\">2</text>", html)
        dom = load_in_chromium(self, page, screenshot=os.path.join(report, "report.png"))
        self.assertIn('class="lbl bad">2</text>', dom)  # the culprit chart, in the DOM
        # The differential view's columns (the job's functions, long torch paths among them)
        # each read differently: a name, and where it is.
        heat = re.search(r'<table class="heat"><thead><tr>(.*?)</tr></thead>', dom, re.S)
        self.assertTrue(heat, "no differential view in the page")
        headings = [re.sub(r"<[^>]+>", " ", h).strip()
                    for h in re.findall(r"<th[^>]*>(.*?)</th>", heat.group(1), re.S)][1:]
        self.assertGreater(len(headings), 3, headings)
        self.assertEqual(len(set(headings)), len(headings), headings)
        # The latest window's timeline beside its diagnosis, linked from the page.
        windows = sorted(int(w) for w in os.listdir(os.path.join(report, "windows")))
        timeline = [w for w in windows
                    if os.path.exists(os.path.join(report, "windows", str(w), "trace.json.gz"))]
        self.assertTrue(timeline, "no window timeline was exported")
        with gzip.open(os.path.join(report, "windows", str(timeline[-1]), "trace.json.gz"), "rt") as f:
            trace = json.load(f)
        procs = {e["pid"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
        self.assertEqual(procs, {0, 1, 2, 3})
        self.assertIn(f"windows/{timeline[-1]}/trace.json.gz", html)
        # `perftracker report` draws the same run from what the server stored.
        again = os.path.join(tmp, "again.html")
        p = ptest.run(["report", report, "-o", again])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(again) as f:
            again_html = f.read()
        self.assertIn("Iteration time per rank over the run", again_html)
        self.assertIn("text-anchor=\"middle\" class=\"lbl bad\">2</text>", again_html)
        print(f"run report: {len(html)} bytes; metrics: {len(scraped['text'])} bytes, promtool ok",
              file=sys.stderr)


if __name__ == "__main__":
    ptest.main()
