"""torch's lazy submodules kept lazy while the collector calls into torch. torch 2.x imports
_inductor (and with it _dynamo: 822 modules, 1.0-1.5 s, +71 MiB) the first time anything reads
the attribute torch._inductor; some of torch's own calls the collector makes read it:

- torch.profiler's start asks hasattr(torch, "_inductor") whether inductor's CUDA graphs are
  on: 1.2-1.5 s on the training thread at the first window on torch 2.13 here (the start itself
  takes 1 ms);
- torch's Flight Recorder dump with its stacks (torch._C._distributed_c10d._dump_fr_trace) reads
  it while it symbolizes them: 0.99-1.16 s of each rank's exit here, 0 ms with it left lazy, the
  same stacks either way.

torch 2.13 imports inductor with the first torch.optim optimizer, so a loop with one has it
already; a loop without one pays (evaluation, inference, an optimizer of its own, a probe that
only calls collectives). A job that never imported inductor runs nothing it compiled, so the
answers those calls get without it are the true ones.
"""
import contextlib
import sys
from typing import Any


@contextlib.contextmanager
def without_lazy_inductor(torch: Any) -> Any:
    """While the block runs, and only where the job has not imported inductor, torch's lazy
    import of _inductor is off: reading torch._inductor says absent (`import torch._inductor`
    statements are untouched). Process-wide for those milliseconds: another thread's first read
    of the attribute then would fail too, so the blocks are short calls into torch. Where
    inductor is imported, TORCH is None, or torch has no such lazy import (1.x), nothing
    changes."""
    lazy = getattr(torch, "_lazy_modules", None)
    if (not isinstance(lazy, set) or "_inductor" not in lazy
            or "torch._inductor" in sys.modules):
        yield
        return
    lazy.discard("_inductor")
    try:
        yield
    finally:
        lazy.add("_inductor")
