#!/usr/bin/env python3
"""What a torch.profiler window costs the training thread, recorded in process (as the collector
does today: start, stop and trace save on the training thread, the save after the window) against
libkineto's on-demand mode (issue 38: keep the stop and the save off the training thread).

On-demand: with KINETO_USE_DAEMON=1 in the environment before torch is imported, libkineto asks a
daemon (dynolog's role) for a trace config every ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS (5 s
unless a base config file, KINETO_CONFIG, says; 1 here) over a Unix datagram socket,
KINETO_IPC_SOCKET_DIR/dynolog (without that variable, the abstract name "\0dynolog\0"), and
writes traces only under KINETO_ONDEMAND_TRACE_DIR (/tmp/ by default). This script is that daemon for its own
child: each datagram is a 40-byte header (size_t payload size, char type[32]) and the payload;
"ctxt" (int32 gpu, int32 pid, int64 job id) is answered with an int32, "req" (int32 type,
int32 n, int64 job id, int32 pids[n]) with the config text, empty for none. The config asks for
ACTIVITIES_ITERATIONS iterations from the next multiple of PROFILE_START_ITERATION_ROUNDUP;
iterations are optimizer steps (torch.profiler, imported with KINETO_USE_DAEMON set, hooks every
optimizer's step). libkineto then starts and stops recording inside the training thread's
optimizer step and processes and writes the trace on its own threads.

Each run is one child process: a 30-layer MLP of 128 wide (many small ops, ~4 ms a step on this
machine), STEPS steps with a 5 ms sleep each, one window of WINDOW iterations at step START.
Its figure: the time the steps from START-1 to START+WINDOW+10 took beyond the run's median step
(the window's start, recording, stop and save; libkineto's processing after the stop). Runs
alternate between the modes.

  python3 bench/kineto_ondemand_cost.py [--runs 4] [--python .venv/bin/python]

Measured here (torch 2.13 CPU build, 2 cores, 2026-12-07, --runs 6): in process +48.9 ms median
(+21.4 to +66.2), on demand +36.3 ms (+8.6 to +57.1) a window of 4 iterations: libkineto's own
threads take the stop's processing and the save, and the recording's cost (every op through
torch's RecordFunction) stays on the training thread, most of a window's cost on a CPU job.
"""
import argparse
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
HEADER = struct.Struct("=Q32s")  # dynolog's ipcfabric Metadata: payload size, type
START, WINDOW, STEPS = 500, 4, 700

CHILD = r"""
import os, statistics, sys, time
mode, start, window, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
import torch, torch.profiler
sys.path.insert(0, os.path.join(os.environ["PT_SOURCE"], "python"))
torch.manual_seed(0)
m = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(30)])
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(32, 128)
prof, write, times = None, None, []
for i in range(steps):
    t = time.perf_counter()
    if i == 50:
        open(out + ".ready", "w").close()  # stepping: the daemon may send the config
    if mode == "inprocess":
        from perftracker.window import stop_profiler, trace_only_config
        if i == start:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                          **trace_only_config(torch))
            prof.start()
        elif i == start + window:
            write = stop_profiler(prof)
        elif i == start + window + 6:
            write(out)
    opt.zero_grad()
    m(x).sum().backward()
    opt.step()
    times.append((time.perf_counter() - t) * 1e3)
    time.sleep(0.005)
med = statistics.median(times)
span = times[start - 1:start + window + 10]
print(f"{med:.3f} {sum(span) - len(span) * med:.1f}")
"""


def serve(sock, config, ready, stop):
    """Answers libkineto's requests on SOCK: CONFIG to the first once the file READY exists (the
    child's optimizer has stepped: before that libkineto turns an iteration-based config into a
    duration-based one), nothing to the others."""
    served = False
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            data, src = sock.recvfrom(65536)
        except socket.timeout:
            continue
        if len(data) < HEADER.size:
            continue
        kind = HEADER.unpack_from(data)[1].split(b"\0")[0]
        if kind == b"ctxt":
            reply = HEADER.pack(4, b"ctxt") + struct.pack("=i", 0)
        elif kind == b"req":
            body = b""
            if not served and os.path.exists(ready):
                body, served = config.encode(), True
            reply = HEADER.pack(len(body), b"req") + body
        else:
            continue
        try:
            sock.sendto(reply, src)
        except OSError:
            pass


def run_once(a, mode, tmp, k):
    out = os.path.join(tmp, f"trace-{mode}-{k}.json")
    env = dict(os.environ, PT_SOURCE=SOURCE)
    stop, server = threading.Event(), None
    if mode == "ondemand":
        sockdir = tempfile.mkdtemp(dir=tmp)
        base = os.path.join(sockdir, "kineto.conf")
        with open(base, "w") as f:
            f.write("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(os.path.join(sockdir, "dynolog"))
        config = (f"ACTIVITIES_ENABLED=true\nPROFILE_START_ITERATION_ROUNDUP={START}\n"
                  f"ACTIVITIES_ITERATIONS={WINDOW}\nACTIVITIES_WARMUP_ITERATIONS=0\n"
                  f"ACTIVITIES_LOG_FILE={out}\n")
        server = threading.Thread(target=serve, args=(sock, config, out + ".ready", stop), daemon=True)
        server.start()
        env.update(KINETO_USE_DAEMON="1", KINETO_IPC_SOCKET_DIR=sockdir, KINETO_CONFIG=base,
                   KINETO_ONDEMAND_TRACE_DIR=tmp)
    p = subprocess.run([a.python, "-c", CHILD, mode, str(START), str(WINDOW), str(STEPS), out],
                       capture_output=True, text=True, env=env, timeout=300)
    stop.set()
    if server is not None:
        server.join()
    if p.returncode != 0:
        sys.exit(f"{mode} run failed ({p.returncode}):\n{p.stderr[-2000:]}")
    med, extra = (float(x) for x in p.stdout.split()[-2:])
    # The trace holds the window's optimizer steps (libkineto names its file PATH_pid_tid.json).
    steps = 0
    for f in os.listdir(tmp):
        if f.startswith(f"trace-{mode}-{k}") and f.endswith(".json"):
            with open(os.path.join(tmp, f)) as fh:
                steps = len(re.findall(r'"name": "Optimizer\.step#SGD\.step"', fh.read()))
    return med, extra, steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=4, help="runs of each mode, interleaved")
    ap.add_argument("--python", default=os.path.join(SOURCE, ".venv", "bin", "python"))
    a = ap.parse_args()
    extra = {"inprocess": [], "ondemand": []}
    with tempfile.TemporaryDirectory(prefix="pt_kineto_") as tmp:
        for k in range(a.runs):
            for mode in (["inprocess", "ondemand"] if k % 2 == 0 else ["ondemand", "inprocess"]):
                med, ms, steps = run_once(a, mode, tmp, k)
                extra[mode].append(ms)
                print(f"run {k} {mode}: median step {med:.2f} ms, the window's steps {ms:+.1f} ms "
                      f"beyond it; its trace holds {steps} optimizer steps", flush=True)
    for mode, v in extra.items():
        print(f"{mode}: median {statistics.median(v):+.1f} ms (min {min(v):+.1f}, max {max(v):+.1f}) "
              f"over {len(v)} windows of {WINDOW} iterations")


if __name__ == "__main__":
    main()
