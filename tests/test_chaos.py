"""Chaos: a real torch job under `perftracker run --server ADDR` while its server (on its own)
is killed with SIGKILL and restarted twice. Training exits 0, what SQLite held before each kill
is still there, and a window after the last restart is diagnosed (issue 14)."""
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402
from ptest import wait_until  # noqa: E402

TRAIN = os.path.join(ptest.SOURCE, "examples", "train_ddp.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(db, table):
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
            return c.execute(f"SELECT job_id, window_id FROM {table}").fetchall()
    except sqlite3.Error:
        return []


def tail(path):
    with open(path, errors="replace") as f:
        return f.read()[-3000:]


@unittest.skipUnless(ptest.online_built(), "needs the online path (the default build)")
@unittest.skipUnless(ptest.torch_available(), "needs /usr/bin/python3 with torch (apt-get install python3-torch)")
class Chaos(unittest.TestCase):
    def test_server_killed_and_restarted_twice(self):
        tmp = tempfile.mkdtemp(prefix="pt_chaos_")
        report = os.path.join(tmp, "server")
        db = os.path.join(report, "perftracker.db")
        addr = f"127.0.0.1:{free_port()}"
        server_log = open(os.path.join(tmp, "server.log"), "ab")
        self.addCleanup(server_log.close)

        def start_server():
            return subprocess.Popen([ptest.BIN, "server", "--listen", addr, "--report-dir", report,
                                     "--max-seconds", "10", "--grace-seconds", "10"],
                                    stdout=server_log, stderr=server_log)

        def job_windows(job):
            return [w for j, w in rows(db, "findings") + rows(db, "rank_summaries") if j == job]

        server = start_server()
        run_log = os.path.join(tmp, "run.log")
        with open(run_log, "wb") as out:
            job = subprocess.Popen([ptest.BIN, "run", "--nproc", "2", "--server", addr,
                                    "--report-dir", os.path.join(tmp, "run"), "--",
                                    ptest.TORCH_PYTHON, TRAIN, "--iters", "1500"],
                                   stdout=out, stderr=out)
        try:
            before = []
            for life in (1, 2, 3):
                # Each server life sees the ranks (its baseline window once they report 20
                # iterations to it) and stores a diagnosed window of its own.
                self.assertTrue(wait_until(lambda: len(job_windows(life)) >= 2, 90),
                                f"server life {life} stored no window\n" + tail(run_log))
                self.assertIsNone(job.poll(), "the job ended early")
                kept = rows(db, "rank_summaries")
                for r in before:
                    self.assertIn(r, kept, "a row written before a kill was lost")
                before = kept
                if life < 3:
                    server.send_signal(signal.SIGKILL)
                    server.wait()
                    time.sleep(1)
                    server = start_server()
            self.assertEqual(job.wait(timeout=300), 0, tail(run_log))
            diagnosed = [d for d in os.listdir(os.path.join(report, "windows"))]
            print(f"chaos: {len(before)} rank summaries over 3 server lives, windows {sorted(diagnosed)}",
                  file=sys.stderr)
        finally:
            if job.poll() is None:
                job.kill()
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


if __name__ == "__main__":
    ptest.main()
