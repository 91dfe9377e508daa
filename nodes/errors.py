"""Errors meant for the user, and how any exception becomes one line. Imports nothing of ours.

Every entry point prints one line for an error (`error: ...`) and, where a rank has a log file,
writes the full traceback of an unexpected exception there (`TRACEBACKS`, attached to the log
file only by launch.process.logs), so nothing is lost and the console stays readable.
"""
from __future__ import annotations

import logging

# The full traceback of an unexpected error goes here: launch.process.logs attaches the rank's log file
# and nothing else (the console shows one line). Without that, tracebacks are dropped quietly.
TRACEBACKS = logging.getLogger("distrl.tracebacks")
TRACEBACKS.propagate = False
TRACEBACKS.addHandler(logging.NullHandler())


class ConfigError(ValueError):
    """A bad configuration value; the message is one line meant for the user."""


def need(ok: bool, message: str) -> None:
    """Raise ConfigError(message) unless ok: one line per check in the validators."""
    if not ok:
        raise ConfigError(message)


def one_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name when it has none."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def did_you_mean(word: str, options) -> str:
    """": did you mean 'X'?" naming the option closest to a mistyped `word` (difflib), or "" when
    none is close: what a refusal of an unknown key, env or id appends to its line."""
    import difflib

    close = difflib.get_close_matches(word, [str(o) for o in options], n=1, cutoff=0.75)
    return f": did you mean '{close[0]}'?" if close else ""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message is one line meant for the user."""


class WorkerFailed(RuntimeError):
    """A worker process died or raised; the message names it (and holds its traceback)."""


class Stopped(Exception):
    """The run was stopped by a signal (after writing its final checkpoint and summary)."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class PeerLost(RuntimeError):
    """A collective failed because a rank is gone (sync.dist_peers raises it); the message names it (one
    line), `ranks` too (empty when it is not known which). Here, not in sync/, so that the node
    can survive one (sync.elastic) without knowing anything of how peers talk."""

    def __init__(self, message: str, ranks=()):
        super().__init__(message)
        self.ranks = list(ranks)


class TooFewNodes(RuntimeError):
    """Elastic: fewer nodes are left than sync.min_nodes; the run stops with a checkpoint."""
