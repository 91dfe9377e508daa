"""How a run ended: its outcome (summary.json's `outcome`) and its first error, held while the
steps of its end run (nodes.node.Node._finish: docs/getting-started.md#when-a-run-ends).

Every step of the end runs under `Ending.step`, whatever became of the steps before it: a step
that raises (a second Ctrl-C included) makes its error the run's if it is the first, else a
warning, and the next step runs. What an outcome allows at the end is decided here, once, in
words: a final collective (`ranks_together`), a final checkpoint (`keeps_parameters`), the end of
an elastic run for every node (`over_for_all`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from nodes.errors import Stopped, TooFewNodes, one_line

log = logging.getLogger("nodes")

T = TypeVar("T")


class Ending:
    """The outcome so far ("finished" until something ends the run) and the error that ended it."""

    def __init__(self) -> None:
        self.outcome = "finished"
        self.error: BaseException | None = None

    def ended_by(self, exc: BaseException) -> bool:
        """`exc` ended the run, unless an error came before it (then False: the first is the run's)."""
        if self.error is not None:
            return False
        self.outcome, self.error = outcome_of(exc), exc
        return True

    def step(self, what: str, step: Callable[[], T], otherwise: T | None = None) -> T | None:
        """One step of the end: its result, or `otherwise` when it raised (`what` names it in the warning)."""
        try:
            return step()
        except (Exception, KeyboardInterrupt) as exc:
            if not self.ended_by(exc):
                log.warning("%s failed too: %s", what, one_line(exc))
            return otherwise

    @property
    def finished(self) -> bool:
        return self.outcome == "finished"

    @property
    def ranks_together(self) -> bool:
        """Every rank left the loop after the same iteration, so a final collective meets them all:
        not after a failure (a peer may be gone) nor a second Ctrl-C (this rank left mid-iteration)."""
        return self.outcome not in ("failed", "interrupted")

    def keeps_parameters(self, learned: bool, solo: bool) -> bool:
        """The parameters are worth a final checkpoint: unless the run failed. After a failure only
        one node's that learned anything: they are its own and whole, where with several nodes the
        failure may have struck within a reduction and left parameters that no rank shares."""
        return self.outcome != "failed" or (learned and solo)

    @property
    def over_for_all(self) -> bool:
        """An elastic run is over for every node (one that comes later has nothing to join): it
        finished, or fell below sync.min_nodes."""
        return self.finished or isinstance(self.error, TooFewNodes)

    def raise_first(self) -> None:
        """The run's end, to the launcher: its first error raised (it maps it to an exit code)."""
        if self.error is not None:
            raise self.error


def outcome_of(exc: BaseException) -> str:
    """The summary's `outcome` for what ended a run."""
    if isinstance(exc, TooFewNodes):
        return "stopped: below sync.min_nodes"
    if isinstance(exc, Stopped):
        return f"stopped by {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "failed"
