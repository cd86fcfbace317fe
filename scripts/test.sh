#!/usr/bin/env bash
# Sets up, builds and runs every test: unit tests, integration tests with real torch, and a short
# fixed-length fuzz run of the trace reader.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
# The fuzzer needs clang's libFuzzer: its own build folder.
CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPERFTRACKER_FUZZ=ON \
  -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
ninja -C build-fuzz trace_reader_fuzz
mkdir -p build-fuzz/corpus && cp -n fuzz/corpus/* build-fuzz/corpus/ 2>/dev/null || true
build-fuzz/trace_reader_fuzz -runs=20000 -max_len=4096 -seed=1 build-fuzz/corpus >build-fuzz/fuzz.log 2>&1 \
  || { tail -40 build-fuzz/fuzz.log; echo "fuzz run failed"; exit 1; }
echo "fuzz: 20000 runs clean"
ctest --test-dir build --output-on-failure -j2
