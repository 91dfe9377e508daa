"""How one rank is run: the workers' fork server started first, the node trained, its peers left;
the process exit code (launch.process.exits says what each one means)."""
from __future__ import annotations

import signal
import threading
from collections.abc import Sequence

from launch.process.exits import report
from nodes.errors import Stopped, TooFewNodes
from nodes.run.signals import DEFAULT as DEFAULT_STOP_SIGNALS


def run_node(cfg, peers=None, stop_signals: Sequence[int] = DEFAULT_STOP_SIGNALS, placement=None,
             last: bool = True) -> int:
    """Train one node (one rank with `peers`, which it leaves at the end); the exit code.
    placement: where the rank runs (nodes.sampling.placement; the node finds it when not given).
    last: the process exits after it, so the stop signals are ignored from the node's end on
    (`ignore`); not in a Hydra sweep, whose next point runs in this process."""
    from nodes.run.signals import StopSignals
    from nodes.sampling.fork_server import ensure_fork_server

    # the server imports torch and the workers' modules while this process imports the node's
    ensure_fork_server(StopSignals(stop_signals))
    from nodes.node import Node

    clean = False  # every rank left after the same iteration (then rank 0 waits for the others)
    try:
        Node(cfg, peers, stop_signals=stop_signals, placement=placement).run()
        clean = True
        return 0
    except (Stopped, TooFewNodes) as exc:
        clean = True
        return report(exc)
    except (Exception, KeyboardInterrupt) as exc:
        return report(exc)
    finally:
        if last:
            ignore(stop_signals)
        if peers is not None:
            peers.close(clean)


def ignore(signums: Sequence[int]) -> None:
    """The node's run is over: a stop signal has nothing left to stop, and its default action would
    end the process before its exit's cleanup (multiprocessing's temp dir: the node's janitor, told
    to stop, no longer removes it). A process that must go now gets SIGKILL, as launchers send after
    their grace."""
    if threading.current_thread() is threading.main_thread():
        for signum in signums:
            signal.signal(signum, signal.SIG_IGN)
