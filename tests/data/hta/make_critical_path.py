"""Computes HTA's critical path references in critical_path.json, once, by hand. Not run by the
tests: HTA and pandas are not dependencies of perftracker or of its tests.

  HTA_SRC=/path/to/HolisticTraceAnalysis python3 tests/data/hta/make_critical_path.py > tests/data/hta/critical_path.json

needs pandas, networkx, plotly, pydot, psutil and pyyaml (pip install --target DIR ..., DIR on
PYTHONPATH) and an HTA source tree (critical_path.json was made with commit f4d0062, as
expected.json). For each trace, HTA's lightweight critical path analysis
(TraceAnalysis.critical_path_analysis) of every ProfilerStep on its own (annotation
"ProfilerStep", instance i), or of the whole trace where there is none (annotation ""), with HTA's
defaults (no zero-weight launch edges, no data-loading events); stored per step: the path's
length (the sum of its edges' weights, us) and its time by HTA's bound_by.
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
    "resnet_ns_rank-0": os.path.join(KINETO, "resnet_ns_rank-0.pt.trace.json.gz"),
    "nccl_2rank_rank0": os.path.join(KINETO, "nccl_2rank_rank0.json.gz"),
    "job128_rank-0": os.path.join(KINETO, "job128_rank-0.json.gz"),
    "job128_rank-1": os.path.join(KINETO, "job128_rank-1.json.gz"),
    "alexnet_single": os.path.join(KINETO, "alexnet_single.json.gz"),
    "control": os.path.join(HERE, "control.json.gz"),
    "test": os.path.join(HERE, "test.json.gz"),
    "gpu_tail_158ms": os.path.join(HERE, "gpu_tail_158ms.json.gz"),
    "cp_event_sync": os.path.join(HERE, "cp_event_sync.json.gz"),
    "cp_event_sync_multi_stream": os.path.join(HERE, "cp_event_sync_multi_stream.json.gz"),
    "cp_simple_add": os.path.join(HERE, "cp_simple_add.json.gz"),
}

out = {}
for name, path in TRACES.items():
    d = tempfile.mkdtemp()
    shutil.copy(path, os.path.join(d, "rank0_" + os.path.basename(path)))
    a = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
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
    shutil.rmtree(d)
print(json.dumps(out, indent=1))
