#!/usr/bin/env python3
"""Times perftracker analyze against Holistic Trace Analysis loading the same traces.

HTA is the reference Python tool (github.com/facebookresearch/HolisticTraceAnalysis). It is
not packaged for Debian, so point --hta-src at a checkout of it; its dependencies are Debian
packages: apt-get install python3-pandas python3-plotly python3-networkx python3-pydot
python3-yaml. Runs alternate (HTA, perftracker, HTA, ...) so both see the same machine, and
the ratio of the medians is printed.

  python3 bench/make_big_traces.py --src ../shared/traces/kineto/resnet_ns_rank-0.pt.trace.json.gz \\
      --ranks 8 --mb 54 -o /tmp/big
  /usr/bin/python3 bench/compare_hta.py --hta-src /path/to/HolisticTraceAnalysis \\
      --bin build/perftracker --runs 3 /tmp/big
"""
import argparse
import statistics
import subprocess
import sys
import time

HTA_LOAD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from hta.trace_analysis import TraceAnalysis
t = time.time()
a = TraceAnalysis(trace_dir=sys.argv[2])
print(f"{time.time() - t:.3f} {len(a.t.traces)}")
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", help="folder of one trace per rank")
    ap.add_argument("--hta-src", required=True, help="checkout of HolisticTraceAnalysis")
    ap.add_argument("--bin", default="build/perftracker")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter with pandas")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    hta, ours = [], []
    for _ in range(args.runs):
        out = subprocess.run([args.python, "-c", HTA_LOAD, args.hta_src, args.traces],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("compare_hta: HTA failed: " + out.stderr.strip().splitlines()[-1])
        seconds, ranks = out.stdout.split()[-2:]
        hta.append(float(seconds))
        t = time.monotonic()
        subprocess.run([args.bin, "analyze", args.traces, "-q"], check=True,
                       stdout=subprocess.DEVNULL)
        ours.append(time.monotonic() - t)
        print(f"HTA load {hta[-1]:.2f} s ({ranks} ranks)   perftracker analyze {ours[-1]:.3f} s",
              flush=True)
    h, o = statistics.median(hta), statistics.median(ours)
    print(f"median: HTA load {h:.2f} s, perftracker analyze {o:.3f} s "
          f"(read, summarize and diagnose): {h / o:.0f}x")


if __name__ == "__main__":
    main()
