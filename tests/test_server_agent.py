"""Online path end to end on loopback: a server, two agents, a trigger, real traces dropped into
the agents' folders, and DIR/diagnosis.json with both ranks; token refusal off 127.0.0.1."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402


def make_pki(tmp, ip):
    """A CA, a server certificate for IP and a client certificate, made with openssl."""
    d = os.path.join(tmp, "pki")
    os.makedirs(d, exist_ok=True)
    f = {n: os.path.join(d, n) for n in ("ca.key", "ca.crt", "server.key", "server.csr",
                                        "server.crt", "client.key", "client.csr", "client.crt",
                                        "san.cnf")}
    with open(f["san.cnf"], "w") as c:
        c.write(f"subjectAltName=IP:{ip}\n")

    def ssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f["ca.key"], "-out", f["ca.crt"],
        "-days", "2", "-subj", "/CN=perftracker test CA")
    for who in ("server", "client"):
        ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f[f"{who}.key"], "-out",
            f[f"{who}.csr"], "-subj", f"/CN={who}")
        ssl("x509", "-req", "-in", f[f"{who}.csr"], "-CA", f["ca.crt"], "-CAkey", f["ca.key"],
            "-CAcreateserial", "-out", f[f"{who}.crt"], "-days", "2", "-extfile", f["san.cnf"])
        os.chmod(f[f"{who}.key"], 0o600)
    return f


def token_of(report):
    """The token file a `perftracker server` makes in REPORT, once it has made it."""
    path = os.path.join(report, ".perftracker", "token")
    assert wait_for(lambda: os.path.exists(path), 30), f"{path}: the server made no token"
    return path


# A worker as src/worker/protocol.md describes it, without torch: it reports an iteration every
# 50 ms and answers a profile command by MODE: "report" sends TRACE as its window's trace, "die"
# kills itself (SIGKILL: no exit message), "stuck" reports no iteration any more.
FAKE_WORKER = r"""
import json, os, signal, socket, sys, time
path, rank, mode, trace = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.socket(socket.AF_UNIX)
s.connect(path)
ident = {"pid": os.getpid(), "rank": rank, "local_rank": rank, "world_size": 3, "host": "fake"}
def send(**m):
    m.update(ident)
    s.sendall((json.dumps(m) + "\n").encode())
send(type="hello", v=1, clock_offset_ns=0)
s.setblocking(False)
i, buf, stuck = 0, b"", False
while True:
    if not stuck:
        t = time.monotonic_ns()
        send(type="iterations", items=[[i, t - 10000000, t, True]])
        i += 1
    try:
        data = s.recv(65536)
        if not data:
            sys.exit(0)
        buf += data
    except BlockingIOError:
        pass
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        cmd = json.loads(line)
        if cmd.get("type") != "profile":
            continue
        send(type="profile_ack", accepted=True, path="x", window=cmd["window"])
        if mode == "report":
            send(type="python_trace", path=trace, window=cmd["window"], torch=False)
        elif mode == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            stuck = True
    time.sleep(0.05)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout=30):
    return ptest.wait_until(pred, timeout)


@unittest.skipUnless(ptest.online_built(), "built without gRPC (server/agent)")
class ServerAgent(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pt_online_")
        self.procs = []
        self.logs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self.logs:
            f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, *args):
        log = open(os.path.join(self.tmp, f"log{len(self.procs)}.txt"), "w")
        self.logs.append(log)
        p = subprocess.Popen([ptest.BIN, *args], stdout=log, stderr=subprocess.STDOUT, text=True)
        self.procs.append(p)
        return p

    def log(self):
        out = ""
        for i in range(len(self.procs)):
            with open(os.path.join(self.tmp, f"log{i}.txt")) as f:
                out += f"--- process {i}\n" + f.read()
        return out

    def test_trigger_collects_both_ranks(self):
        port = free_port()
        addr = f"127.0.0.1:{port}"
        report = os.path.join(self.tmp, "report")
        server = self.start("server", "--listen", addr, "--report-dir", report)
        tok = token_of(report)  # the server's own token (issue 26): agents and clients need it
        folders = []
        for r in range(2):
            d = os.path.join(self.tmp, f"node{r}")
            os.makedirs(d, 0o700)  # a watched folder must be private (issue 26)
            folders.append(d)
            self.start("agent", "--server", addr, "--token-file", tok, "--watch", d, "--ranks", str(r))
        # Both agents registered before the trigger, so the window waits for both ranks.
        self.assertTrue(wait_for(lambda: "agents: 2" in ptest.run(["status", "--report-dir", report]).stdout),
                        self.log())
        t = ptest.run(["trigger", "--report-dir", report])
        self.assertEqual(t.returncode, 0, t.stderr)
        self.assertIn("window 1", t.stdout)
        time.sleep(0.5)  # the agents receive the command
        for r, d in enumerate(folders):
            src = os.path.join(ptest.KINETO, f"job128_rank-{r}.json.gz")
            tmp = os.path.join(d, f".rank-{r}.part")
            shutil.copy(src, tmp)
            os.rename(tmp, os.path.join(d, f"job128_rank-{r}.json.gz"))
        latest = os.path.join(report, "diagnosis.json")
        self.assertTrue(wait_for(lambda: os.path.exists(latest), 60), self.log())
        with open(latest) as f:
            d = json.load(f)
        self.assertEqual(d["schema"], "perftracker.diagnosis/1")
        self.assertEqual(sorted(d["job"]["ranks"]), [0, 1], self.log())
        self.assertTrue(os.path.exists(os.path.join(report, "windows", "1", "diagnosis.json")))
        st = ptest.run(["status", "--report-dir", report])
        self.assertIn("window 1 done", st.stdout)
        self.assertIn("2 of its agents connected", st.stdout)
        self.assertIn("summary", self.log())
        server.send_signal(signal.SIGTERM)
        self.assertEqual(server.wait(timeout=15), 0, self.log())
        self.assertTrue(os.path.exists(latest))

    def test_upload_retried_while_server_is_down(self):
        port = free_port()
        addr = f"127.0.0.1:{port}"
        report = os.path.join(self.tmp, "r")
        server = self.start("server", "--listen", addr, "--report-dir", report)
        tok = token_of(report)
        d = os.path.join(self.tmp, "node0")
        os.makedirs(d, 0o700)  # a watched folder must be private (issue 26)
        agent = self.start("agent", "--server", addr, "--token-file", tok, "--watch", d, "--ranks", "0")
        self.assertTrue(wait_for(lambda: "agents: 1" in ptest.run(["status", "--report-dir", report]).stdout),
                        self.log())
        self.assertEqual(ptest.run(["trigger", "--report-dir", report]).returncode, 0)
        time.sleep(0.5)  # the agent receives the window command
        server.kill()
        server.wait()
        tmp = os.path.join(d, ".rank-0.part")
        shutil.copy(os.path.join(ptest.KINETO, "job128_rank-0.json.gz"), tmp)
        os.rename(tmp, os.path.join(d, "job128_rank-0.json.gz"))
        # Five attempts with doubling, jittered waits from 0.5 s: about 7.5 s, at most 11 s.
        self.assertTrue(wait_for(lambda: "window 1 rank 0: summary" in self.log(), 40), self.log())
        log = self.log()
        for n in range(1, 6):
            self.assertIn(f"window 1 rank 0: upload attempt {n} failed", log)
        self.assertNotIn("upload attempt 6", log)
        self.assertIn("upload refused", log)
        self.assertIsNone(agent.poll(), "the agent keeps running after giving up on one upload")

    def test_silent_ranks_are_one_finding_that_says_why(self):
        """Issue 23: three fake workers (the worker protocol, no torch) on one socket agent; when
        window 1 comes, rank 0 reports, rank 1 is killed, rank 2 stops iterating. The window has
        one missing_rank finding naming ranks 1 and 2, each with its reason."""
        addr = f"127.0.0.1:{free_port()}"
        report = os.path.join(self.tmp, "report")
        self.start("server", "--listen", addr, "--report-dir", report, "--max-seconds", "2",
                   "--grace-seconds", "3")
        sock = os.path.join(self.tmp, "agent.sock")
        tok = token_of(report)
        self.start("agent", "--server", addr, "--token-file", tok, "--socket", sock, "--trace-dir",
                   os.path.join(self.tmp, "traces"), "--ranks", "0,1,2")
        self.assertTrue(wait_for(lambda: os.path.exists(sock)), self.log())
        # The agent reads traces only inside its trace folder (issue 26).
        trace = os.path.join(self.tmp, "traces", "rank-0.json.gz")
        shutil.copy(os.path.join(ptest.KINETO, "job128_rank-0.json.gz"), trace)
        worker = os.path.join(self.tmp, "fake_worker.py")
        with open(worker, "w") as f:
            f.write(FAKE_WORKER)
        for rank, mode in ((0, "report"), (1, "die"), (2, "stuck")):
            log = open(os.path.join(self.tmp, f"log{len(self.procs)}.txt"), "w")
            self.logs.append(log)
            self.procs.append(subprocess.Popen(
                [sys.executable, worker, sock, str(rank), mode, trace], stdout=log,
                stderr=subprocess.STDOUT))
        # Every rank's iterations reach the server (a registered rank is listed at step -1).
        def iterating():
            out = ptest.run(["status", "--report-dir", report]).stdout
            steps = re.findall(r"rank \d+ on .*?: last step (-?\d+)", out)
            return len(steps) == 3 and min(int(x) for x in steps) >= 5
        self.assertTrue(wait_for(iterating), self.log())
        t = ptest.run(["trigger", "--report-dir", report])
        self.assertEqual(t.returncode, 0, t.stderr)
        path = os.path.join(report, "windows", "1", "diagnosis.json")
        self.assertTrue(wait_for(lambda: os.path.exists(path), 60), self.log())
        with open(path) as f:
            d = json.load(f)
        missing = [x for x in d["findings"] if x["category"] == "missing_rank"]
        self.assertEqual(len(missing), 1, d["findings"])
        m = missing[0]
        self.assertEqual(m["ranks"], [1, 2], m)
        self.assertTrue(m["evidence"]["rank_1"].startswith("rank_dead: process exited"), m)
        self.assertTrue(m["evidence"]["rank_2"].startswith("no_iteration_since_command"), m)
        self.assertIn("rank 1 dead (process exited at iteration", m["summary"])
        self.assertIn("rank 2 no iteration since the command", m["summary"])
        self.assertIn("The diagnosis covers 1 of 3 ranks.", m["summary"])
        print(f"missing_rank: {m['summary']}", file=sys.stderr)

    def test_non_loopback_requires_token(self):
        port = free_port()
        addr = f"127.0.0.2:{port}"  # still loopback traffic, but not 127.0.0.1
        report = os.path.join(self.tmp, "report")
        p = ptest.run(["server", "--listen", addr, "--report-dir", report, "--insecure-no-token"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("token", p.stderr)
        # Token files are private (0600) and 16 characters at least: tests/test_hardening.py.
        token = os.path.join(self.tmp, "token")
        with open(token, "w") as f:
            f.write("correct horse battery staple\n")
        os.chmod(token, 0o600)
        wrong = os.path.join(self.tmp, "wrong")
        with open(wrong, "w") as f:
            f.write("not the right token at all\n")
        os.chmod(wrong, 0o600)
        # Off 127.0.0.1 the token alone is not enough: the traffic must be encrypted.
        p = ptest.run(["server", "--listen", addr, "--report-dir", report, "--token-file", token])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("TLS", p.stderr)
        pki = make_pki(self.tmp, "127.0.0.2")
        server_tls = ["--tls-cert", pki["server.crt"], "--tls-key", pki["server.key"],
                      "--tls-ca", pki["ca.crt"]]
        client_tls = ["--tls-ca", pki["ca.crt"], "--tls-cert", pki["client.crt"],
                      "--tls-key", pki["client.key"]]
        self.start("server", "--listen", addr, "--report-dir", report, "--token-file", token,
                   *server_tls)
        self.assertTrue(wait_for(lambda: ptest.run(
            ["status", "--server", addr, "--token-file", token, *client_tls]).returncode == 0),
            self.log())
        # A wrong or missing token, no TLS, or TLS without a client certificate: refused.
        for args in (client_tls, ["--token-file", wrong, *client_tls], ["--token-file", token],
                     ["--token-file", token, "--tls-ca", pki["ca.crt"]]):
            s = ptest.run(["status", "--server", addr, *args])
            self.assertNotEqual(s.returncode, 0, args)
        d = os.path.join(self.tmp, "w")
        os.makedirs(d, 0o700)  # a watched folder must be private (issue 26)
        a = subprocess.run([ptest.BIN, "agent", "--server", addr, "--watch", d, *client_tls],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(a.returncode, 0)
        self.assertIn("refused", a.stderr)


if __name__ == "__main__":
    ptest.main()
