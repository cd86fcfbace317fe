#!/usr/bin/env bash
# Installs every Debian 12 package that perftracker's build, its tests and the demo need (only
# what is missing), then the Python virtual environment .venv: Debian's /usr/bin/python3 with
# exactly the pinned set of scripts/requirements.txt, torch 2.13 among it (the primary torch; the
# legacy torch 1.13 is Debian's python3-torch under /usr/bin/python3). A fresh machine has nothing else: scripts/check_deps.py, run by .ci/run, proves
# that every header, library, program and Python module the build and the tests read comes from a
# package listed here or pulled in by one, and CMake names the line below that installs a missing
# part. Keep one package group per line, and no parentheses in the comments: both tools read the
# pkgs array as text.
set -euo pipefail
pkgs=(
  # compilers and build tools; ccache keeps compiled objects between builds of the same folder
  build-essential cmake ninja-build pkg-config ccache
  # the offline core: JSON reader, formatting, command line, gzip and zstd
  libsimdjson-dev libfmt-dev libcli11-dev zlib1g-dev libzstd-dev libisal-dev
  # unit tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the fuzzers: clang with its libFuzzer and sanitizer runtimes
  clang libclang-rt-14-dev
  # the in-worker collector: a CPython extension, and real torch for the tests and the demo:
  # torch 1.13, the legacy version, from Debian; torch 2.13 in .venv, made with python3-venv
  python3-dev python3-torch python3-venv
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

# .venv: torch 2.13 for the demo and the integration tests. Made from /usr/bin/python3, the
# Python the CPython extension is built for, so that the extension loads in it; made afresh when
# its Python is another one. pip runs only when scripts/requirements.txt changed since the last
# complete install, which .venv/.requirements.sha256 records; every package it names is pinned,
# and the file is also the constraints of whatever pip adds. The torch pinned is the CPU build:
# where pip finds no CPU wheel of it, point it at one, e.g.
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu; a CUDA build fails the check below.
cd "$(dirname "$0")/.."
venv=.venv
req=scripts/requirements.txt
want_torch=2.13.0
py_id='import sys; print(sys.version)'
if [[ ! -x $venv/bin/python ]] || [[ $("$venv/bin/python" -c "$py_id" 2>/dev/null) != "$(/usr/bin/python3 -c "$py_id")" ]]; then
  echo "making $venv with /usr/bin/python3"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
fi
sum=$(sha256sum "$req" | cut -d' ' -f1)
if [[ $(cat "$venv/.requirements.sha256" 2>/dev/null) != "$sum" ]]; then
  echo "installing $req into $venv"
  rm -f "$venv/.requirements.sha256"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" -c "$req"
  "$venv/bin/pip" check >/dev/null || { "$venv/bin/pip" check; echo "deps.sh: $venv is inconsistent" >&2; exit 1; }
  # Imported once after an install: a torch that does not load fails here.
  got=$("$venv/bin/python" -c 'import torch; print(torch.__version__, torch.version.cuda or "cpu")') || {
    echo "deps.sh: torch does not import in $venv" >&2; exit 1; }
  [[ ${got%% *} == "$want_torch" || ${got%% *} == "$want_torch"+* ]] || { echo "deps.sh: $venv has torch $got, not $want_torch" >&2; exit 1; }
  [[ $got == *" cpu" ]] || { echo "deps.sh: $venv has a CUDA build of torch, $got: install the CPU build" >&2; exit 1; }
  echo "$sum" >"$venv/.requirements.sha256"
fi
# Every run, cheaply, without importing it: the installed torch is still the one wanted.
got=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || echo none)
if [[ ${got%%+*} != "$want_torch" ]]; then
  echo "deps.sh: $venv has torch $got, not $want_torch: remove $venv/.requirements.sha256 and run again" >&2
  exit 1
fi
