"""The CUDA caching allocator's figures of this process, sent with the iteration reports
(src/worker/protocol.md, `iterations`' `cuda`): what its tensors hold
(torch.cuda.memory_allocated), what the allocator reserved from the driver
(torch.cuda.memory_reserved) and the peak of the first (torch.cuda.max_memory_allocated), summed
over the devices it knows. The server follows the first for leaks: a tensor kept every step grows
it, the allocator's caching does not (src/diagnose/memory_growth.h).

Read on the client's daemon thread, once a tick (0.5 s): the allocator's counters, under its own
lock; no device synchronisation, and nothing before the job's own code initialized CUDA (the
collector never initializes it). A torch whose figures cannot be read is not asked again.
"""
import sys
from typing import List, Optional

# The allocator's statistics sent, in the message's order: (statistic, pool, metric) of
# torch.cuda.memory_stats_as_nested_dict (memory_stats' "allocated_bytes.all.current", ...;
# the nested form spares the GIL memory_stats' flattening and sorting of ~100 keys a device).
STAT_KEYS = (("allocated_bytes", "all", "current"), ("reserved_bytes", "all", "current"),
             ("allocated_bytes", "all", "peak"))


class CudaMemory:
    def __init__(self) -> None:
        self.broken = False  # reading failed once: this torch is not asked again

    def read(self) -> Optional[List[int]]:
        """[allocated, reserved, peak allocated] bytes, or None (no CUDA in use, or unreadable)."""
        if self.broken:
            return None
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None) if torch is not None else None
        if cuda is None:
            return None
        try:
            if not cuda.is_initialized():
                return None
            totals = [0, 0, 0]
            for device in range(cuda.device_count()):
                stats = cuda.memory_stats_as_nested_dict(device)
                for i, (stat, pool, metric) in enumerate(STAT_KEYS):
                    totals[i] += int(stats.get(stat, {}).get(pool, {}).get(metric, 0))
            return totals
        except Exception:
            self.broken = True
            return None
