"""The fork server workers start from (see nodes.sampling.processes), in a module that does not import
torch: a launch starts the server first (launch.spawn.driver.run_node), so that the server's imports of
torch and the worker modules (seconds on a small CPU node) run beside the main process's own import
of the node (about as long), not after it."""
from __future__ import annotations

import atexit
import multiprocessing
import os
import sys
from multiprocessing import forkserver, resource_tracker

from nodes.run.signals import StopSignals

# what the fork server imports once for every worker it forks (the main module is added: a worker
# re-runs it as __mp_main__, cheap once its imports are loaded). nodes.sampling.processes first: its
# warning filter is set in the server, and its workers inherit it
PRELOAD = ["nodes.sampling.processes", "torch", "nodes.sampling.rollout_worker", "nodes.sampling.policy_worker",
           "nodes.evaluation.evaluator"]

if "from multiprocessing.forkserver import main" in " ".join(getattr(sys, "orig_argv", ())):
    # in the server itself (this module is in its preload): it exits (SystemExit) once its node is
    # gone; without this it would spend ~0.4 s tearing down the torch it imported, holding the
    # node's stdout and stderr open meanwhile. Its children never run atexit handlers (they _exit)
    atexit.register(os._exit, 0)


def start_context():
    """The multiprocessing context workers start from: the fork server, started on first use
    (see nodes.sampling.processes' docstring; ensure_fork_server starts it with the signals blocked).
    torch.multiprocessing's contexts are these same objects."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD + preloadable_main())
    return ctx


def preloadable_main() -> list[str]:
    """The main module's name, for the server to import once for every worker, when multiprocessing
    itself would re-import it in a worker: not a script (`__main__`) nor a package's `__main__`
    (`python -m pkg`), whose code runs unguarded on import (multiprocessing skips both, for that
    reason): preloaded, an error there would end the server, and every later worker start would
    fail with an unrelated message."""
    main = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
    return [main] if main and main != "__main__" and not main.endswith(".__main__") else []


def ensure_fork_server(signals: StopSignals) -> None:
    """Start the fork server now, with `signals` blocked (its workers inherit the mask), without
    waiting for its imports; a no-op once it runs."""
    # multiprocessing starts its resource tracker first, and starting the tracker unblocks SIGINT
    # and SIGTERM in this thread: start it before blocking, or the server would take SIGTERM
    resource_tracker.ensure_running()
    with signals.blocked():
        start_context()
        forkserver.ensure_running()
