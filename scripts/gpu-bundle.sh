#!/usr/bin/env bash
# Builds, here, what scripts/gpu-check.sh runs on a GPU machine that cannot build it: that
# machine (the `device` tool's H200) has CUDA, torch 2.11 and Python 3.12 but none of our C++
# libraries (simdjson, fmt, gRPC, protobuf, SQLite) and no network to fetch them.
#
#   scripts/gpu-bundle.sh [PYTHON312]   -> build-gpu/ (perftracker, python/, lib/)
#
# The extension is built against the GPU machine's Python version (a pyenv 3.12 here), the
# binary and the extension find the shared libraries they were linked with in build-gpu/lib
# through an RPATH ($ORIGIN; DT_RPATH, not RUNPATH, so that it holds for their own needs too), so nothing on that machine's loader path changes and torch keeps its
# own libraries. Then, on the GPU machine: SKIP_BUILD=1 BUILD=build-gpu scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY312=${1:-/root/.pyenv/versions/3.12.1/bin/python3.12}
[ -x "$PY312" ] || { echo "gpu-bundle: no Python 3.12 at $PY312 (give its path)" >&2; exit 1; }
source scripts/tools.sh
B=build-gpu
"$CMAKE" -S . -B "$B" -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA" -DCMAKE_BUILD_TYPE=Release \
  -DPython3_EXECUTABLE="$PY312" \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -DCMAKE_MODULE_LINKER_FLAGS=-Wl,--disable-new-dtags \
  '-DCMAKE_BUILD_RPATH=$ORIGIN/lib;$ORIGIN/../../lib' >/dev/null
"$NINJA" -C "$B" perftracker pt_worker_py >/dev/null
strip "$B/perftracker" "$B"/python/perftracker/_worker*.so
rm -rf "$B/lib" && mkdir -p "$B/lib"
# Every library the two need except the C and C++ runtimes, which the GPU machine has, newer.
for f in "$B/perftracker" "$B"/python/perftracker/_worker*.so; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$B/lib/"; done
du -sh "$B/perftracker" "$B/python" "$B/lib"
