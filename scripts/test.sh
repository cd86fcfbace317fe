#!/usr/bin/env bash
# Sets up, builds and runs every test: unit tests, integration tests with real torch, a short
# fixed-length fuzz run of each parser (traces, summaries, worker messages, diagnoses read back,
# Flight Recorder dumps),
# the check that scripts/deps.sh installs every package the build and the tests used
# (scripts/check_deps.py) and the size limits of scripts/check_structure.py.
#
# No test skips silently: a skip shows in ctest's summary, and with CI=true (.ci/run sets it) a
# test that would skip for a missing part fails instead. The time of each test is printed at the
# end, slowest first.
#
# scripts/test.sh --quick: for day-to-day work, the unit tests, the offline path's tests and one
# online run (ctest -L quick; CMakeLists.txt says which), without the fuzz build and runs.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
# Each phase's wall time, printed at the end with the tests' (where the command's time goes:
# the setup and the builds, or the tests).
phases=()
phase_start=$SECONDS
phase_done() {
  phases+=("$1 $((SECONDS - phase_start)) s")
  phase_start=$SECONDS
}
scripts/deps.sh
phase_done setup
scripts/build.sh
phase_done build
source scripts/tools.sh

# ctest's JUnit file holds each test's time: printed slowest first once the run ends, pass or
# fail; then the phases'.
print_test_times() {
  phase_done ctest
  /usr/bin/python3 scripts/test_times.py build/Testing/times.xml || true
  local IFS=,
  echo "phases (wall time):${phases[*]/#/ }; total $SECONDS s"
}
if [ "$quick" = 1 ]; then
  rm -f build/Testing/times.xml
  trap print_test_times EXIT
  "$CTEST" --test-dir build --output-on-failure -j2 -L quick --output-junit Testing/times.xml
  exit 0
fi
# The fuzzer needs clang's libFuzzer: its own build folder.
# binutils' ar and ranlib (as the main build uses): with clang, CMake would pick llvm-ar where
# llvm-14 happens to be installed, and the build would differ between machines.
# Line tables only (what the sanitizers' reports name): a fifth less compile time than -g.
CXX=clang++ pt_configure build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPERFTRACKER_FUZZ=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
  -DCMAKE_AR=/usr/bin/ar -DCMAKE_RANLIB=/usr/bin/ranlib \
  -DPython3_EXECUTABLE=/usr/bin/python3
"$NINJA" -C build-fuzz trace_reader_fuzz summary_fuzz worker_message_fuzz diagnosis_reader_fuzz \
  flight_recorder_fuzz
phase_done "fuzz build"
# Each target: a fixed seed and run count from its committed corpus, copied afresh each time
# (libFuzzer adds what it finds to the folder it is given: a kept folder grew to 1,500 inputs
# and made each run slower and different from the last). -rss_limit_mb: a parser that lets
# input make it hold more than this fails the run. Two run at once, one per core (each is one
# thread): 25-30 s one after another.
fuzz_run() {
  local t=$1
  rm -rf "build-fuzz/corpus/$t"
  mkdir -p "build-fuzz/corpus/$t"
  cp "fuzz/corpus/$t"/* "build-fuzz/corpus/$t/" 2>/dev/null || true  # some start from nothing
  if "build-fuzz/${t}_fuzz" -runs=20000 -max_len=4096 -seed=1 -rss_limit_mb=512 \
      "build-fuzz/corpus/$t" >"build-fuzz/$t.log" 2>&1; then
    echo "fuzz: $t, 20000 runs clean"
  else
    tail -40 "build-fuzz/$t.log"
    echo "fuzz run of $t failed"
    return 1
  fi
}
fuzz_failed=0
fuzz_pids=()
for t in trace_reader summary worker_message diagnosis_reader flight_recorder; do
  if [ "${#fuzz_pids[@]}" -ge 2 ]; then
    wait "${fuzz_pids[0]}" || fuzz_failed=1
    fuzz_pids=("${fuzz_pids[@]:1}")
  fi
  fuzz_run "$t" &
  fuzz_pids+=($!)
done
for pid in "${fuzz_pids[@]}"; do
  wait "$pid" || fuzz_failed=1
done
[ "$fuzz_failed" = 0 ] || exit 1
phase_done "fuzz runs"
/usr/bin/python3 scripts/check_deps.py --build build --build build-fuzz
# Sizes that keep the code changeable: no file in src/ over 900 lines, no function over 150.
/usr/bin/python3 scripts/check_structure.py
phase_done checks
rm -f build/Testing/times.xml
trap print_test_times EXIT
# Everything but online_smoke (test_online_run runs the same case).
"$CTEST" --test-dir build --output-on-failure -j2 -LE smoke --output-junit Testing/times.xml
