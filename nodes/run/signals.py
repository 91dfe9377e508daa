"""Stop signals: a signal asks the node to stop after the current step; it never interrupts one.

`StopSignals` installs the handlers for the lifetime of a `with` block (main thread only) and
restores the previous ones after it. The first signal is recorded (`received`); a second one
(Ctrl-C twice) stops waiting for a clean shutdown, unless it is the last one again within
SAME_REQUEST_S: a terminal's Ctrl-C reaches every process of the launcher's process group, the
node processes of `nodes=N` included, and the launcher forwards it to them too (launch.spawn.local);
taken as impatience, it ended an elastic run "interrupted", a rank leaving mid-iteration.
`blocked()` blocks the signals in this thread while worker processes start, so they inherit the
mask: Slurm signals every process of a job step, and only the node's main process decides to stop.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator, Sequence

log = logging.getLogger("nodes")

DEFAULT = (signal.SIGINT, signal.SIGTERM)
SAME_REQUEST_S = 1.0  # the same signal again this soon: one request delivered twice (the docstring)


class StopSignals:
    def __init__(self, signums: Sequence[int] = DEFAULT, vote: bool = False):
        """vote: a signal is this rank's vote to stop, counted at the next collective (several nodes),
        never an immediate stop; the node clears it once every rank has left the lockstep."""
        self.signums = tuple(dict.fromkeys(signums))
        self.vote = vote
        self.received: int | None = None
        self._last: tuple[int | None, float] = (None, 0.0)  # the last signal and its time.monotonic()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._on_signal) for s in self.signums}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _on_signal(self, signum, frame) -> None:
        now, (last, last_at) = time.monotonic(), self._last
        self._last = (signum, now)
        if signum == last and now - last_at < SAME_REQUEST_S:
            return  # the same request, delivered twice (the second one's copy too)
        if self.received is not None:
            raise KeyboardInterrupt  # a second Ctrl-C: stop waiting for a clean shutdown
        self.received = signum
        log.warning("received %s: stopping after the current step", signal.Signals(signum).name)

    @contextlib.contextmanager
    def blocked(self) -> Iterator[None]:
        """Block these signals in this thread (children started meanwhile inherit the mask);
        a signal that came meanwhile is delivered when the block ends."""
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, self.signums)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
