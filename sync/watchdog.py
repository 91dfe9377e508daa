"""The watchdog: the last word on a call that never returns.

Store operations on a connection to a frozen (not dead) rank 0 block without any timeout, and a
collective waiting for a frozen peer may too. Every collective and store call of sync.dist_peers runs
under `watch(what)`; a thread looks once a second, and a call still running after `limit_s`
(sync.timeout_s + 10 s: our own waits fire first) logs the lost rank and ends the process (exit
1). The node's janitor then removes its workers, as it does for any death of the main process.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from contextlib import contextmanager

from sync.liveness import HEARTBEAT_S

LOOK_S = 4 * HEARTBEAT_S  # the watchdog's look: long enough to see a dead rank's beat go stale
log = logging.getLogger("sync")


class Watchdog:
    name = "watchdog"

    def __init__(self, limit_s: float, rank, lost_ranks):
        """rank(): this rank now (elastic: it changes); lost_ranks(wait_s): sync.liveness's answer."""
        self.limit_s, self._rank, self._lost_ranks = limit_s, rank, lost_ranks
        self._watched: tuple[str, float] | None = None  # (what, since) of the call in progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    @contextmanager
    def watch(self, what: str):
        self._watched = (what, time.monotonic())
        try:
            yield
        finally:
            self._watched = None

    def stop(self, wait_s: float) -> bool:
        """Stop looking; False if the thread is still in a look after wait_s."""
        self._stop.set()
        self._thread.join(wait_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            watched = self._watched
            if watched is not None and time.monotonic() - watched[1] >= self.limit_s:
                self._bite(watched[0])

    def _bite(self, what: str) -> None:
        found: list[list[int]] = []
        probe = threading.Thread(target=lambda: found.append(self._lost_ranks(LOOK_S)), daemon=True)
        probe.start()
        probe.join(LOOK_S + 2.0)  # a frozen store never answers: then the join times out
        lost = found[0] if found else [0]  # no answer from the store: its host, rank 0
        who = f"lost rank {', '.join(map(str, lost))}" if lost else "a peer stopped answering"
        msg = f"rank {self._rank()}: {who} during {what} (no answer for {self.limit_s:.0f} s)"
        log.error("%s", msg)
        print(f"error: {msg}", file=sys.stderr, flush=True)
        for h in logging.getLogger().handlers:
            h.flush()
        os._exit(1)  # the janitor sees the pipe close and removes this node's workers
