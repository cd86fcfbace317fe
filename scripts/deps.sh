#!/usr/bin/env bash
# Installs what perftracker needs to build and test on Debian 12 (only what is missing).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libsimdjson-dev libfmt-dev libcli11-dev zlib1g-dev libzstd-dev libisal-dev
      libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev python3-torch python3-dev
      libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libsqlite3-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
