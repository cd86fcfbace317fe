#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for the launcher tests (issue 16): munge, one
# slurmctld, and two slurmd as nodes n1 and n2 (NodeHostname of this host, ports of their own),
# with their configuration, state and logs under DIR. Every address is 127.0.0.1: a machine
# whose /etc/hosts does not name it (a fresh debootstrap root) works too. Needs root and Debian's slurm-wlm and munge
# (scripts/deps.sh).
#
#   scripts/slurm_local.sh start DIR   prints the SLURM_CONF to export; waits until both nodes are idle
#   scripts/slurm_local.sh stop DIR    stops the daemons it started
set -euo pipefail
cmd=${1:?start or stop}
dir=$(realpath -m "${2:?a folder for the cluster}")
# Ports of their own, free when the cluster starts (the kernel picks them), so neither a site's
# Slurm nor a cluster another run left behind answers this cluster's calls: with fixed ports a
# slurmd left running by a killed test (another munge key) kept n2's port, and the next run's
# srun got "Zero Bytes were transmitted or received" from it. PT_SLURM_PORTS="CTLD N1 N2" fixes
# them.
free_ports() {
  python3 -c 'import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])'
}

stop() {
  for pidfile in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

if [[ $cmd == stop ]]; then
  stop
  exit 0
fi
[[ $cmd == start ]] || { echo "slurm_local: start or stop" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "slurm_local: needs root (slurmd runs jobs as their users)" >&2; exit 2; }
for p in munged slurmctld slurmd srun; do
  command -v "$p" >/dev/null || { echo "slurm_local: $p is missing (scripts/deps.sh installs slurm-wlm and munge)" >&2; exit 2; }
done
stop
read -r ctld_port n1_port n2_port <<<"${PT_SLURM_PORTS:-$(free_ports)}"
node_ports=("$n1_port" "$n2_port")
mkdir -p "$dir/state" "$dir/munge"
chmod 0755 "$dir"
host=$(hostname)
cpus=$(nproc)

# munge: its own key and socket in DIR, so the host's munge (if any) is left alone.
if [[ ! -f $dir/munge/munge.key ]]; then
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=1024 status=none
fi
chown -R root:root "$dir/munge"
chmod 0700 "$dir/munge"
chmod 0400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"

cat >"$dir/slurm.conf" <<EOF
ClusterName=perftracker
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=${node_ports[0]} CPUs=$cpus State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=${node_ports[1]} CPUs=$cpus State=UNKNOWN
PartitionName=pt Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF"
for n in n1 n2; do
  mkdir -p "$dir/spool-$n"
  slurmd -f "$SLURM_CONF" -N "$n"
done
# Up means: both nodes idle, and each daemon this script started still running (a slurmd that
# could not take its port logs "Unable to bind" and exits).
alive() {
  local f
  for f in "$dir/slurmctld.pid" "$dir/slurmd-n1.pid" "$dir/slurmd-n2.pid"; do
    [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null || return 1
  done
}
for _ in $(seq 150); do
  idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l)
  if [[ $idle -eq 2 ]]; then
    sleep 0.5
    alive && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
    break
  fi
  sleep 0.2
done
echo "slurm_local: the nodes did not come up (ports $ctld_port ${node_ports[*]}); see $dir/*.log" >&2
sinfo -N >&2 || true
tail -n 5 "$dir"/slurmctld.log "$dir"/slurmd-*.log >&2 || true
exit 1
