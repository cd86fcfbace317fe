#!/usr/bin/env bash
# The main job on its embedded default: installs, builds, and runs a real 4-rank DDP job (gloo,
# CPU) under `perftracker run`, which starts the server and the node agent inside the launcher.
# From iteration 80 rank 2 does extra work every step; the in-worker detector sees the job slow
# down, every rank profiles the same 10 iterations, and the diagnosis appears on this terminal
# and in out/demo/diagnosis.json.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
out=out/demo
rm -rf "$out"
# Four ranks share this machine's cores, so healthy iterations already vary by ~25%: the demo
# fires at a 40% slowdown (the default, 5%, suits a job that owns its machines).
export PERFTRACKER_SLOWDOWN_RATIO=${PERFTRACKER_SLOWDOWN_RATIO:-0.4}
echo "training: 4 ranks, rank 2 becomes a straggler at iteration 80 ..."
build/perftracker run --nproc 4 --report-dir "$out" -- \
  /usr/bin/python3 examples/train_ddp.py --iters 260 --fault straggler --fault-rank 2 \
  --fault-start 80 --fault-work 8
echo "diagnosis JSON: $out/diagnosis.json (windows: $out/windows/, traces: $out/traces/)"
