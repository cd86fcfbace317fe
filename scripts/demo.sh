#!/usr/bin/env bash
# The main job on its embedded example: installs, builds, runs a real 4-rank DDP job (gloo, CPU)
# in which rank 2 is a straggler, profiles iterations 10..30 on every rank, and asks perftracker
# what slows the job down.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
out=out/demo
rm -rf "$out" && mkdir -p "$out"
echo "training: 4 ranks, rank 2 does extra work from iteration 0 ..."
/usr/bin/python3 examples/train_ddp.py --nproc 4 --iters 30 --fault straggler --fault-rank 2 \
  --profile-dir "$out/traces" --profile-iters 10:30
build/perftracker analyze "$out/traces" --json "$out/diagnosis.json" --stats
echo "diagnosis JSON: $out/diagnosis.json"
