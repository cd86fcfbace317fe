"""What a run writes and reads is its user's alone (issue 26, points 3, 5 and 8): a report folder
that another user owns or may write in is refused before any rank starts; outputs are 0700/0600
while the ranks keep the user's umask; `status --report-dir` trusts no credentials another user
could have placed; a token never goes in clear text to a server off this machine; the ranks
inherit no descriptor of the launcher's; names from traces reach the terminal with their control
characters escaped. Another user is `nobody`."""
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

NOBODY = pwd.getpwnam("nobody").pw_uid


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@unittest.skipUnless(ptest.online_built(), "needs the online path (the default build)")
class Privacy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise AssertionError("these tests make folders of another user (nobody): run as root")
        cls.tmp = tempfile.mkdtemp(prefix="pt_privacy_")
        os.chmod(cls.tmp, 0o755)  # nobody may enter it, as a shared parent folder allows

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_job(self, report, *cmd, nproc=1):
        return subprocess.run([ptest.BIN, "run", "--nproc", str(nproc), "--report-dir", report,
                               "--", *cmd], capture_output=True, text=True, timeout=120)

    def assert_refused_before_ranks(self, report, words):
        marker = os.path.join(self.tmp, os.path.basename(report) + ".ran")
        p = self.run_job(report, "touch", marker)
        self.assertNotEqual(p.returncode, 0, p.stderr)
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, p.stderr)
        for w in [report, *words]:
            self.assertIn(w, lines[0])
        self.assertFalse(os.path.exists(marker), "a rank started")
        self.assertFalse(os.path.exists(os.path.join(report, "perftracker.log")), p.stderr)

    def test_a_report_folder_of_another_user_is_refused_before_any_rank_starts(self):
        report = os.path.join(self.tmp, "theirs")
        os.mkdir(report, 0o755)
        os.chown(report, NOBODY, -1)
        self.assert_refused_before_ranks(report, ["belongs to another user", "not to you"])

    def test_a_report_folder_others_may_write_is_refused(self):
        report = os.path.join(self.tmp, "open")
        os.mkdir(report)
        os.chmod(report, 0o777)
        self.assert_refused_before_ranks(report, ["writable by others", "0777"])

    def test_outputs_are_private_and_the_ranks_keep_the_users_umask(self):
        report = os.path.join(self.tmp, "private", "nested")
        out = os.path.join(self.tmp, "rank_umask")
        old = os.umask(0o022)
        try:
            p = self.run_job(report, "sh", "-c", f"umask > {out}; touch {out}.file")
        finally:
            os.umask(old)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(mode(report), 0o700)
        for name in ("perftracker.log", "diagnosis.json", "perftracker.db"):
            self.assertEqual(mode(os.path.join(report, name)), 0o600, name)
        for name in ("traces", "collectives", "memory", ".perftracker"):
            self.assertEqual(mode(os.path.join(report, name)) & 0o077, 0, name)
        with open(out) as f:
            self.assertEqual(f.read().strip(), "0022")
        self.assertEqual(mode(out + ".file"), 0o644)

    def test_the_ranks_inherit_no_descriptor_of_the_launcher(self):
        report = os.path.join(self.tmp, "fds")
        out = os.path.join(self.tmp, "rank_fds")
        # ls lists its own descriptors: 0-2 (the launcher's relay pipes, and the file), and the
        # folder it reads; anything else came from the launcher.
        p = self.run_job(report, "sh", "-c", f"ls -l /proc/self/fd/ > {out}")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            links = [line.split(" -> ", 1) for line in f.read().splitlines() if " -> " in line]
        extra = {pair[0].split()[-1]: pair[1] for pair in links
                 if int(pair[0].split()[-1]) > 2 and not pair[1].startswith("/proc/")}
        self.assertEqual(extra, {}, f"descriptors the rank inherited: {extra}")

    def test_status_trusts_no_credentials_another_user_placed(self):
        # A report folder of nobody's whose credentials point at a listener of theirs: status
        # must not connect (and hand over the token).
        report = os.path.join(self.tmp, "planted")
        creds = os.path.join(report, ".perftracker")
        os.makedirs(creds)
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(4)
            listener.setblocking(False)
            with open(os.path.join(creds, "server"), "w") as f:
                f.write(f"127.0.0.1:{listener.getsockname()[1]}\n")
            with open(os.path.join(creds, "token"), "w") as f:
                f.write("x" * 64 + "\n")
            os.chmod(os.path.join(creds, "token"), 0o600)
            os.chmod(creds, 0o700)
            for path in (report, creds, os.path.join(creds, "server"), os.path.join(creds, "token")):
                os.chown(path, NOBODY, -1)
            p = subprocess.run([ptest.BIN, "status", "--report-dir", report], capture_output=True,
                               text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0, p.stdout)
            self.assertIn("belongs to another user", p.stderr)
            with self.assertRaises(BlockingIOError):
                listener.accept()

    def test_a_token_goes_to_a_server_off_this_machine_only_over_tls(self):
        token = os.path.join(self.tmp, "token")
        with open(token, "w") as f:
            f.write("t" * 64 + "\n")
        os.chmod(token, 0o600)
        for cmd in (["status", "--server", "192.0.2.1:50551", "--token-file", token],
                    ["trigger", "--server", "head.example:50551", "--token-file", token]):
            p = subprocess.run([ptest.BIN, *cmd], capture_output=True, text=True, timeout=30)
            self.assertNotEqual(p.returncode, 0, p.stdout)
            self.assertIn("not sending the token in clear text", p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_a_standalone_server_wants_its_token_and_no_squatter_holds_it(self):
        # A server without --token-file makes a token of its own; another local user's agent
        # without it cannot register a job of theirs and hold the server (one job at a time).
        report = os.path.join(self.tmp, "standalone")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            addr = f"127.0.0.1:{s.getsockname()[1]}"
        log = open(os.path.join(self.tmp, "standalone.log"), "w")
        self.addCleanup(log.close)
        server = subprocess.Popen([ptest.BIN, "server", "--listen", addr, "--report-dir", report],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            token = os.path.join(report, ".perftracker", "token")
            self.assertTrue(ptest.wait_until(lambda: os.path.exists(token), 30), "no token made")
            self.assertEqual(mode(token), 0o600)
            watch = os.path.join(self.tmp, "squatter_traces")
            os.mkdir(watch, 0o700)
            os.chown(watch, NOBODY, -1)
            squat = subprocess.run(["runuser", "-u", "nobody", "--", ptest.BIN, "agent", "--server",
                                    addr, "--watch", watch, "--job-id", "squatter"],
                                   capture_output=True, text=True, timeout=60)
            self.assertNotEqual(squat.returncode, 0, squat.stderr)
            self.assertIn("token", squat.stderr)
            st = subprocess.run([ptest.BIN, "status", "--report-dir", report], capture_output=True,
                                text=True, timeout=60)
            self.assertEqual(st.returncode, 0, st.stderr)
            self.assertIn("job: none yet", st.stdout)
            # The user's own agent, with the token, registers its job; status names it.
            mine = os.path.join(self.tmp, "my_traces")
            os.mkdir(mine, 0o700)
            agent = subprocess.Popen([ptest.BIN, "agent", "--server", addr, "--token-file", token,
                                      "--watch", mine, "--job-id", "mine", "--ranks", "0"],
                                     stdout=log, stderr=subprocess.STDOUT)
            try:
                def held():
                    out = subprocess.run([ptest.BIN, "status", "--report-dir", report],
                                         capture_output=True, text=True, timeout=60).stdout
                    return "job: 'mine' holds this server (1 of its agents connected)" in out
                self.assertTrue(ptest.wait_until(held, 30))
            finally:
                agent.terminate()
                agent.wait(timeout=30)
        finally:
            server.terminate()
            server.wait(timeout=30)

    def test_names_reach_the_terminal_with_their_control_characters_escaped(self):
        trace = os.path.join(self.tmp, "evil.json")
        evil = "aten::mm\x1b]0;owned\x07\x1b[2J"
        with open(trace, "w") as f:
            json.dump({"traceEvents": [
                {"ph": "X", "cat": "cpu_op", "name": evil, "ts": 10 * i, "dur": 5, "pid": 1,
                 "tid": 1} for i in range(20)]}, f)
        for cmd in (["show", trace], ["analyze", trace]):
            p = ptest.run(cmd)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn("\x1b", p.stdout + p.stderr, cmd)
            self.assertNotIn("\x07", p.stdout + p.stderr, cmd)
        p = ptest.run(["show", trace])
        self.assertIn("aten::mm\\x1b]0;owned\\x07\\x1b[2J", p.stdout)


if __name__ == "__main__":
    ptest.main()
