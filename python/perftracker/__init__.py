"""perftracker's in-worker collector.

`perftracker._worker` (C++) holds the iteration detector and the Python tracer; `hooks` feeds it
from torch's DataLoader and optimizers and talks to the node agent. `sitecustomize` turns it on
in every Python process when PERFTRACKER_AGENT_SOCKET or PERFTRACKER_ENABLE is set.

Modules: hooks (the entry point: enable(), the collector's state), patches (torch's DataLoader,
optimizers and torch.distributed; the post-import finder), window (profiling windows and
torch.profiler around them), client (the socket to the node agent), protocol (the worker <->
agent messages, src/worker/protocol.md), config (defaults and bounds), identity (rank and host
from the launcher's environment).
"""
# The compiled module is built into build/python/perftracker while the sources live in
# python/perftracker: let either directory complete the package.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)


def enable(config=None) -> bool:
    """Installs the collector in this process (what sitecustomize does). Returns True if on."""
    from . import hooks
    return hooks.enable(config)


def step() -> None:
    """Marks the end of one iteration, for a loop that has neither a DataLoader nor a torch
    optimizer (an evaluation or inference loop, a custom engine). One line at the end of the loop
    body; from the first call on, only these marks delimit iterations in this process. A no-op
    until the collector is on (perftracker run, PERFTRACKER_ENABLE), and never raises."""
    from . import hooks
    hooks.on_marker()
