"""Chaos: a real torch job under `perftracker run --server ADDR --agent-socket PATH` while its
server and its node agent (each a process of its own) are killed with SIGKILL and restarted: the
server twice, the agent once. Training exits 0, what SQLite held before each kill is still there,
the restarted agent's window and a window after the last server restart are diagnosed (issue
14)."""
import os
import re
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
# The job must outlive three server lives and an agent restart (30-60 s here; 90 s allowed for
# each life). On torch 2.13 (MKL) a step of this small model alone lasts 7-15 ms: 3000 of them
# ended after 38 s, before the second life stored a window. Each step also waits 30 ms here (as
# a GPU-bound step waits for its kernels): 3000 steps last 120-140 s on 2.13, about 200 s on
# Debian's 1.13, and their time is quiet on shared cores. Once the third life stored its window
# the test ends the job (--stop-file) instead of running out the rest of the steps.
JOB = ["--iters", "3000", "--step-sleep-ms", "30"]


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
            return subprocess.Popen([ptest.BIN, "agent", "--server", addr, "--token-file", token,
                                     "--socket", agent_sock,
                                     "--trace-dir", os.path.join(tmp, "traces"), "--job-id",
                                     "chaos", "--ranks", "0,1"],
                                    stdout=agent_log, stderr=agent_log)

        def job_windows(job):
            return [w for j, w in rows(db, "findings") + rows(db, "rank_summaries") if j == job]

        server = start_server()
        # The server's own token (issue 26), the same in each of its lives.
        token = os.path.join(report, ".perftracker", "token")
        self.assertTrue(wait_until(lambda: os.path.exists(token), 30), "the server made no token")
        agent = start_agent()
        run_log, stop = os.path.join(tmp, "run.log"), os.path.join(tmp, "job.stop")
        with open(run_log, "wb") as out:
            job = subprocess.Popen([ptest.BIN, "run", "--nproc", "2", "--server", addr,
                                    "--token-file", token, "--agent-socket", agent_sock,
                                    "--report-dir", os.path.join(tmp, "run"), "--",
                                    ptest.TORCH_PYTHON, TRAIN, *JOB, "--stop-file", stop],
                                   stdout=out, stderr=out)
        t0 = time.time()
        try:
            before = []
            for life in (1, 2, 3):
                # Each server life sees the ranks (its baseline window once they report 20
                # iterations to it) and stores a diagnosed window of its own.
                self.assertTrue(wait_until(lambda: len(job_windows(life)) >= 2, 90),
                                f"server life {life} stored no window\n" + tail(run_log))
                print(f"chaos: server life {life} stored a window at {time.time() - t0:.1f} s",
                      file=sys.stderr)
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
                        r = subprocess.run([ptest.BIN, *args, "--server", addr, "--token-file", token],
                                           capture_output=True, text=True)
                        said[args[0]] = r.stdout + r.stderr
                        return r.returncode == 0

                    # The new agent registered (the dead one is still listed until it expires).
                    self.assertTrue(wait_until(
                        lambda: run_cli("status") and "agents: 2" in said["status"], 30),
                        said.get("status"))

                    def both(window):
                        return sorted(r for j, w, r in rows(db, "rank_summaries", "job_id, window_id, rank")
                                      if j == life and w == window) == [0, 1]

                    def done(window):
                        return run_cli("status") and re.search(rf"^window {window} done:", said["status"], re.M)

                    # A trigger joins the window that is open, if any. One that opened before the
                    # new agent registered (this life's baseline window, which follows a slowdown
                    # window, or a slowdown window: this quiet job's detector fires on the host's
                    # drift of a few %) never reaches the new agent, and ends without its ranks
                    # (missing_rank: command not delivered). Then the next one is asked for.
                    deadline = time.time() + 90
                    while True:
                        if not run_cli("trigger") and "try again in" in said["trigger"] \
                                and time.time() < deadline:
                            time.sleep(1)  # one window per 30 s from here: asked too early
                            continue
                        asked = said["trigger"]
                        m = re.search(r"^window (\d+) (?:opened|already open)", asked, re.M)
                        self.assertTrue(m, asked)
                        window = int(m.group(1))
                        wait_until(lambda: both(window) or done(window), max(0, deadline - time.time()),
                                   step=0.5)
                        wait_until(lambda: both(window), 5)  # its rows, just after it closed
                        if both(window) or "already open" not in asked or time.time() > deadline:
                            break
                        print(f"chaos: the trigger joined window {window}, opened before the agent "
                              "restart; asking again", file=sys.stderr)
                    self.assertTrue(both(window),
                                    f"no window from both ranks after the agent restart ({asked})\n"
                                    + tail(run_log) + tail(os.path.join(tmp, "agent.log")))
                    self.assertIsNone(job.poll(), "the job ended early")
                    before = rows(db, "rank_summaries")
                if life < 3:
                    server.send_signal(signal.SIGKILL)
                    server.wait()
                    time.sleep(1)
                    server = start_server()
            open(stop, "w").close()
            self.assertEqual(job.wait(timeout=300), 0, tail(run_log))
            diagnosed = [d for d in os.listdir(os.path.join(report, "windows"))]
            print(f"chaos: {len(before)} rank summaries over 3 server lives, windows {sorted(diagnosed)}; "
                  f"the job ended at {time.time() - t0:.1f} s", file=sys.stderr)
        finally:
            if job.poll() is None:
                job.kill()
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=30)
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


if __name__ == "__main__":
    ptest.main()
