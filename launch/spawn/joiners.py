"""An elastic run that outlives the ranks its launcher started.

Nodes that joined the run by `python -m launch.node RUN_DIR` are not the launcher's processes, yet
they may be all the world has left: the ranks the launcher started were killed, failed, or were
dropped while frozen. The launch is the user's handle on the run (its exit code says how the run
ended), so the launcher waits for the run's end while that world lives, and says so. It stops
waiting when the run's summary is written, when the world is gone (its store is gone or no member's
heartbeat moves for sync.timeout_s, and no new generation formed meanwhile), or when the user asks
(Ctrl-C, SIGTERM): those reach only the launcher's own processes, so the joined nodes train on.
"""
from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence

from nodes.config.schema import Config
from sync.liveness import Liveness
from sync.rendezvous import Generation, current_world

log = logging.getLogger("launch.spawn.local")
POLL_S = 1.0


def wait_for_joiners(cfg: Config, ours: set[int], over: Callable[[], bool], asked: Sequence[int]) -> None:
    """Every rank this launcher started (node ids `ours`) has ended and the run is not `over()`:
    wait while the run's world holds a node that joined it and lives (module docstring)."""
    world = current_world(cfg.run_dir)
    if world is None or not set(world.members) - ours:
        return
    log.info("the nodes this launch started have ended; nodes %s that joined the run train on: waiting for the "
             "run to end (Ctrl-C stops waiting, not them)", sorted(set(world.members) - ours))
    watch, silent_since = _Watch(world), None
    while not over():
        if asked:
            log.warning("received %s: no longer waiting; the nodes that joined the run train on",
                        signal.Signals(asked[-1]).name)
            return
        now_world = current_world(cfg.run_dir) or world
        if now_world.number != watch.world.number:
            watch = _Watch(now_world)
        if watch.alive():
            silent_since = None
        elif time.monotonic() - (silent_since := silent_since or time.monotonic()) > cfg.sync.timeout_s:
            log.error("the run's world (generation %d, nodes %s) is gone and no other formed in %g s: its summary "
                      "was not written", watch.world.number, list(watch.world.members), cfg.sync.timeout_s)
            return
        time.sleep(POLL_S)


class _Watch:
    """One generation's liveness, seen from outside it: alive while its store answers and some
    member's heartbeat moves (sync.liveness's rule, for an observer that is no rank)."""

    def __init__(self, world: Generation):
        self.world = world
        self.liveness = Liveness(world.store_addr, world.store_port, -1, len(world.members))

    def alive(self) -> bool:
        return len(self.liveness.stale()) < len(self.world.members) if self.liveness.store_answers() else False
