#!/usr/bin/env bash
# Runs the README's two commands on a fresh Debian 12 machine: a minimal root made with
# debootstrap, holding a clone of this repository's HEAD and the shared/ folder beside it,
# entered with chroot. This machine's own packages play no part, so a package that deps.sh
# forgets fails here as it would for a new user. Needs root, debootstrap and network access to
# the Debian mirror; takes 20-40 minutes (torch and the toolchain are downloaded).
#
#   scripts/fresh_check.sh [ROOT]     (default /var/tmp/perftracker-fresh; reused if present)
#
# Logs: ROOT/demo.log and ROOT/test.log; the exit status is the first failing command's.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
root=${1:-/var/tmp/perftracker-fresh}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[[ $(id -u) -eq 0 ]] || { echo "fresh_check: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh_check: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

if [[ ! -x $root/usr/bin/apt-get ]]; then
  echo "fresh_check: debootstrap bookworm into $root"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
# An installed Debian has /etc/hosts (localhost, and its name on 127.0.1.1); debootstrap writes
# none, and without it "localhost" does not resolve: torchrun --standalone then cannot reach its
# own rendezvous store, which no real machine shows.
if [[ ! -s $root/etc/hosts ]]; then
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(hostname)" >"$root/etc/hosts"
fi

mounts=(proc sys dev dev/pts dev/shm)
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "$root/${mounts[i]}" 2>/dev/null || true; done
  umount -l "$root" 2>/dev/null || true
}
trap cleanup EXIT
# The root is a mount point of its own, as on a real machine: `ip netns exec` remounts / and
# fails on a plain folder.
mount --bind "$root" "$root"
mount --make-private "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t tmpfs shm "$root/dev/shm"
# What a new machine of this kind has before any command runs: the wheels that lie on its disk
# (torch 2.13.0's CPU build among them) and the pip settings that point at them. Without them pip
# would take torch from PyPI, a CUDA build of several GB. Carried read-only, as they are here.
pip_env=()
for d in /opt/wheels /opt/pypi /opt/pypi-more /etc/xdg/pip; do
  [[ -d $d ]] || continue
  mkdir -p "$root$d"
  mount --bind -o ro "$d" "$root$d"
  mounts+=("${d#/}")
done
[[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$root/etc/pip.conf"
while IFS= read -r v; do pip_env+=("$v"); done < <(env | grep '^PIP_' | grep -v '^PIP_CERT=' || true)
# This machine reaches PyPI through a proxy whose certificate authority its own bundle holds; the
# fresh root's ca-certificates package does not, so pip gets this machine's bundle.
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/pip-ca.crt"
  pip_env+=("PIP_CERT=/etc/pip-ca.crt")
fi

# The checkout as a clean clone of HEAD, shared/ beside it as the tests expect.
rm -rf "$root/work/main"
mkdir -p "$root/work"
git clone -q "$repo" "$root/work/main"
if [[ -d $repo/../shared ]]; then
  rm -rf "$root/work/shared"
  cp -r "$repo/../shared" "$root/work/shared"
fi

run() {  # NAME COMMAND: runs COMMAND in the fresh root's checkout, logs to ROOT/NAME.log
  local name=$1 cmd=$2 t0=$SECONDS
  echo "fresh_check: $name: $cmd"
  if chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb \
      "${pip_env[@]}" /bin/bash -c "cd /work/main && $cmd" >"$root/$name.log" 2>&1; then
    echo "fresh_check: $name passed in $((SECONDS - t0)) s (log: $root/$name.log)"
  else
    echo "fresh_check: $name FAILED after $((SECONDS - t0)) s; the end of $root/$name.log:"
    tail -40 "$root/$name.log"
    exit 1
  fi
}
run demo scripts/demo.sh
run test .ci/run
