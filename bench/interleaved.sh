#!/usr/bin/env bash
# Two builds' benchmarks, interleaved: OLD and NEW (build folders holding reader_bench,
# diagnose_scale, server_ingest and perftracker, both RelWithDebInfo) run alternately, ROUNDS
# times, so that a machine's drifting load falls on both alike. Prints each run's figures, then
# the median of each per build. What a restructuring's "no slower" is measured with (issue 27).
#
#   bench/interleaved.sh OLD_BUILD NEW_BUILD [ROUNDS=3]
#
# An old build: `git worktree add /tmp/old REV && cd /tmp/old && scripts/build.sh` (or copy the
# four binaries out of build/ before rebuilding it).
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
for d in "$old" "$new"; do
  for b in reader_bench diagnose_scale server_ingest perftracker; do
    [[ -x "$d/$b" ]] || { echo "interleaved.sh: $d/$b is missing (build it first)"; exit 2; }
  done
done
out=$(mktemp)
for ((round = 1; round <= rounds; round++)); do
  for v in old new; do
    d=$old; [[ $v == new ]] && d=$new
    "$d/reader_bench" 2>&1 | awk -v v=$v '/^BM_/ {print v, $1, $2, "ms"}'
    "$d/diagnose_scale" --workers 10240 --layout tp=8,pp=4 --fault slow-gpu@rank=77 2>&1 |
      awk -v v=$v '/^diagnose / {print v, "diagnose_10240", $2, "s"}'
    "$d/server_ingest" --agents 1000 --bin "$d/perftracker" 2>&1 |
      awk -v v=$v '/^upload:/ {for (i = 1; i <= NF; i++) if ($i == "in") {print v, "ingest_1000", $(i + 1), "s"; break}}'
  done
done | tee "$out"
echo "medians over $rounds rounds (old -> new):"
python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, name, value, unit = line.split()
    runs[(name, unit)].append((v, float(value)))
for (name, unit), vals in runs.items():
    med = {v: statistics.median(x for w, x in vals if w == v) for v in ("old", "new")}
    print(f"  {name}: {med['old']:.3f} -> {med['new']:.3f} {unit}")
PY
rm -f "$out"
