#!/usr/bin/env bash
# The main job on its embedded default: installs, builds, and runs a real 4-rank DDP job (gloo,
# CPU) under `perftracker run`, which starts the server and the node agent inside the launcher.
# Once every rank is past its warm-up, a baseline window profiles the healthy job (nothing to
# report). From iteration 130 rank 2 does extra work every step; the in-worker detector sees the
# job slow down, every rank profiles the same 10 iterations, and the diagnosis appears on this
# terminal, in out/demo/report.html and in out/demo/diagnosis.json. Every number is the product's default.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
out=out/demo
rm -rf "$out"
echo "training: 4 ranks, rank 2 becomes a straggler at iteration 130 ..."
build/perftracker run --nproc 4 --report-dir "$out" -- \
  /usr/bin/python3 examples/train_ddp.py --iters 320 --fault straggler --fault-rank 2 \
  --fault-start 130 --fault-work 8
echo "report: $out/report.html (open it in a browser); diagnosis JSON: $out/diagnosis.json"
echo "windows: $out/windows/ (each with report.html; the latest with trace.json.gz for ui.perfetto.dev)"
