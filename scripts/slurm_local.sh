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
# Ports of their own, away from Slurm's defaults (6817/6818), so a site's Slurm is not touched.
ctld_port=${PT_SLURMCTLD_PORT:-16817}
node_ports=(16818 16819)

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
for _ in $(seq 150); do
  idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l)
  [[ $idle -eq 2 ]] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
echo "slurm_local: the nodes did not come up; see $dir/*.log" >&2
sinfo -N >&2 || true
tail -5 "$dir"/slurmctld.log "$dir"/slurmd-*.log >&2 || true
exit 1
