#!/usr/bin/env bash
# One command for a machine with a GPU (torch 2.x): builds perftracker against the python3 that
# has torch, then runs the online path end to end on the GPU and the offline path on its Kineto
# traces. Results (reports, logs, a summary line per check) go to $OUT (default out/gpu-check).
#
#   1. online, clean: 2 ranks share the GPU (gloo), a window forced at iteration 30
#      (--profile-at-iteration; it opens 2 s ahead, ~500 of the 4 ms iterations of the default
#      model on an H200, so the job runs 1500): the window must hold both ranks and GPU kernels,
#      and every rank's window figures the agent's NVML sample (SM clock, clock-event reasons);
#   2. online, GPU-side fault: needless torch.cuda.synchronize() + .item() each step from
#      iteration 700 (after the baseline window), every number the default; one rank on NCCL, a
#      model whose step is GPU-bound (~20 ms) and a loader in worker processes: two ranks
#      sharing one GPU over gloo copy every gradient through the CPU, which syncs anyway, and a
#      4 ms step's host work, 3x longer profiled, hides the sync (seen on the H200): expect a
#      "sync" finding;
#   3. offline: torch.profiler (Kineto, CUDA activity) traces of 2 ranks -> perftracker analyze,
#      GPU busy/idle breakdown present;
#   4. `perftracker run -- torchrun --nproc-per-node 2 ...` with a straggler on rank 1 from
#      iteration 130 (torchrun starts the ranks; they find the launcher's agent through the
#      environment; the baseline window, ~500 iterations on, already holds the straggler);
#   5. a GPU memory leak on rank 1 (CUDA tensors kept every step): memory_growth of its GPU (the
#      series PyTorch's allocated bytes, the allocator's reserved bytes in its evidence), named
#      where the tensors are kept (train_step);
#   6. CUDA out of memory on rank 0: rank_crash "out of GPU memory" with the allocator's figures,
#      and its snapshot at the failure saved beside the report (REPORT/memory);
#   7. what a window costs the GPU job with every default (issue 38: at most one step):
#      bench/online_overhead.py --shape gpu, one rank, two interleaved pairs of a plain run and a
#      `perftracker run` (its baseline window), the iterations lost during and after each window.
#
# It installs nothing (the GPU machine may be offline): the build needs cmake, a C++20 compiler,
# simdjson, fmt, CLI11, zlib, GoogleTest; gRPC/protobuf/SQLite for the online checks. Where the
# machine has none of them, build here with scripts/gpu-bundle.sh and run with SKIP_BUILD=1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-$(command -v python3)}
log() { echo "gpu-check: $*" | tee -a "$OUT/summary.txt"; }

"$PY" -c "import torch; assert torch.cuda.is_available(); print('torch', torch.__version__, torch.cuda.get_device_name(0))" \
  2>&1 | tee -a "$OUT/summary.txt" || { log "FAIL: no CUDA torch under $PY"; exit 1; }

BUILD=${BUILD:-build-gpu}
# SKIP_BUILD=1: BUILD holds what scripts/gpu-bundle.sh built elsewhere (a GPU machine without
# our C++ libraries); each check's time limit is T seconds (a device lease is short).
T=${CHECK_TIMEOUT:-300}
if [ "${SKIP_BUILD:-0}" = 1 ]; then
  [ -x "$BUILD/perftracker" ] || { log "FAIL: SKIP_BUILD=1 but no $BUILD/perftracker"; exit 1; }
elif ! { cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE="$PY" \
         >"$OUT/cmake.log" 2>&1 && cmake --build "$BUILD" -j"$(nproc)" >"$OUT/build.log" 2>&1; }; then
  log "FAIL: build (see $OUT/cmake.log, $OUT/build.log)"
  tail -20 "$OUT/build.log"
  exit 1
fi
PT="$BUILD/perftracker"
"$PT" run --help >/dev/null 2>&1 || { log "FAIL: built without the online path (gRPC/protobuf/SQLite missing)"; exit 1; }
log "built $PT"

status=0
check() {  # name, python assertion over the diagnosis d (and window w when present)
  local name=$1 report=$2 expr=$3
  if "$PY" - "$report" "$expr" <<'EOF'
import json, os, sys
report, expr = sys.argv[1], sys.argv[2]
d = json.load(open(os.path.join(report, "diagnosis.json")))
wins = sorted(os.listdir(os.path.join(report, "windows"))) if os.path.isdir(os.path.join(report, "windows")) else []
w = json.load(open(os.path.join(report, "windows", wins[-1], "diagnosis.json"))) if wins else None
top = d["findings"][0] if d["findings"] else {}
ok = eval(expr)
print(("PASS" if ok else "FAIL"), expr, "| top:", top.get("summary", "(none)")[:200])
sys.exit(0 if ok else 1)
EOF
  then log "$name: PASS"; else log "$name: FAIL"; status=1; fi
}

# 1. online, clean, forced window.
R1="$OUT/online-clean"; rm -rf "$R1"
timeout "$T" "$PT" run --nproc 2 --report-dir "$R1" --baseline-window off --profile-at-iteration 30 -- \
  "$PY" examples/train_ddp.py --device cuda --iters 1500 >"$OUT/online-clean.log" 2>&1
echo "exit $?" >>"$OUT/online-clean.log"
check online-clean "$R1" 'w is not None and w["job"]["ranks"] == [0, 1]'
"$PT" show "$R1/traces/window-1" --top 15 >"$OUT/online-clean-show.txt" 2>&1
# The agent's NVML sample (issue 24) reaches the server with the window: the GPU's SM clock and
# clock-event reasons are what GpuThrottledRule reads; the rank's GPU is its kernels' device.
if "$PY" - "$R1/perftracker.db" >>"$OUT/summary.txt" 2>&1 <<'EOF2'
import json, sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("select rank, hardware_json from rank_summaries").fetchall()
hw = [json.loads(h or "{}").get("values", {}) for _, h in rows]  # {"nvml": state, "values": {...}}
keys = sorted({k for h in hw for k in h if k.startswith("gpu")})
print("nvml metrics:", keys[:12], "ecc/replay:", [k for k in keys if "ecc" in k or "replay" in k])
sys.exit(0 if hw and all(any(k.endswith("sm_clock_mhz") for k in h) and any(k.endswith("clock_event_reasons") for k in h) for h in hw) else 1)
EOF2
then log "nvml-metrics: PASS"; else log "nvml-metrics: FAIL"; status=1; fi

# 2. online, needless sync on every rank.
R2="$OUT/online-sync"; rm -rf "$R2"
timeout "$T" "$PT" run --nproc 1 --report-dir "$R2" -- \
  "$PY" examples/train_ddp.py --device cuda --iters 1500 --hidden 8192 --layers 4 --batch 1024 \
  --loader-workers 2 --fault sync --fault-rank all --fault-start 700 >"$OUT/online-sync.log" 2>&1
echo "exit $?" >>"$OUT/online-sync.log"
check online-sync "$R2" 'any(f["category"] == "sync" for f in d["findings"])'

# 3. offline on Kineto traces with CUDA activity.
T3="$OUT/offline-traces"; rm -rf "$T3"
timeout "$T" "$PY" examples/train_ddp.py --device cuda --nproc 2 --iters 30 --profile-dir "$T3" --profile-iters 10:30 \
  >"$OUT/offline.log" 2>&1
"$PT" analyze "$T3" --json "$OUT/offline-diagnosis.json" --stats >>"$OUT/offline.log" 2>&1
"$PT" show "$T3" --top 15 >"$OUT/offline-show.txt" 2>&1
if grep -q "gpu per iteration" "$OUT/offline-show.txt"; then log "offline-gpu: PASS"; else log "offline-gpu: FAIL"; status=1; fi
# 4. torchrun under `perftracker run` (issue 16): the command starts the ranks itself (no
# --nproc); Debian's torch 1.13 torchrun fails on Python 3.11, so it is checked here, on torch 2.x.
R4="$OUT/torchrun"; rm -rf "$R4"
TORCHRUN=${TORCHRUN:-$("$PY" -c 'import shutil, sys, os; print(shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun"))')}
timeout "$T" "$PT" run --report-dir "$R4" -- "$TORCHRUN" --standalone --nproc-per-node 2 \
  examples/train_ddp.py --device cuda --iters 2000 --fault straggler --fault-rank 1 --fault-start 130 \
  --fault-work 8 >"$OUT/torchrun.log" 2>&1
echo "exit $?" >>"$OUT/torchrun.log"
check torchrun "$R4" 'any(f["ranks"] == [1] for f in d["findings"])'
# 5. GPU memory (issue 37): rank 1 keeps 64 MiB of CUDA tensors every step from iteration 200:
# its GPU memory (PyTorch's allocated bytes, the collector's torch.cuda figures with every
# report; NVML's per-process usage where they are absent) grows, named with the GPU's free
# memory and the allocator's unused cache as the limit.
R5="$OUT/gpu-leak"; rm -rf "$R5"
timeout "$T" "$PT" run --nproc 2 --report-dir "$R5" -- \
  "$PY" examples/train_ddp.py --device cuda --iters 1200 --step-sleep-ms 5 --fault gpu-leak \
  --fault-rank 1 --fault-start 200 --fault-mb 64 >"$OUT/gpu-leak.log" 2>&1
echo "exit $?" >>"$OUT/gpu-leak.log"
check gpu-leak "$R5" 'any(f["category"] == "memory_growth" and f["ranks"] == [1] and {**f.get("evidence_text", {}), **f.get("evidence", {})}.get("memory") == "gpu" for f in d["findings"] + [g for w in [w] if w for g in w["findings"]])'
# ... named where the CUDA tensors are kept: the growth's window records rank 1's allocations.
check gpu-leak-torch "$R5" 'any(f["category"] == "memory_growth" and f.get("evidence_text", {}).get("gpu_series") == "torch.cuda.memory_allocated" and f.get("evidence", {}).get("cuda_reserved_bytes", 0) > 0 for f in d["findings"] + [g for w in [w] if w for g in w["findings"]])'
check gpu-leak-place "$R5" 'any(f["category"] == "memory_growth" and "train_step" in f.get("evidence", {}).get("kept_at", "") for f in d["findings"] + [g for w in [w] if w for g in w["findings"]])'
# 6. CUDA out of memory: rank 0 keeps 8 GiB a step until the allocator fails; the job's
# diagnosis says "out of GPU memory" with the allocator's figures.
R6="$OUT/gpu-oom"; rm -rf "$R6"
timeout "$T" "$PT" run --nproc 1 --report-dir "$R6" -- \
  "$PY" examples/train_ddp.py --device cuda --iters 400 --fault gpu-leak --fault-rank 0 \
  --fault-start 50 --fault-mb 8192 >"$OUT/gpu-oom.log" 2>&1
echo "exit $?" >>"$OUT/gpu-oom.log"
check gpu-oom "$R6" 'any(f["category"] == "rank_crash" and "out of GPU memory" in f["summary"] for f in d["findings"])'
# ... and the allocator's snapshot at the failure is saved beside the report, named in it, and
# is what PyTorch's memory_viz reads (a pickled torch.cuda.memory._snapshot()).
check gpu-oom-snapshot "$R6" 'any(f["category"] == "rank_crash" and os.path.isfile({**f.get("evidence_text", {}), **f.get("evidence", {})}.get("memory_snapshot", "")) and "segments" in __import__("pickle").load(open({**f.get("evidence_text", {}), **f.get("evidence", {})}["memory_snapshot"], "rb")) for f in d["findings"])'
# 7. The window's cost on the GPU (issue 38): its iterations lost, during it and in the 20 steps
# after, against the 20 before; two pairs, each run 1500 steps of ~20 ms (the baseline window
# opens about 2 s after the warm-up, ~100 steps).
timeout "$T" "$PY" bench/online_overhead.py --pairs 0 --windows 0 --collective-calls 0 --defaults-pairs 2 \
  --shape gpu --nproc 1 --iters 1500 --python "$PY" --bin "$PT" >"$OUT/window-cost.log" 2>&1
echo "exit $?" >>"$OUT/window-cost.log"
lost=$(sed -n 's/^per window .*; median \([-0-9.]*\) iterations.*/\1/p' "$OUT/window-cost.log")
grep "^pair\|^per window" "$OUT/window-cost.log" | tee -a "$OUT/summary.txt"
if [ -n "$lost" ] && awk -v x="$lost" 'BEGIN { exit !(x <= 1.0) }'; then
  log "window-cost: PASS (median $lost iterations a window)"
else
  log "window-cost: FAIL (median ${lost:-unmeasured} iterations a window; at most 1: $OUT/window-cost.log)"
  status=1
fi
exit $status
