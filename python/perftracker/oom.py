"""The CUDA caching allocator's state when a rank runs out of GPU memory, saved for PyTorch's
memory_viz: the launcher names it in the rank_crash finding (src/diagnose/rank_crash.h
RankExit::memory_snapshot).

torch calls its out-of-memory observers on the thread whose allocation failed, before it raises
torch.OutOfMemoryError; the observer here pickles torch.cuda.memory._snapshot() (the segments and
blocks; with stacks where the job itself records the allocator's history) to
PERFTRACKER_MEMORY_DIR/rank_R.cuda_oom.pickle, once. The observer attaches only once the job's
own code initialized CUDA (torch attaches it to the devices its allocator knows then; the
collector never initializes CUDA), looked for every OOM_CHECK_EVERY training events until then.
"""
import os
import pickle
import sys
from typing import Any, Optional

from perftracker import files
from perftracker.config import MEMORY_DIR_ENV

# Training events between two looks for an initialized CUDA (a bool test in between).
OOM_CHECK_EVERY = 64


class OomSnapshot:
    """Attaches the observer once CUDA is up (tick(), from the training thread) and writes the
    snapshot when it fires."""

    def __init__(self) -> None:
        self._events = 0
        self.attached = False
        self.done = False  # attached, given up (no such torch), or written: nothing more to do
        self.path: Optional[str] = None  # the snapshot written

    def tick(self) -> None:
        """A training event: now and then, whether the observer can be attached."""
        if self.done:
            return
        self._events += 1
        if self._events % OOM_CHECK_EVERY:
            return
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None) if torch is not None else None
        if cuda is None or not os.environ.get(MEMORY_DIR_ENV):
            return
        try:
            if not cuda.is_initialized():
                return
        except Exception:
            return
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        self.done = True
        if attach is None:
            return
        try:
            attach(self.observe)
            self.attached = True
        except Exception as e:  # the snapshot is evidence: training goes on without it
            sys.stderr.write(f"perftracker: no snapshot of the GPU memory at an OOM: {e!r}\n")

    def observe(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        """torch's observer: the first out-of-memory of this process saves the snapshot."""
        if self.path is not None:
            return
        try:
            torch = sys.modules["torch"]
            folder = os.environ.get(MEMORY_DIR_ENV, "")
            rank = _rank(torch)
            if not folder or rank is None:
                return
            if not files.own_folder(folder):
                # From the environment: a folder others may write in could hold links planted
                # where the snapshot goes.
                raise PermissionError(f"{folder}: not a folder of this user's that only it may "
                                      "write in")
            snapshot = torch.cuda.memory._snapshot()
            path = os.path.join(folder, f"rank_{rank}.cuda_oom.pickle")
            # Created, never opened: a file or a link planted at the name fails the write.
            fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                pickle.dump(snapshot, f)
            os.replace(path + ".tmp", path)
            self.path = path
            sys.stderr.write(f"perftracker: out of GPU memory on device {device}: the allocator's "
                             f"snapshot is in {path}\n")
        except Exception as e:
            self.path = ""
            sys.stderr.write(f"perftracker: no snapshot of the GPU memory: {e!r}\n")


def _rank(torch: Any) -> Optional[int]:
    """torch.distributed's rank while it is initialized, else RANK from the environment."""
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    r = os.environ.get("RANK", "")
    return int(r) if r.isdigit() else None
