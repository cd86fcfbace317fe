#!/usr/bin/env bash
# Writes every output that a restructuring must leave byte-identical (issue 17) into OUT:
# the diagnosis (text, JSON, HTML) of each shared trace job, per-rank summaries, `show`
# breakdowns, the compare pair's diff, simulated jobs (summaries, traces, their diagnosis)
# and a Perfetto export. Compare two trees' outputs with `diff -r OUT_A OUT_B`.
#
#   scripts/golden.sh BUILD_DIR OUT
set -euo pipefail
bin=$(cd "$1" && pwd)/perftracker
out=$2
traces=$(cd "$(dirname "$0")/../../shared/traces/kineto" && pwd)
rm -rf "$out" && mkdir -p "$out"
run() {  # NAME CMD...: stdout and stderr to OUT/NAME.txt, the exit status too
  local name=$1
  shift
  set +e
  "$@" >"$out/$name.txt" 2>&1
  echo "exit $?" >>"$out/$name.txt"
  set -e
}
# The diagnosis names files by path: run from the traces folder so the paths are relative.
cd "$traces"
declare -A jobs=(
  [job128]="job128_rank-0.json.gz job128_rank-1.json.gz"
  [nccl]="nccl_2rank_rank0.json.gz"
  [alexnet]="alexnet_single.json.gz"
  [cpu34]="cpu_only_rank-34.pt.trace.json.gz"
  [resnet]="resnet_ns_rank-0.pt.trace.json.gz"
  [triton]="single_rank_triton.json.gz"
)
for j in "${!jobs[@]}"; do
  # shellcheck disable=SC2086
  run "analyze-$j" "$bin" analyze ${jobs[$j]} --json "$out/analyze-$j.json" --html "$out/analyze-$j.html"
  # shellcheck disable=SC2086
  run "show-$j" "$bin" show ${jobs[$j]} --top 15 --json "$out/show-$j.json"
  mkdir -p "$out/summaries-$j"
  # shellcheck disable=SC2086
  set -- ${jobs[$j]}
  if [[ $# -eq 1 ]]; then  # one trace: -o names the file
    run "summarize-$j" "$bin" summarize "$1" -o "$out/summaries-$j/rank.summary"
  else
    run "summarize-$j" "$bin" summarize "$@" -o "$out/summaries-$j"
  fi
  run "diagnose-$j" "$bin" diagnose "$out/summaries-$j" --json "$out/diagnose-$j.json"
done
run diff-pair "$bin" diff compare_pair/base.json.gz compare_pair/test.json.gz --json "$out/diff-pair.json"
run export-job128 "$bin" export-trace job128_rank-0.json.gz job128_rank-1.json.gz -o "$out/export-job128.json"
cd "$out"
sim() {  # NAME SIMULATE-ARGS...
  local name=$1
  shift
  run "sim-$name" "$bin" simulate "$@" -o "sim-$name"
  run "sim-$name-diagnose" "$bin" diagnose "sim-$name/summaries" --json "sim-$name-diagnosis.json" \
    --html "sim-$name.html"
}
sim gpu --workers 64 --layout tp=8,pp=2 --fault slow-gpu@rank=5 --seed 1 --traces
sim link --workers 256 --layout tp=8,pp=4 --fault slow-nic@node=3 --seed 2
sim switch --workers 256 --layout tp=8,pp=4 --fault slow-switch@switch=1 --seed 6
sim nvlink --workers 128 --layout tp=8,pp=2 --fault slow-nvlink@node=2 --fault gc@rank=9 --seed 7
sim mixed --workers 512 --layout tp=8,pp=2,ep=2 --fault slow-gpu@rank=77,size=0.25,every=4 \
  --fault slow-loader@rank=3 --fault cpu-contention@rank=300 --seed 3
sim hang --workers 32 --layout tp=4,pp=2 --fault hang@rank=6 --seed 8 --traces
sim clean --workers 128 --layout tp=4,pp=2 --seed 4 --noise 0.05
sim big --workers 4096 --layout tp=8,pp=8 --fault slow-gpu@rank=1234 --seed 5
run diff-sim "$bin" diff sim-clean/summaries sim-gpu/summaries --json diff-sim.json
echo "golden: $(find "$out" -type f | wc -l) files in $out"
