"""How a process ends: what the user sees and the exit code, in one place.

    0                 finished
    2                 refused: a bad config value, or a checkpoint that does not fit (`error: ...`)
    128 + signal      stopped by a signal after a final checkpoint (130: Ctrl-C)
    75                stopped with a checkpoint: fewer nodes left than sync.min_nodes (EX_TEMPFAIL:
                      relaunch to resume)
    1                 failed: a worker crashed (its traceback is shown), a peer was lost or
                      diverged (one line naming it), or an unexpected error (one line on the
                      console, the full traceback in the rank's log file)
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading

from launch.process.logs import traceback_to_file
from nodes import janitor
from nodes.errors import CheckpointError, ConfigError, Stopped, TooFewNodes, WorkerFailed, one_line
from nodes.run.signals import DEFAULT as DEFAULT_STOP_SIGNALS

log = logging.getLogger("launch")
TOO_FEW_NODES = 75


def refuse(message: str) -> None:
    """The one-line refusal of bad input before anything starts: `error: <message>` on stderr, exit code 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def exit_now(code: int):
    """Exit with `code` as sys.exit would at the end of an entry point, minus the interpreter's
    teardown of its modules: garbage collection and finalisers with torch loaded, a noticeable
    part of a second, paid by every launch and every node process. What the teardown would have done
    first is done here: non-daemon threads waited for, the atexit handlers run (log files flushed
    and closed, multiprocessing's children joined, a node's store keepers released), stdio flushed.
    An exception or sys.exit before this point takes the ordinary way out.

    One thing the teardown does is not done by atexit: torch removes the /dev/shm files that count
    the users of the CUDA tensors a process shared (a GPU node's weights, mapped by its policy
    workers) in a C++ static destructor, which os._exit skips; they are removed here, or every GPU
    run would leave one behind. Nothing in this process can use them after."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    janitor.remove(janitor.torch_ipc_files(os.getpid()))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def report(exc: BaseException) -> int:
    """Tell the user how the run ended (at most one line, besides a crashed worker's own
    traceback); returns the exit code."""
    from sync.dist_peers import Diverged, PeerLost
    from sync.rendezvous import RunOver

    if isinstance(exc, Stopped):
        return 128 + exc.signum  # the node logged the signal and its final checkpoint
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, RunOver):  # a node came to join a run that has ended: nothing failed
        print(f"{exc}", file=sys.stderr, flush=True)
        return 0
    if isinstance(exc, TooFewNodes):
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return TOO_FEW_NODES
    if isinstance(exc, (ConfigError, CheckpointError)):
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    if isinstance(exc, WorkerFailed):
        log.error("%s", exc)  # the worker's own traceback is the message
    elif isinstance(exc, (PeerLost, Diverged)):
        log.error("%s", one_line(exc))
    else:
        log.error("%s: %s (traceback in the log file)", type(exc).__name__, one_line(exc))
        traceback_to_file(exc, f"unexpected {type(exc).__name__}")
    return 1


def stop_signal(code: int) -> str | None:
    """The name of the stop signal (SIGINT, SIGTERM) a node exit code says the node stopped on,
    after its final checkpoint (`report`: 128 + signal); None for any other code."""
    import signal
    return next((signal.Signals(s).name for s in DEFAULT_STOP_SIGNALS if code == 128 + s), None)


def tool_failed(tool: str, exc: BaseException) -> int:
    """A benchmark tool's end by an exception: the one-line report, and for a stop the line that
    says what stopped it; returns the exit code."""
    code = report(exc)
    if isinstance(exc, (Stopped, KeyboardInterrupt)):
        print(f"{tool}: stopped by {exc if isinstance(exc, Stopped) else 'SIGINT'}", file=sys.stderr, flush=True)
    return code
