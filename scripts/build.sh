#!/usr/bin/env bash
# Configures and builds perftracker into build/ (Release with debug info, warnings as errors).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools.sh
pt_configure build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPERFTRACKER_WERROR=ON \
  -DPython3_EXECUTABLE=/usr/bin/python3
"$NINJA" -C build
