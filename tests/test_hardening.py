"""The online path as an attacker or a faulty peer sees it (issue 14): no rank outlives its
launcher, nobody else steers a job, hostile files give one line and little memory."""
import os
import pwd
import shutil
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402
from ptest import wait_until  # noqa: E402


def free_uid():
    """A uid no account names and no process runs as."""
    for uid in range(64100, 64200):
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        ps = subprocess.run(["ps", "-L", "-u", str(uid), "-o", "lwp="], capture_output=True,
                            text=True)
        if not ps.stdout.split():
            return str(uid)
    raise AssertionError("no free uid in 64100..64199")


BOMB = os.path.join(ptest.SOURCE, "tests", "data", "bomb", "strings.summary")
PEAK_LIMIT_KB = 100 * 1024


def peak_kb(args):
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(ptest.BIN, [ptest.BIN, *args])
    _, status, usage = os.wait4(pid, 0)
    return usage.ru_maxrss


def alive(pattern):
    p = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(x) for x in p.stdout.split()]


@unittest.skipUnless(ptest.online_built(), "needs the online path (the default build)")
class Hardening(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pt_hardening_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def launch(self, name, *cmd, nproc=2):
        report = os.path.join(self.tmp, name)
        os.makedirs(self.tmp, exist_ok=True)
        with open(os.path.join(self.tmp, name + ".log"), "wb") as log:
            p = subprocess.Popen([ptest.BIN, "run", "--nproc", str(nproc), "--report-dir", report,
                                  "--", *cmd], stdout=subprocess.DEVNULL, stderr=log)
        return p, report

    def test_ranks_and_their_children_die_with_the_launcher(self):
        # A marker in the command line finds exactly this test's processes.
        mark = f"pt_orphan_{os.getpid()}"
        p, _ = self.launch("orphans", "sh", "-c", f"sleep 300 & sleep 300 & wait # {mark}")
        mark = f"^sh -c sleep 300 .*{mark}"  # the ranks, not the launcher (which names it too)
        try:
            self.assertTrue(wait_until(lambda: len(alive(mark)) == 2, 20), "ranks did not start")
            ranks = alive(mark)
            # The ranks' children: the sleeps whose parent is one of the ranks.
            children = lambda: [int(x) for r in ranks for x in subprocess.run(
                ["pgrep", "-P", str(r)], capture_output=True, text=True).stdout.split()]
            self.assertTrue(wait_until(lambda: len(children()) == 4, 10))
            sleeps = children()
        finally:
            p.kill()  # SIGKILL: no handler of the launcher runs
            p.wait()
        self.assertTrue(wait_until(lambda: not alive(mark), 5), f"ranks outlived: {alive(mark)}")
        # The ranks' own children (in their process groups) go too.
        self.assertTrue(wait_until(lambda: not set(sleeps) & set(alive("^sleep 300$")), 10),
                        "the ranks' children outlived the launcher")
        print(f"launcher killed: {len(ranks)} ranks and {len(sleeps)} children gone",
              file=sys.stderr)

    def test_signals_give_the_shells_exit_codes(self):
        for sig, code in ((signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)):
            p, _ = self.launch(f"sig{sig}", "sleep", "300")
            time.sleep(1.5)
            p.send_signal(sig)
            p.wait(timeout=60)
            self.assertEqual(p.returncode, code, f"signal {sig}")

    def test_nobody_else_steers_the_job(self):
        p, report = self.launch("token", "sleep", "60")
        try:
            creds = os.path.join(report, ".perftracker")
            self.assertTrue(wait_until(lambda: os.path.exists(os.path.join(creds, "server")), 20))
            self.assertEqual(os.stat(creds).st_mode & 0o777, 0o700)
            self.assertEqual(os.stat(os.path.join(creds, "token")).st_mode & 0o777, 0o600)
            with open(os.path.join(creds, "server")) as f:
                addr = f.read().strip()
            # The user, with the run's folder: accepted.
            ok = ptest.run(["status", "--report-dir", report])
            self.assertEqual(ok.returncode, 0, ok.stderr)
            self.assertIn("rank 0", ok.stdout)
            # Anyone with only the address (another local user): refused, one line.
            for cmd in ("status", "trigger"):
                r = ptest.run([cmd, "--server", addr])
                self.assertNotEqual(r.returncode, 0, r.stdout)
                self.assertIn("token", r.stderr)
            if os.geteuid() == 0 and shutil.which("runuser"):
                r = subprocess.run(["runuser", "-u", "nobody", "--", ptest.BIN, "trigger",
                                    "--server", addr], capture_output=True, text=True)
                self.assertNotEqual(r.returncode, 0, r.stdout)
                r = subprocess.run(["runuser", "-u", "nobody", "--", ptest.BIN, "status",
                                    "--report-dir", report], capture_output=True, text=True)
                self.assertNotEqual(r.returncode, 0, r.stdout)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)

    def test_a_failed_fork_stops_the_ranks_already_started(self):
        # A process limit (RLIMIT_NPROC counts every task of a user) lets the launcher, its
        # threads and some ranks start, then fork fails. As root (CI) the launcher runs as a uid
        # of its own that runs nothing else, so the limit is exact: counting nobody's tasks
        # first raced other tests' tasks of nobody's under ctest -j2. Otherwise as this user,
        # above what it runs now.
        user = free_uid() if os.geteuid() == 0 else None
        if user and not shutil.which("setpriv"):
            self.fail("setpriv (util-linux) is missing")
        owner = user or str(os.getuid())
        ps = subprocess.run(["ps", "-L", "-u", owner, "-o", "lwp="], capture_output=True,
                            text=True)
        limit = len(ps.stdout.split()) + 80
        report = tempfile.mkdtemp(prefix="pt_fork_")
        os.chmod(report, 0o777)
        self.addCleanup(shutil.rmtree, report, True)
        mark = "301.25"
        cmd = ["prlimit", f"--nproc={limit}", ptest.BIN, "run", "--nproc", "400", "--report-dir",
               os.path.join(report, "r"), "--", "sleep", mark]
        if user:
            cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
        before = set(os.listdir("/tmp"))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as e:
            # Say where the launcher stands, so that a hang seen once can be understood.
            tasks = subprocess.run(["ps", "-L", "-u", owner, "-o", "pid,lwp,stat,wchan:32,args"],
                                   capture_output=True, text=True).stdout
            subprocess.run(["pkill", "-KILL", "-U", owner])
            self.fail(f"the launcher did not end within 120 s; its tasks:\n{tasks[:6000]}\n"
                      f"stderr: {e.stderr}")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"run: cannot start rank \d+: fork failed: ")
        self.assertEqual(len(r.stderr.strip().splitlines()[-1:]), 1)
        self.assertTrue(wait_until(lambda: not alive(f"^sleep {mark}$"), 10),
                        f"ranks started before the failure still run: {alive(f'^sleep {mark}$')}")
        left = [d for d in set(os.listdir("/tmp")) - before if d.startswith("perftracker-")]
        self.assertEqual(left, [], "the launcher left its socket folder")
        print(f"fork failed under a limit of {limit} tasks: {r.stderr.strip().splitlines()[-1]}",
              file=sys.stderr)

    def test_token_files_readable_by_others_or_short_are_refused(self):
        loose = os.path.join(self.tmp, "loose")
        with open(loose, "w") as f:
            f.write("a" * 40 + "\n")
        os.chmod(loose, 0o644)
        r = ptest.run(["status", "--server", "127.0.0.1:1", "--token-file", loose])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("readable by others", r.stderr)
        short = os.path.join(self.tmp, "short")
        with open(short, "w") as f:
            f.write("abc\n")
        os.chmod(short, 0o600)
        r = ptest.run(["status", "--server", "127.0.0.1:1", "--token-file", short])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("at least 16", r.stderr)

    def test_a_summary_bomb_is_one_line_in_little_memory(self):
        self.assertLess(os.path.getsize(BOMB), 16 * 1024)
        r = ptest.run(["diagnose", BOMB])
        self.assertNotEqual(r.returncode, 0)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(BOMB, lines[0])
        self.assertIn("corrupt summary", lines[0])
        peak = peak_kb(["diagnose", BOMB])
        self.assertLess(peak, PEAK_LIMIT_KB, f"peak {peak} KB")
        print(f"bomb: peak {peak / 1024:.1f} MB", file=sys.stderr)

    def test_a_huge_world_size_is_bounded(self):
        trace = os.path.join(self.tmp, "huge_world.json")
        with open(trace, "w") as f:
            f.write('{"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2000000000},'
                    ' "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,'
                    ' "tid": 1, "ts": 0, "dur": 10}]}')
        r = ptest.run(["analyze", trace])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("world_size from 1 to 1048576", r.stdout)
        self.assertIn("world size 1", r.stdout)
        self.assertLess(peak_kb(["analyze", trace]), PEAK_LIMIT_KB)




# A stand-in for an agent (issue 26): binds PATH, and to every worker that connects sends a
# profile command writing into DIR; prints "ready" once listening.
FAKE_AGENT = r"""
import json, os, socket, sys, time
path, dirname = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(4)
print("ready", flush=True)
s.settimeout(30)
c, _ = s.accept()
c.sendall((json.dumps({"type": "profile", "window": 1, "iters": 5, "max_s": 5,
                       "dir": dirname}) + "\n").encode())
time.sleep(5)
"""


def fake_collector():
    """The collector's surface perftracker.client uses, recording what it is asked."""
    started = []
    w = types.SimpleNamespace(drain=lambda: [], hold_detector=lambda on: None,
                              stop_window=lambda: None)
    c = types.SimpleNamespace(w=w, off=[], train_tid=None, started=started)
    c.turn_off = lambda e: c.off.append(e)
    c.windows = types.SimpleNamespace(start=lambda *a: started.append(a) or True)
    c.patches = types.SimpleNamespace(ring=types.SimpleNamespace(dump=lambda **k: None))
    return c


def worker_client(sock):
    sys.path.insert(0, os.path.join(ptest.SOURCE, "python"))
    from perftracker import client
    c = fake_collector()  # also the switch the client reads _worker and turn_off from
    ac = client.AgentClient(c, c.windows, c.patches.ring, sock, "", train_tid=lambda: None,
                            last_collective=lambda: None)
    ac.ident["rank"] = 0  # the trace is named after it (no launcher's environment here)
    return c, ac


@unittest.skipUnless(ptest.online_built(), "needs the online path (the default build)")
class SocketHardening(unittest.TestCase):
    """Issue 26: the worker <-> agent socket between local users."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pt_sock_")
        os.chmod(self.tmp, 0o1777)  # like /tmp: the other user makes their folders here too
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def as_nobody(self):
        if os.geteuid() != 0:
            self.fail("run as root: the test needs a second local user (runuser -u nobody)")
        if not shutil.which("runuser"):
            self.fail("runuser (util-linux) is missing")
        return ["runuser", "-u", "nobody", "--"]

    def test_an_agent_refuses_a_folder_another_user_made_first(self):
        # Another user makes the (predictable) socket folder first, open to all.
        theirs = os.path.join(self.tmp, "perftracker-job-1-node")
        subprocess.run(self.as_nobody() + ["mkdir", "-m", "0777", theirs], check=True)
        sock = os.path.join(theirs, "agent.sock")
        r = ptest.run(["agent", "--server", "127.0.0.1:1", "--socket", sock, "--trace-dir",
                       os.path.join(self.tmp, "traces")], timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn(theirs, r.stderr)
        self.assertFalse(os.path.exists(sock))
        self.assertEqual(os.stat(theirs).st_mode & 0o777, 0o777)  # not chmod-ed
        # --watch: the same check.
        r = ptest.run(["agent", "--server", "127.0.0.1:1", "--watch", theirs], timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn(theirs, r.stderr)

    def test_an_agent_refuses_a_trace_folder_another_user_made_first(self):
        # Issue 40: the trace folder, where workers write and the agent reads, summarizes and
        # prunes, passes the socket folder's check: another user's folder open to all is refused.
        theirs = os.path.join(self.tmp, "traces")
        subprocess.run(self.as_nobody() + ["mkdir", "-m", "0777", theirs], check=True)
        sock = os.path.join(self.tmp, "own", "agent.sock")
        r = ptest.run(["agent", "--server", "127.0.0.1:1", "--socket", sock, "--trace-dir", theirs],
                      timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn(f"the trace folder {theirs}", r.stderr)
        self.assertEqual(os.stat(theirs).st_mode & 0o777, 0o777)  # not chmod-ed

    def test_loader_counters_are_a_new_file_in_a_private_folder_while_the_collector_is_on(self):
        # Issue 40: a DataLoader worker's counter file (loader-<pid> in the agent socket's
        # folder) was opened O_CREAT|O_TRUNC: through a planted link, over another user's file,
        # in any folder, and after the collector turned itself off.
        sys.path.insert(0, os.path.join(ptest.SOURCE, "python"))
        from perftracker import files, loader, switch
        private = os.path.join(self.tmp, "sock")
        os.mkdir(private, 0o700)
        self.assertTrue(files.private_folder(private))
        opened = os.path.join(self.tmp, "open")
        os.mkdir(opened)
        os.chmod(opened, 0o755)
        self.assertFalse(files.private_folder(opened))
        self.assertTrue(files.own_folder(opened))  # others may read a report's folder
        os.chmod(opened, 0o775)
        self.assertFalse(files.own_folder(opened))
        os.symlink(private, os.path.join(self.tmp, "link"))
        self.assertFalse(files.private_folder(os.path.join(self.tmp, "link")))
        # A planted link: never followed, its target untouched.
        victim = os.path.join(self.tmp, "victim")
        with open(victim, "w") as f:
            f.write("keep")
        planted = os.path.join(private, "loader-1")
        os.symlink(victim, planted)
        with self.assertRaises(OSError):
            loader.WorkerStats(planted, "d", "c")
        with open(victim) as f:
            self.assertEqual(f.read(), "keep")
        # Another user's file there: left alone.
        theirs = os.path.join(self.tmp, "loader-2")
        subprocess.run(self.as_nobody() + ["touch", theirs], check=True)
        with self.assertRaises(OSError):
            loader.WorkerStats(theirs, "d", "c")
        self.assertEqual(os.path.getsize(theirs), 0)
        # An earlier worker's file of this user's (the same pid, not yet pruned): made afresh.
        stale = os.path.join(private, "loader-3")
        with open(stale, "wb") as f:
            f.write(b"x" * 2000)
        loader.WorkerStats(stale, "d", "c").add(5, 6)
        self.assertEqual(os.path.getsize(stale), loader.SIZE)
        # The collector turned itself off: no more counters in this process.
        self.assertFalse(loader._RECORDER.off)
        switch.Switch().turn_off(RuntimeError("test"))
        self.assertTrue(loader._RECORDER.off)
        loader._RECORDER.off = False

    def test_rings_of_collectives_are_dumped_only_into_a_folder_nobody_else_writes_in(self):
        # Issue 40: the collectives folder comes from the environment; one others may write in
        # could hold links planted where the dumps go.
        sys.path.insert(0, os.path.join(ptest.SOURCE, "python"))
        from perftracker import collectives, config, switch
        written = []
        sw = switch.Switch()
        sw.w = types.SimpleNamespace(collective_dump=written.append,
                                     collective_crash_path=written.append)
        ring = collectives.CollectiveRing(sw)
        ring._rank = 0
        shared = os.path.join(self.tmp, "shared")
        subprocess.run(self.as_nobody() + ["mkdir", "-m", "0777", shared], check=True)
        own = os.path.join(self.tmp, "own")
        os.mkdir(own, 0o700)
        env = os.environ.get(config.COLLECTIVES_DIR_ENV)
        self.addCleanup(lambda: os.environ.__setitem__(config.COLLECTIVES_DIR_ENV, env) if env
                        else os.environ.pop(config.COLLECTIVES_DIR_ENV, None))
        os.environ[config.COLLECTIVES_DIR_ENV] = shared
        ring.dump(False)
        ring._set_crash_path()
        self.assertEqual(written, [])
        os.environ[config.COLLECTIVES_DIR_ENV] = own
        ring.dump(False)
        self.assertEqual(written, [os.path.join(own, "rank_0.ring.json")])

    def test_the_torch_trace_is_never_exported_through_a_link(self):
        # Issue 40: torch's trace writer opens OUT.tmp as it finds it; a link planted there took
        # the export wherever it pointed.
        sys.path.insert(0, os.path.join(ptest.SOURCE, "python"))
        from perftracker import switch, window
        sent = []
        ws = window.WindowState(switch.Switch(), sent.append)
        folder = os.path.join(self.tmp, "traces")
        os.mkdir(folder, 0o700)
        victim = os.path.join(self.tmp, "victim")
        with open(victim, "w") as f:
            f.write("keep")
        out = os.path.join(folder, "rank-0.torch.json")
        os.symlink(victim, out + ".tmp")

        def torch_write(path):  # as torch's writer: open, truncate, write
            with open(path, "w") as f:
                f.write("{}")

        ws._export_now(torch_write, out, 7)
        with open(victim) as f:
            self.assertEqual(f.read(), "keep")
        self.assertFalse(os.path.exists(out))
        self.assertEqual([m.get("path") for m in sent], [None])  # the window's trace failed
        # A stale file of this user's from an export that died is replaced.
        os.unlink(out + ".tmp")
        with open(out + ".tmp", "w") as f:
            f.write("stale")
        ws._export_now(torch_write, out, 8)
        with open(out) as f:
            self.assertEqual(f.read(), "{}")
        self.assertEqual(sent[-1].get("path"), out)

    def test_a_worker_obeys_no_other_users_agent(self):
        # Nobody's agent, in nobody's folder, tells the worker to write into the user's files.
        theirs = os.path.join(self.tmp, "theirs")
        subprocess.run(self.as_nobody() + ["mkdir", "-m", "0755", theirs], check=True)
        victim = os.path.join(self.tmp, "victim")
        os.mkdir(victim)
        sock = os.path.join(theirs, "agent.sock")
        # The system's Python: this one may live where nobody cannot read (a user's pyenv).
        agent = subprocess.Popen(self.as_nobody() + ["/usr/bin/python3", "-c", FAKE_AGENT, sock,
                                                     victim], stdout=subprocess.PIPE, text=True)
        self.addCleanup(agent.kill)
        self.assertEqual(agent.stdout.readline().strip(), "ready")
        c, ac = worker_client(sock)
        ac.tick()
        self.assertEqual(len(c.off), 1, "the worker did not turn itself off")
        self.assertIn("uid", str(c.off[0]))
        self.assertIsNone(ac.sock)
        for _ in range(3):
            ac.tick()
        self.assertEqual(c.started, [])
        self.assertEqual(os.listdir(victim), [])
        self.assertEqual(len(c.off), 1)  # said once

    def test_a_worker_writes_only_inside_the_agents_trace_folder(self):
        # The user's own agent: its socket folder private, the trace folder linked next to it.
        sock_dir = os.path.join(self.tmp, "sock")
        os.mkdir(sock_dir, 0o700)
        traces = os.path.join(self.tmp, "traces")
        os.mkdir(traces)
        sock = os.path.join(sock_dir, "agent.sock")
        os.symlink(traces, sock + ".traces")
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(sock)
        srv.listen(1)
        self.addCleanup(srv.close)
        c, ac = worker_client(sock)
        ac.tick()
        conn, _ = srv.accept()
        self.addCleanup(conn.close)
        conn.settimeout(0.1)  # one tick of the client between reads
        elsewhere = os.path.join(self.tmp, "victim")
        inside = os.path.join(traces, "window-1")
        os.mkdir(inside)
        os.symlink(elsewhere, os.path.join(traces, "window-2"))
        cmds = [{"dir": elsewhere}, {"dir": os.path.join(traces, "window-2")},
                {"path": os.path.join(traces, "..", "x.json")},
                {"dir": inside, "iters": 10 ** 9}, {"dir": inside, "max_s": 1e9},
                {"dir": inside, "iters": "5"}, {"dir": inside}]
        acks = []
        for i, cmd in enumerate(cmds):
            conn.sendall((json.dumps({"type": "profile", "window": i, **cmd}) + "\n").encode())
            deadline = time.monotonic() + 5
            buf = b""
            while time.monotonic() < deadline and b'"profile_ack"' not in buf:
                ac.tick()
                try:
                    buf += conn.recv(65536)
                except socket.timeout:
                    pass
            acks += [json.loads(x) for x in buf.splitlines() if b'"profile_ack"' in x]
        self.assertEqual([a["accepted"] for a in acks], [False] * 6 + [True], acks)
        self.assertEqual(len(c.started), 1)
        self.assertEqual(os.path.dirname(c.started[0][0]), inside)
        self.assertEqual(c.off, [])


if __name__ == "__main__":
    ptest.main()
