"""The ring of collectives (src/worker/collective_ring.h): what each torch.distributed call the
patches wrap is (its process group, the group's sequence number, op, input size and dtype, the
user's frame), recorded in perftracker._worker before the call and marked when it returns, and
the dumps of it and of torch's own Flight Recorder.

The sequence number is the one torch gives the group's next collective
(ProcessGroup._get_sequence_number_for_group() + 1), the number the Flight Recorder records too,
so that a rank whose own ring is all that is left (it crashed) lines up with its peers' dumps.
A backend's group number may count the group's point-to-point calls too (gloo's does), while the
Flight Recorder numbers them apart: GroupNumbers takes them out. Point-to-point calls are named as
the Flight Recorder names them, with their peers ("send 0->1": _with_peers).
Torch 1.x gives none that means anything (its gloo groups answer a random number: a desync was
"in collective #1804289569"): there the ring numbers each group's calls itself, collectives and
point-to-point apart, from 1, which is the same on every rank while they call the same.
dtypes are written as torch's C++ names ("Float"), as the Flight Recorder writes them.
"""
import os
import sys
from typing import Any, Dict, Optional, Tuple

from perftracker import files
from perftracker.config import COLLECTIVES_DIR_ENV, MAX_P2P_PENDING
from perftracker.switch import Switch
from perftracker.torch_lazy import without_lazy_inductor

# The ops whose input tensor the wrapper sees as the Flight Recorder records it: the first tensor
# argument, or the second for (output, input) signatures. Others are recorded without sizes (the
# sequence diagnosis then compares their op alone).
_INPUT_FIRST = {"all_reduce", "broadcast", "reduce", "all_gather", "gather", "send", "recv", "isend",
                "irecv"}
_P2P = {"send", "recv", "isend", "irecv"}  # numbered apart, as the ring's C++ side tells them
_INPUT_SECOND = {"all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"}

# torch.dtype's str() -> c10's ScalarType name, as Flight Recorder dumps write dtypes.
_DTYPES = {"torch.float32": "Float", "torch.float64": "Double", "torch.float16": "Half",
           "torch.bfloat16": "BFloat16", "torch.int64": "Long", "torch.int32": "Int",
           "torch.int16": "Short", "torch.int8": "Char", "torch.uint8": "Byte", "torch.bool": "Bool",
           "torch.complex64": "ComplexFloat", "torch.complex128": "ComplexDouble"}


def numbered_by_torch(version: str) -> bool:
    """Whether torch VERSION ("1.13.1", "2.13.0+cpu") numbers a group's collectives itself."""
    try:
        return int(version.split(".")[0]) >= 2
    except ValueError:
        return True  # an unknown version is taken as a current one


class GroupNumbers:
    """The number the ring gives each call of a group: torch's own for a collective (the group's
    next, less the point-to-point calls where the backend's number counts them: gloo's does;
    learned at the first one's return, by whether the number moved), a count of its own for a
    point-to-point call (numbered apart, p2p_seq_id); on torch 1.x (OWN set) a count of its own
    for each, collectives and point-to-point apart."""

    def __init__(self) -> None:
        self.own: Optional[Dict[Tuple[str, bool], int]] = None  # torch 1.x: the counts
        self._p2p_seen: Dict[str, int] = {}  # per group
        self._p2p_in_number: Dict[str, bool] = {}  # per group, once learned
        self._pending: Dict[int, Tuple[str, Any, int]] = {}  # ticket -> (name, group, number)

    def number(self, name: str, group: Any, p2p: bool) -> Tuple[int, int]:
        """(the call's number, -1: not placed; the group's number before a p2p call, else -1)."""
        if self.own is not None:
            key = (name, p2p)
            seq = self.own[key] = self.own.get(key, 0) + 1
            return seq, -1
        get_seq = getattr(group, "_get_sequence_number_for_group", None)  # -1: not placed
        if get_seq is None:
            return -1, -1
        if p2p:
            seq = self._p2p_seen[name] = self._p2p_seen.get(name, 0) + 1
            return seq, get_seq()
        counted = self._p2p_seen.get(name, 0) if self._p2p_in_number.get(name, True) else 0
        return get_seq() + 1 - counted, -1

    def entered(self, ticket: Optional[int], name: str, group: Any, p2p_number: int) -> None:
        """The ring took the call as TICKET: a p2p call of a group not yet learned is watched."""
        if p2p_number < 0 or ticket is None or name in self._p2p_in_number:
            return
        if len(self._pending) >= MAX_P2P_PENDING:
            self._pending.clear()  # returns never seen (raised): learned at a later call
        self._pending[ticket] = (name, group, p2p_number)

    def returned(self, ticket: Optional[int]) -> None:
        pending = self._pending.pop(ticket, None) if ticket is not None else None
        if pending is not None:
            name, group, before = pending
            self._p2p_in_number[name] = group._get_sequence_number_for_group() > before


class CollectiveRing:
    """Feeds the C++ ring from the collective wrappers and writes the dumps. One instance, owned
    by the torch patches (patches.py); _worker is the SWITCH's `w`, read at each use."""

    def __init__(self, switch: Switch) -> None:
        self._switch = switch
        self._c10d: Any = None  # torch.distributed.distributed_c10d once patched
        self._tensor: Any = None  # torch.Tensor
        self._groups: Dict[Any, Tuple[str, str, str]] = {}  # group -> (name, desc, backend)
        self._crash_path_set = False
        self._rank: Optional[int] = None  # known at the first collective (kept past destroy)
        self._dump_failed = False
        self._numbers = GroupNumbers()


    def bind(self, c10d: Any) -> None:
        self._c10d = c10d

    # ---- recording (the calling thread, before and after each collective) ----

    def enter(self, op: str, args: tuple, kwargs: dict, file: str, line: int, function: str) -> Optional[int]:
        """The ticket of the recorded call, or None when it is not one the ring can place."""
        c10d, w = self._c10d, self._switch.w
        if c10d is None or w is None or not c10d.is_initialized():
            return None
        if self._tensor is None:  # torch was still importing when the patches were applied
            torch = sys.modules["torch"]
            self._tensor = torch.Tensor
            self._rank = c10d.get_rank()
            if not numbered_by_torch(getattr(torch, "__version__", "")):
                self._numbers.own = {}
        group = kwargs.get("group")
        tensors = []
        pg_type, tensor_type = c10d.ProcessGroup, self._tensor
        for a in args:
            if group is None and isinstance(a, pg_type):
                group = a
            elif isinstance(a, tensor_type):
                tensors.append(a)
        for key in ("tensor", "input_tensor", "input"):
            if isinstance(kwargs.get(key), tensor_type):
                tensors.insert(0 if op in _INPUT_FIRST else len(tensors), kwargs[key])
        tensor = None
        if op in _INPUT_FIRST and tensors:
            tensor = tensors[0]
        elif op in _INPUT_SECOND and len(tensors) > 1:
            tensor = tensors[1]
        if group is None:
            group = c10d._get_default_group()
        name, desc, backend = self._group(group)
        seq, p2p_number = self._numbers.number(name, group, op in _P2P)
        if op in _P2P:
            op = _with_peers(c10d, group, op, args, kwargs)
        sizes = tuple(tensor.shape) if tensor is not None else None
        dtype = _DTYPES.get(str(tensor.dtype), str(tensor.dtype)) if tensor is not None else ""
        if not self._crash_path_set:
            self._set_crash_path()
        ticket = w.collective_enter(name, desc, seq, op, backend, sizes, dtype, file, line, function)
        self._numbers.entered(ticket, name, group, p2p_number)
        return ticket

    def exit(self, ticket: Optional[int], kwargs: dict) -> None:
        if ticket is not None and self._switch.w is not None:
            self._switch.w.collective_exit(ticket, not kwargs.get("async_op", False))
        self._numbers.returned(ticket)

    def _group(self, group: Any) -> Tuple[str, str, str]:
        known = self._groups.get(group)
        if known is not None:
            return known
        c10d = self._c10d
        name = getattr(group, "group_name", None)
        if name is None:  # torch 1.x
            name = getattr(c10d, "_pg_names", {}).get(group, "")
        desc = getattr(group, "group_desc", None)
        if desc is None:
            desc = "default_pg" if group is c10d._get_default_group() else ""
        try:
            backend = str(c10d.get_backend(group))
        except Exception:
            backend = ""
        known = (str(name), str(desc), backend)
        self._groups[group] = known
        return known

    # ---- dumps ----

    def _dir_and_rank(self) -> Tuple[str, Optional[int]]:
        """The folder, and this rank: torch.distributed's while it is initialized (kept, for a
        dump after destroy_process_group), else the last one known."""
        c10d = self._c10d
        try:
            if c10d is not None and c10d.is_initialized():
                self._rank = c10d.get_rank()
        except Exception:
            pass
        return os.environ.get(COLLECTIVES_DIR_ENV, ""), self._rank

    def _set_crash_path(self) -> None:
        self._crash_path_set = True
        folder, rank = self._dir_and_rank()
        if folder and rank is not None and files.own_folder(folder):
            self._switch.w.collective_crash_path(os.path.join(folder, f"rank_{rank}.ring.json"))

    def dump(self, with_torch: bool) -> None:
        """Writes this rank's ring and, WITH_TORCH, torch's Flight Recorder dump (where this
        torch has one) into the collectives folder. Nothing without the folder or a rank. A dump
        that fails is said once on stderr and never stops the collector: it is evidence, not
        the training's business."""
        try:
            self._dump(with_torch)
        except Exception as e:
            if not self._dump_failed:
                self._dump_failed = True
                sys.stderr.write(f"perftracker: no dump of the collectives: {e!r}\n")

    def _dump(self, with_torch: bool) -> None:
        folder, rank = self._dir_and_rank()
        w = self._switch.w
        if not folder or rank is None or w is None:
            return
        if not files.own_folder(folder):
            # The folder comes from the environment: one others may write in could hold links
            # planted where the dumps go.
            raise PermissionError(f"{folder}: not a folder of this user's that only it may write in")
        w.collective_dump(os.path.join(folder, f"rank_{rank}.ring.json"))
        if not with_torch:
            return
        dump = _torch_flight_recorder()
        if dump is None:
            return
        path = os.path.join(folder, f"rank_{rank}.fr.pkl")
        fd = files.create_private_file(path + ".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(dump)
        os.replace(path + ".tmp", path)


def _with_peers(c10d: Any, group: Any, op: str, args: tuple, kwargs: dict) -> str:
    """A point-to-point OP as torch's Flight Recorder names it (isend as send, irecv as recv),
    with this rank and its peer in GROUP: "send 0->1", "recv 1<-0" (PyTorch's fr_trace pairs
    sends and recvs by them, and cannot read a send without them, nor an isend). The peer is dst
    (send) or src (recv), a global rank, or group_dst / group_src, a rank in GROUP; the name
    alone where it is unknown (a recv from any source) or this torch cannot map it (torch 1.x,
    in a group other than the default)."""
    send = op in ("send", "isend")
    op = "send" if send else "recv"
    local = kwargs.get("group_dst" if send else "group_src")
    peer = kwargs.get("dst" if send else "src")
    if peer is None and local is None and len(args) > 1 and isinstance(args[1], int):
        peer = args[1]
    try:
        if local is None and isinstance(peer, int):
            to_group = getattr(c10d, "get_group_rank", None)
            if to_group is not None:
                local = to_group(group, peer)
            elif group is c10d._get_default_group():
                local = peer
        me = c10d.get_rank(group)
    except Exception:
        return op
    if not isinstance(local, int) or not isinstance(me, int) or me < 0:
        return op
    return f"{op} {me}->{local}" if send else f"{op} {me}<-{local}"


def _torch_flight_recorder() -> Optional[bytes]:
    """torch's Flight Recorder dump (pickle) of this process, or None where this torch has none or
    it recorded nothing."""
    try:
        import torch._C._distributed_c10d as c  # type: ignore
    except Exception:
        return None
    fn = getattr(c, "_dump_fr_trace", None) or getattr(c, "_dump_nccl_trace", None)
    if fn is None:
        return None
    try:
        # Symbolizing the stacks reads torch._inductor: never the import of all of it here.
        with without_lazy_inductor(sys.modules.get("torch")):
            return fn(True, True, False)  # collectives, with their stacks, not only the active
    except Exception:
        return None
