"""Chaos: a real torch job under `perftracker run --server ADDR --agent-socket PATH` while its
server and its node agent (each a process of its own) are killed with SIGKILL and restarted: the
server twice, the agent once. Training exits 0, what SQLite held before each kill is still there,
the restarted agent's window and a window after the last server restart are diagnosed (issue
14)."""
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


def rows(db, table, columns="job_id, window_id"):
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
            return c.execute(f"SELECT {columns} FROM {table}").fetchall()
    except sqlite3.Error:
        return []


def tail(path):
    with open(path, errors="replace") as f:
        return f.read()[-3000:]


@unittest.skipUnless(ptest.online_built(), "needs the online path (the default build)")
@unittest.skipUnless(ptest.torch_available(), "needs /usr/bin/python3 with torch (apt-get install python3-torch)")
class Chaos(unittest.TestCase):
    def test_server_killed_twice_and_agent_once(self):
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

        agent_sock = os.path.join(tmp, "agent.sock")
        agent_log = open(os.path.join(tmp, "agent.log"), "ab")
        self.addCleanup(agent_log.close)

        def start_agent():
            return subprocess.Popen([ptest.BIN, "agent", "--server", addr, "--socket", agent_sock,
                                     "--trace-dir", os.path.join(tmp, "traces"), "--job-id",
                                     "chaos", "--ranks", "0,1"],
                                    stdout=agent_log, stderr=agent_log)

        def job_windows(job):
            return [w for j, w in rows(db, "findings") + rows(db, "rank_summaries") if j == job]

        server = start_server()
        agent = start_agent()
        run_log = os.path.join(tmp, "run.log")
        with open(run_log, "wb") as out:
            job = subprocess.Popen([ptest.BIN, "run", "--nproc", "2", "--server", addr,
                                    "--agent-socket", agent_sock,
                                    "--report-dir", os.path.join(tmp, "run"), "--",
                                    ptest.TORCH_PYTHON, TRAIN, "--iters", "3000"],
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
                if life == 2:
                    # The node agent dies and comes back: the workers reconnect to the new one,
                    # which registers again, and a window asked for now has both ranks.
                    agent.send_signal(signal.SIGKILL)
                    agent.wait()
                    agent = start_agent()
                    said = {}

                    def run_cli(*args):
                        r = subprocess.run([ptest.BIN, *args, "--server", addr],
                                           capture_output=True, text=True)
                        said[args[0]] = r.stdout + r.stderr
                        return r.returncode == 0

                    # The new agent registered (the dead one is still listed until it expires).
                    self.assertTrue(wait_until(
                        lambda: run_cli("status") and "agents: 2" in said["status"], 30),
                        said.get("status"))
                    self.assertTrue(run_cli("trigger"), said["trigger"])
                    asked = said["trigger"]
                    window = int(asked.split("window")[1].split()[0])
                    both = lambda: sorted(r for j, w, r in rows(db, "rank_summaries",
                                                               "job_id, window_id, rank")
                                          if j == life and w == window) == [0, 1]
                    self.assertTrue(wait_until(both, 90),
                                    f"no window from both ranks after the agent restart ({asked})\n"
                                    + tail(run_log) + tail(os.path.join(tmp, "agent.log")))
                    self.assertIsNone(job.poll(), "the job ended early")
                    before = rows(db, "rank_summaries")
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
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=30)
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


if __name__ == "__main__":
    ptest.main()
