"""torch patches: DataLoader iteration and optimizer steps feed the collector's events, the
dataset fetchers time DataLoader worker processes' batches (loader.py),
torch.distributed's Python collectives are wrapped to remember the last one (for hang stacks) and
to record each in the ring of collectives (collectives.py),
and a post-import finder applies the patches when torch's modules load (sitecustomize runs
before torch).

The wrappers keep functools.wraps, are applied once (marked `_perftracker`), and go straight to
the original once the collector is off.
"""
import functools
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from perftracker import loader
from perftracker.collectives import CollectiveRing
from perftracker.switch import Switch

# torch.distributed's Python-level collectives (whichever the torch version has). DDP's gradient
# all-reduce runs from C++ inside backward() and is not seen here.
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "broadcast", "reduce", "barrier", "all_to_all", "all_to_all_single", "send", "recv", "isend",
               "irecv", "gather", "scatter", "monitored_barrier")


def _caller(torch_dir: str) -> Tuple[str, int, str]:
    """(file, line, function) of the first frame outside torch's own package."""
    f = sys._getframe(3)  # past _caller, _record_collective and the collective's wrapper
    while f is not None and f.f_code.co_filename.startswith(torch_dir):
        f = f.f_back
    if f is None:
        return "?", 0, "?"
    return f.f_code.co_filename, f.f_lineno, f.f_code.co_name


class TorchPatches:
    """The collector's patches of torch and what the collective wrappers record. One instance,
    owned by the collector (hooks.py), which hands it the SWITCH (off: the wrappers go straight to
    torch; turn_off on an internal error) and the training thread's two events, called from the
    DataLoader's next() (ON_LOADER_NEXT) and after an optimizer step (ON_OPTIMIZER_STEP)."""

    def __init__(self, switch: Switch, on_loader_next: Callable[[], None],
                 on_optimizer_step: Callable[[], None]) -> None:
        self._switch = switch
        self._on_loader_next = on_loader_next
        self._on_optimizer_step = on_optimizer_step
        self.tls = threading.local()  # in_step, in_coll: the outermost call is the one
        # [op, count, file, line, start_monotonic, end_monotonic or None]
        self.last_coll: Optional[List[Any]] = None
        self.coll_count = 0  # wrapped collective calls so far (outermost ones)
        self.ring = CollectiveRing(switch)  # what each of them is, for the sequence diagnosis
        self.targets: Dict[str, Callable[[Any], None]] = {
            "torch.utils.data.dataloader": self.patch_dataloader,
            "torch.utils.data._utils.fetch": loader.patch_fetchers,
            "torch.optim.optimizer": self.patch_optimizer,
            "torch.distributed.distributed_c10d": self.patch_distributed,
        }

    def install(self) -> None:
        """Patches the torch modules already imported, and those imported later."""
        for name, patch in self.targets.items():
            if name in sys.modules:
                patch(sys.modules[name])
        if not any(isinstance(f, PostImportFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, PostImportFinder(self.targets, self._switch.turn_off))

    # ---- DataLoader and optimizers ----

    def patch_dataloader(self, mod: Any) -> None:
        cls = getattr(mod, "_BaseDataLoaderIter", None)
        if cls is None or getattr(cls.__next__, "_perftracker", False):
            return
        orig = cls.__next__
        on_loader_next = self._on_loader_next

        @functools.wraps(orig)
        def __next__(self):
            on_loader_next()
            return orig(self)

        __next__._perftracker = True
        cls.__next__ = __next__

    def _wrap_step(self, cls: type) -> None:
        step = cls.__dict__.get("step")
        if step is None or getattr(step, "_perftracker", False):
            return
        tls, on_optimizer_step = self.tls, self._on_optimizer_step

        @functools.wraps(step)
        def wrapped(self, *args, **kwargs):
            # A subclass's step calling super().step() is one optimizer step, not two.
            if getattr(tls, "in_step", False):
                return step(self, *args, **kwargs)
            tls.in_step = True
            try:
                return step(self, *args, **kwargs)
            finally:
                tls.in_step = False
                on_optimizer_step()

        wrapped._perftracker = True
        cls.step = wrapped

    def patch_optimizer(self, mod: Any) -> None:
        opt = getattr(mod, "Optimizer", None)
        if opt is None or getattr(opt, "_perftracker", False):
            return
        opt._perftracker = True
        on_optimizer_step, turn_off = self._on_optimizer_step, self._switch.turn_off
        register = getattr(mod, "register_optimizer_step_post_hook", None)
        if register is not None:  # torch >= 2.0
            register(lambda o, a, k: on_optimizer_step())
            return
        orig_init = opt.__init__
        wrap_step = self._wrap_step

        @functools.wraps(orig_init)
        def __init__(self, *args, **kwargs):
            orig_init(self, *args, **kwargs)
            # torch 1.13 wraps the class's step for its profiler in __init__; wrap after it.
            # Wrap the class that defines step (a subclass may inherit it).
            for c in type(self).__mro__:
                if "step" in c.__dict__ and c is not opt:
                    try:
                        wrap_step(c)
                    except Exception as e:
                        turn_off(e)
                    break

        opt.__init__ = __init__

    # ---- torch.distributed ----

    def _wrap_collective(self, name: str, fn: Callable[..., Any], torch_dir: str) -> Callable[..., Any]:
        record = self._record_collective
        tls, switch, ring = self.tls, self._switch, self.ring

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            if switch.off or getattr(tls, "in_coll", False):  # nested: the outermost call is the one
                return fn(*args, **kwargs)
            rec, ticket = record(name, torch_dir, args, kwargs)
            tls.in_coll = True
            try:
                return fn(*args, **kwargs)
            finally:
                tls.in_coll = False
                if rec is not None:
                    rec[5] = time.monotonic()
                    try:
                        ring.exit(ticket, kwargs)
                    except Exception as e:
                        switch.turn_off(e)

        wrapped._perftracker = True
        return wrapped

    def _record_collective(self, name: str, torch_dir: str, args: tuple,
                           kwargs: dict) -> Tuple[Optional[List[Any]], Optional[int]]:
        """Counts the call, makes it the last collective and puts it in the ring: (the record,
        the ring's ticket); (None, None) and the collector off when that fails."""
        try:
            self.coll_count += 1
            file, line, function = _caller(torch_dir)
            rec = [name, self.coll_count, file, line, time.monotonic(), None]
            self.last_coll = rec
            return rec, self.ring.enter(name, args, kwargs, file, line, function)
        except Exception as e:
            self._switch.turn_off(e)
            return None, None

    def patch_distributed(self, mod: Any) -> None:
        """Wraps the collectives of torch.distributed.distributed_c10d, and the names
        torch.distributed re-exported from it when that was already imported."""
        torch_dir = os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__))) + os.sep
        self.ring.bind(mod)
        pub = sys.modules.get("torch.distributed")
        for name in COLLECTIVES:
            fn = getattr(mod, name, None)
            if fn is None or not callable(fn) or getattr(fn, "_perftracker", False):
                continue
            w = self._wrap_collective(name, fn, torch_dir)
            setattr(mod, name, w)
            if pub is not None and getattr(pub, name, None) is fn:
                setattr(pub, name, w)

    def last_collective(self) -> Optional[Dict[str, Any]]:
        """The last collective called through torch.distributed's Python API, as the stacks reply
        carries it (protocol.LAST_COLLECTIVE_FIELDS), or None."""
        rec = self.last_coll
        if rec is None:
            return None
        op, count, file, line, start, end = tuple(rec)
        return {"op": op, "count": count, "file": file, "line": line, "in_progress": end is None,
                "seconds": round((time.monotonic() if end is None else end) - start, 6)}


class PostImportFinder:
    """Applies the patches right after torch's modules load (sitecustomize runs before torch)."""

    def __init__(self, targets: Dict[str, Callable[[Any], None]],
                 turn_off: Callable[[BaseException], None]) -> None:
        self._targets = targets
        self._turn_off = turn_off

    def find_spec(self, name, path, target=None):
        patch = self._targets.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                orig_exec = spec.loader.exec_module
                turn_off = self._turn_off

                def exec_module(module, _orig=orig_exec, _patch=patch):
                    _orig(module)
                    try:
                        _patch(module)
                    except Exception as e:
                        turn_off(e)

                spec.loader.exec_module = exec_module
                return spec
        return None
