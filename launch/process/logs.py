"""Logging of a run: the console, and the rank's log file in the run directory.

Rank 0 logs to run_dir/train.log, rank r to train_rank<r>.log. The full traceback of an
unexpected error goes to that file only (nodes.errors.TRACEBACKS); the console gets one line.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys

from nodes.errors import TRACEBACKS

FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def rank_logging(run_dir: str, rank: int, under_hydra: bool = False) -> None:
    """Console and log file of one rank. Under Hydra (launch.train) Hydra's console handler
    stays and only its file handler, which every rank would share, is replaced; otherwise
    (launch.node, a Slurm task) the console line names the rank."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if not under_hydra or isinstance(h, logging.FileHandler):
            root.removeHandler(h)
    if not under_hydra:
        console = logging.StreamHandler(sys.stdout)
        console.setFormatter(logging.Formatter(f"[rank {rank}]{FORMAT}"))
        root.addHandler(console)
    fh = logging.FileHandler(os.path.join(run_dir, "train.log" if rank == 0 else f"train_rank{rank}.log"))
    fh.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(fh)
    root.setLevel(logging.INFO)
    for h in list(TRACEBACKS.handlers):
        if isinstance(h, logging.FileHandler):
            TRACEBACKS.removeHandler(h)
    TRACEBACKS.addHandler(fh)


def traceback_to_file(exc: BaseException, what: str) -> None:
    """The full traceback into the rank's log file; onto the console where there is no file."""
    if any(isinstance(h, logging.FileHandler) for h in TRACEBACKS.handlers):
        TRACEBACKS.error("%s", what, exc_info=(type(exc), exc, exc.__traceback__))
    else:
        logging.getLogger("launch").error("%s", what, exc_info=(type(exc), exc, exc.__traceback__))


@contextlib.contextmanager
def run_log(run_dir: str):
    """A run's train.log and its tracebacks for the duration of the block, in a process that goes on
    after it (launch.api): the caller's handlers and level are left as they were, and the file is
    closed after."""
    fh = logging.FileHandler(os.path.join(run_dir, "train.log"))
    fh.setFormatter(logging.Formatter(FORMAT))
    TRACEBACKS.addHandler(fh)
    try:
        with _root_handler(fh):
            yield
    finally:
        TRACEBACKS.removeHandler(fh)
        fh.close()


@contextlib.contextmanager
def console_log(quiet: bool = False):
    """A run's log lines on stdout as the command line shows them (Hydra's console handler: this
    format, this stream) for the duration of the block, in a process that goes on after it
    (launch.api); quiet: its warnings and errors only. None is added where the caller's own logging
    has a console handler already: it shows them."""
    root = logging.getLogger()
    if any(type(h) is logging.StreamHandler and h.stream in (sys.stdout, sys.stderr) for h in root.handlers):
        yield
        return
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(logging.Formatter(FORMAT))
    console.setLevel(logging.WARNING if quiet else logging.INFO)
    with _root_handler(console):
        yield


@contextlib.contextmanager
def _root_handler(handler: logging.Handler):
    """`handler` on the root logger for the block, the root's level lowered to INFO at most (the
    run's lines reach it); both as they were after."""
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO) if level else logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
