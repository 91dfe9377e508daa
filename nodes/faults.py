"""Fault points: the steps of the end of a run where its tests (tests/test_run_end_faults.py) make
a real fault happen, at a moment no outside timing can hit (a checkpoint's write lasts
milliseconds, the final collective less).

`DISTRL_FAULT=<point>:<signal>[:<rank>]` in a node's environment makes the node send itself that
signal (SIGKILL: the node is lost; SIGTERM, SIGINT: a stop signal) the first time it reaches
<point>, on every rank or on rank <rank> only (the RANK its launcher set). Unset, `at` returns at
once. The points: `final_collective` (before the parameter check every rank makes at the end),
`final_checkpoint` (before the final checkpoint) and `checkpoint_written` (a checkpoint's temp
file written and synced, not yet renamed: nodes.record.checkpoint).
"""
from __future__ import annotations

import os
import signal

_SPEC = os.environ.get("DISTRL_FAULT", "")
_done: set[str] = set()


def at(point: str) -> None:
    if not _SPEC:
        return
    name, _, rest = _SPEC.partition(":")
    signame, _, rank = rest.partition(":")
    if name != point or point in _done or (rank and os.environ.get("RANK", "0") != rank):
        return
    _done.add(point)
    os.kill(os.getpid(), getattr(signal, signame))
