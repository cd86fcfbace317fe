"""Computes the HTA reference values in expected.json, once, by hand. Not run by the tests:
HTA and pandas are not dependencies of perftracker or of its tests.

  HTA_SRC=/path/to/HolisticTraceAnalysis python3 tests/data/hta/make_expected.py > tests/data/hta/expected.json

needs Debian's python3-pandas python3-plotly python3-networkx python3-pydot python3-yaml and an HTA
source tree (expected.json was made with commit f4d0062, "Add POST_PROCESSED_ANNOTATION_CATEGORY_
PATTERN to OSS HTA (#343)"). Options: TraceAnalysis(include_last_profiler_step=True), nanosecond
rounding off (HTA_DISABLE_NS_ROUNDING=1); values are HTA's totals over its iterations.

With trace names as arguments, only those are computed, and printed merged into the
expected.json there is (the others as they were):

  python tests/data/hta/make_expected.py torch213_gloo_cpu > /tmp/e.json && mv /tmp/e.json tests/data/hta/expected.json

`torch213_gloo_cpu` (tests/data/torch213: torch 2.13, CPU only) was made so, with HTA 0.5.0 from
PyPI (pip install HolisticTraceAnalysis, in a virtual environment of its own). A trace without GPU
kernels has no temporal breakdown in HTA (get_temporal_breakdown raises IndexError: it takes the
first and last of the rank's merged GPU kernels, and there are none): for such a trace only HTA's
iterations (get_iterations, its ProfilerStep numbers) are stored.

With --critical-path it prints critical_path.json instead: for each trace of CRITICAL_PATH, HTA's
lightweight critical path analysis (critical_path_analysis, HTA's defaults: no zero-weight launch
edges, no data-loading events) of every ProfilerStep on its own (annotation "ProfilerStep",
instance i), or of the whole trace where there is none (annotation ""); per step, the path's
length (the sum of its edges' weights, us) and its time by HTA's bound_by:

  HTA_SRC=... python3 tests/data/hta/make_expected.py --critical-path > tests/data/hta/critical_path.json

(made with commit f4d0062 and pandas, networkx, plotly, pydot, psutil, pyyaml from PyPI.)
"""
import json
import logging
import os
import shutil
import sys
import tempfile

os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
sys.path.insert(0, os.environ.get("HTA_SRC", "."))
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("PT_SHARED", os.path.join(HERE, "..", "..", "..", "..", "shared"))
KINETO = os.path.join(SHARED, "traces", "kineto")
TRACES = {
    "resnet_ns_rank-0": [os.path.join(KINETO, "resnet_ns_rank-0.pt.trace.json.gz")],
    "nccl_2rank_rank0": [os.path.join(KINETO, "nccl_2rank_rank0.json.gz")],
    "job128": [os.path.join(KINETO, "job128_rank-0.json.gz"), os.path.join(KINETO, "job128_rank-1.json.gz")],
    "amd_mi250": [os.path.join(HERE, "amd_mi250.json.gz")],
    "control": [os.path.join(HERE, "control.json.gz")],
    "test": [os.path.join(HERE, "test.json.gz")],
    "gpu_tail_158ms": [os.path.join(HERE, "gpu_tail_158ms.json.gz")],
    "torch213_gloo_cpu": [os.path.join(HERE, "..", "torch213", f"rank-{r}.json.gz") for r in (0, 1)],
}
# Traces without GPU kernels: HTA has no temporal breakdown of them, only their iterations.
CPU_ONLY = {"torch213_gloo_cpu"}
# One rank's trace each, for the critical path.
CRITICAL_PATH = {
    "resnet_ns_rank-0": TRACES["resnet_ns_rank-0"][0], "nccl_2rank_rank0": TRACES["nccl_2rank_rank0"][0],
    "job128_rank-0": TRACES["job128"][0], "job128_rank-1": TRACES["job128"][1],
    "alexnet_single": os.path.join(KINETO, "alexnet_single.json.gz"),
    "control": TRACES["control"][0], "test": TRACES["test"][0], "gpu_tail_158ms": TRACES["gpu_tail_158ms"][0],
    **{n: os.path.join(HERE, n + ".json.gz") for n in ("cp_event_sync", "cp_event_sync_multi_stream",
                                                      "cp_simple_add")},
}


def analysis(files):
    """HTA's TraceAnalysis of FILES, copied into a folder of their own as rank<i>_<name>."""
    d = tempfile.mkdtemp()
    for i, f in enumerate(files):
        shutil.copy(f, os.path.join(d, f"rank{i}_" + os.path.basename(f)))
    return TraceAnalysis(trace_dir=d, include_last_profiler_step=True)


def critical_paths():
    out = {}
    for name, path in CRITICAL_PATH.items():
        a = analysis([path])
        rank = a.t.get_ranks()[0]
        steps = [int(s) for s in a.t.get_iterations(rank)]
        res = {}
        for i, step in enumerate(steps or [None]):
            g, ok = a.critical_path_analysis(rank=rank, annotation="ProfilerStep" if steps else "",
                                             instance_id=i if steps else None)
            assert ok, (name, step)
            e = g.get_critical_path_breakdown()
            by = {k: float(v) for k, v in e.groupby("bound_by").duration.sum().items() if k}
            res["all" if step is None else str(step)] = {"path_us": float(e.duration.sum()), **by}
        out[name] = res
    return out


if sys.argv[1:] == ["--critical-path"]:
    print(json.dumps(critical_paths(), indent=1))
    sys.exit(0)
names = sys.argv[1:] or list(TRACES)
out = {}
if sys.argv[1:]:
    with open(os.path.join(HERE, "expected.json")) as f:
        out = json.load(f)
for name in names:
    a = analysis(TRACES[name])
    res = {}
    if name in CPU_ONLY:
        for r in sorted(a.t.get_ranks()):
            steps = [int(s) for s in a.t.get_iterations(r)]
            res[str(r)] = {"iterations": len(steps), "steps": steps}
        out[name] = res
        continue
    for _, row in a.get_temporal_breakdown(visualize=False).iterrows():
        r = int(row["rank"])
        res[str(r)] = {"iterations": len(a.t.get_iterations(r)), "idle_us": float(row["idle_time(us)"]),
                       "compute_us": float(row["compute_time(us)"]),
                       "non_compute_us": float(row["non_compute_time(us)"]),
                       "kernel_us": float(row["kernel_time(us)"])}
    out[name] = res
print(json.dumps(out, indent=1))
