#!/usr/bin/env bash
# Configures and builds perftracker into build/ (Release with debug info, warnings as errors).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPERFTRACKER_WERROR=ON \
  -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
ninja -C build
