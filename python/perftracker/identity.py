"""Who this process is in the job, from its launcher's environment: rank, world size, local rank,
node index and host name.

torchrun and `perftracker run` set RANK, WORLD_SIZE, LOCAL_RANK (and GROUP_RANK); Slurm's srun
sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID and SLURMD_NODENAME; Open MPI's
mpirun OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK and _NODE_RANK; MPICH and other PMI launchers
PMI_RANK, PMI_SIZE and MPI_LOCALRANKID. The first launcher in that order whose rank and world
size are both set names the process (torchrun inside an srun step is torchrun's rank); what no
launcher sets, torch.distributed fills in once initialised (client.py). The host is Slurm's node
name where there is one (several nodes may share a machine), else the machine's host name.
"""
import os
import socket

# (launcher, {field: environment variable}); rank and world_size must both be present.
LAUNCHERS = (
    ("torch", {"rank": "RANK", "world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
               "node_rank": "GROUP_RANK"}),
    ("slurm", {"rank": "SLURM_PROCID", "world_size": "SLURM_NTASKS", "local_rank": "SLURM_LOCALID",
               "node_rank": "SLURM_NODEID", "host": "SLURMD_NODENAME"}),
    ("openmpi", {"rank": "OMPI_COMM_WORLD_RANK", "world_size": "OMPI_COMM_WORLD_SIZE",
                 "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
                 "node_rank": "OMPI_COMM_WORLD_NODE_RANK"}),
    ("pmi", {"rank": "PMI_RANK", "world_size": "PMI_SIZE", "local_rank": "MPI_LOCALRANKID"}),
)

# A job has at most this many ranks (base/limits.h kMaxWorldSize): anything else is not a rank.
MAX_WORLD_SIZE = 1 << 20
# torchrun's restart count of this process's workers; larger values are not believed (limits.h
# kMaxAttempt).
ATTEMPT_ENV = "TORCHELASTIC_RESTART_COUNT"
MAX_ATTEMPT = 1 << 20
# Launchers that are Python programs: their own process starts the ranks and is none of them.
LAUNCHER_SCRIPTS = ("torchrun",)
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _int(environ, name):
    try:
        v = int(environ.get(name, ""))
    except ValueError:
        return None
    return v if 0 <= v <= MAX_WORLD_SIZE else None


def attempt(environ=None):
    """torchrun's restart count (TORCHELASTIC_RESTART_COUNT): 0 for the first attempt and
    without torchrun."""
    environ = os.environ if environ is None else environ
    try:
        v = int(environ.get(ATTEMPT_ENV, "0") or "0")
    except ValueError:
        return 0
    return v if 0 <= v <= MAX_ATTEMPT else 0


def is_launcher(argv=None, orig_argv=None):
    """True in a launcher's own Python process (torchrun, `python -m torch.distributed.run` or
    `.launch`): it starts the ranks and is none of them, so it must not report as a worker.
    ARGV / ORIG_ARGV default to sys.argv / sys.orig_argv (both set before sitecustomize runs)."""
    import sys
    argv = getattr(sys, "argv", None) if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", None) if orig_argv is None else orig_argv
    if argv and os.path.basename(str(argv[0])) in LAUNCHER_SCRIPTS:
        return True
    orig = [str(a) for a in (orig_argv or [])]
    for i, a in enumerate(orig[1:], start=1):
        if a == "-m":
            return i + 1 < len(orig) and orig[i + 1] in LAUNCHER_MODULES
        if a.startswith("-m"):
            return a[2:] in LAUNCHER_MODULES
        if not a.startswith("-"):
            break  # a script: the interpreter's options are over
    return False


def agent_socket(template, environ=None):
    """The node agent's socket: TEMPLATE with {node} replaced by this node's name (`perftracker
    run` inside a Slurm allocation starts one agent per node, each on its own socket)."""
    return template.replace("{node}", identity(environ)["host"]) if "{node}" in template else template


def identity(environ=None, hostname=None):
    """{"launcher", "rank", "world_size", "local_rank", "node_rank", "host", "attempt"};
    launcher and the numbers are None where no launcher says (attempt: 0)."""
    environ = os.environ if environ is None else environ
    out = {"launcher": None, "rank": None, "world_size": None, "local_rank": None,
           "node_rank": None, "host": None, "attempt": attempt(environ)}
    for name, fields in LAUNCHERS:
        rank, world = _int(environ, fields["rank"]), _int(environ, fields["world_size"])
        if rank is None or world is None or rank >= world:
            continue
        out.update(launcher=name, rank=rank, world_size=world)
        for key in ("local_rank", "node_rank"):
            if key in fields:
                out[key] = _int(environ, fields[key])
        if fields.get("host") and environ.get(fields["host"]):
            out["host"] = environ[fields["host"]]
        break
    if out["host"] is None and environ.get("SLURMD_NODENAME"):
        out["host"] = environ["SLURMD_NODENAME"]  # torchrun inside an srun step: still Slurm's node
    if out["host"] is None:
        out["host"] = hostname if hostname is not None else socket.gethostname()
    return out
