#!/usr/bin/env bash
# Installs every Debian 12 package that perftracker's build, its tests and the demo need (only
# what is missing). A fresh machine has nothing else: scripts/check_deps.py, run by .ci/run, proves
# that every header, library, program and Python module the build and the tests read comes from a
# package listed here or pulled in by one, and CMake names the line below that installs a missing
# part. Keep one package group per line, and no parentheses in the comments: both tools read the
# pkgs array as text.
set -euo pipefail
pkgs=(
  # compilers and build tools
  build-essential cmake ninja-build pkg-config
  # the offline core: JSON reader, formatting, command line, gzip and zstd
  libsimdjson-dev libfmt-dev libcli11-dev zlib1g-dev libzstd-dev libisal-dev
  # unit tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the fuzzers: clang with its libFuzzer and sanitizer runtimes
  clang libclang-rt-14-dev
  # the in-worker collector: a CPython extension, and real torch for the tests and the demo
  python3-dev python3-torch
  # the online path: gRPC service, protobuf messages, SQLite store
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libsqlite3-dev
  # integration tests: network namespaces and veth links, process lookup, TLS certificates
  iproute2 procps openssl
  # report tests: headless Chromium loads the HTML report, promtool checks the metrics
  chromium prometheus
  # launcher tests: a real Slurm cluster on this machine, scripts/slurm_local.sh
  slurm-wlm munge
  # the structure check: Universal Ctags gives each function's end line, scripts/check_structure.py
  universal-ctags
)
if [[ ${1:-} == --list ]]; then  # print the packages, install nothing
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi
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
