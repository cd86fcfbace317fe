#!/usr/bin/env bash
# Writes every output that a restructuring must leave byte-identical (issue 17) into OUT:
# the diagnosis (text, JSON, HTML) of each shared trace job, per-rank summaries, `show`
# breakdowns, the compare pair's diff, simulated jobs (summaries, traces, their diagnosis)
# and a Perfetto export. Compare two trees' outputs with `diff -r OUT_A OUT_B`.
#
#   scripts/golden.sh BUILD_DIR OUT
set -euo pipefail
bin=$(cd "$1" && pwd)/perftracker
out=$(realpath -m "$2")
traces=$(cd "$(dirname "$0")/../../shared/traces/kineto" && pwd)
rm -rf "$out" && mkdir -p "$out"
run() {  # NAME CMD...: stdout and stderr to OUT/NAME.txt, the exit status too
  local name=$1
  shift
  set +e
  "$@" >"$name.txt" 2>&1
  echo "exit $?" >>"$name.txt"
  set -e
}
# Outputs name files by path: everything runs in OUT with relative paths (traces/ links to the
# shared traces), so two trees' outputs compare equal wherever OUT is.
cd "$out"
ln -s "$traces" traces
declare -A jobs=(
  [job128]="traces/job128_rank-0.json.gz traces/job128_rank-1.json.gz"
  [nccl]="traces/nccl_2rank_rank0.json.gz"
  [alexnet]="traces/alexnet_single.json.gz"
  [cpu34]="traces/cpu_only_rank-34.pt.trace.json.gz"
  [resnet]="traces/resnet_ns_rank-0.pt.trace.json.gz"
  [triton]="traces/single_rank_triton.json.gz"
)
for j in "${!jobs[@]}"; do
  # shellcheck disable=SC2086
  run "analyze-$j" "$bin" analyze ${jobs[$j]} --json "analyze-$j.json" --html "analyze-$j.html"
  # shellcheck disable=SC2086
  run "show-$j" "$bin" show ${jobs[$j]} --top 15 --json "show-$j.json"
  mkdir -p "summaries-$j"
  # shellcheck disable=SC2086
  set -- ${jobs[$j]}
  if [[ $# -eq 1 ]]; then  # one trace: -o names the file
    run "summarize-$j" "$bin" summarize "$1" -o "summaries-$j/rank.summary"
  else
    run "summarize-$j" "$bin" summarize "$@" -o "summaries-$j"
  fi
  run "diagnose-$j" "$bin" diagnose "summaries-$j" --json "diagnose-$j.json"
done
run diff-pair "$bin" diff traces/compare_pair/base.json.gz traces/compare_pair/test.json.gz --json "diff-pair.json"
run export-job128 "$bin" export-trace traces/job128_rank-0.json.gz traces/job128_rank-1.json.gz -o "export-job128.json"
sim() {  # NAME SIMULATE-ARGS...
  local name=$1
  shift
  run "sim-$name" "$bin" simulate "$@" -o "sim-$name"
  sed -i -E 's/, [0-9.]+ s$/, (seconds elided)/' "sim-$name.txt"  # wall-clock time
  run "sim-$name-diagnose" "$bin" diagnose "sim-$name/summaries" --json "sim-$name-diagnosis.json" \
    --html "sim-$name.html"
}
sim gpu --workers 16 --layout tp=8,pp=2 --fault slow-gpu@rank=5 --seed 1 --traces --iterations 6 --layers 4
sim link --workers 256 --layout tp=8,pp=4 --fault slow-nic@node=3 --seed 2
sim switch --workers 256 --layout tp=8,pp=4 --fault slow-switch@switch=1 --seed 6
sim nvlink --workers 128 --layout tp=8,pp=2 --fault slow-nvlink@node=2 --fault gc@rank=9 --seed 7
sim mixed --workers 512 --layout tp=8,pp=2,ep=2 --fault slow-gpu@rank=77,size=0.25,every=4 \
  --fault slow-loader@rank=3 --fault cpu-contention@rank=300 --seed 3
sim hang --workers 16 --layout tp=4,pp=2 --fault hang@rank=6 --seed 8 --traces --iterations 6 --layers 4
sim clean --workers 128 --layout tp=4,pp=2 --seed 4 --noise 0.05
sim big --workers 4096 --layout tp=8,pp=8 --fault slow-gpu@rank=1234 --seed 5
run diff-sim "$bin" diff sim-clean/summaries sim-gpu/summaries --json diff-sim.json
echo "golden: $(find "$out" -type f | wc -l) files in $out"
