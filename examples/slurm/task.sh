#!/usr/bin/env bash
# What a DDP job's srun tasks usually start with: torch.distributed's env:// rendezvous wants
# RANK, WORLD_SIZE and LOCAL_RANK, and srun sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID.
# (perftracker's collector reads Slurm's variables itself; this mapping is for torch.)
export RANK=${SLURM_PROCID:?run me under srun}
export WORLD_SIZE=${SLURM_NTASKS:?run me under srun}
export LOCAL_RANK=${SLURM_LOCALID:-0}
export MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
export MASTER_PORT=${MASTER_PORT:-29500}
exec "$@"
