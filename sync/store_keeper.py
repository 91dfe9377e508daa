"""The store keeper: a child process that hosts one elastic generation's TCPStore.

Started by the generation's lowest node (sync.rendezvous) from the node's fork server
(nodes.sampling.fork_server), which has torch imported already: a keeper serves within milliseconds, where
a new interpreter (`python -m`) would take ~1.1 s to import torch at every generation a node forms,
the first one and each one after a loss. It sends the port it listens on, then serves until the pipe
from its node reaches end-of-file, which happens when that node exits or is killed (not
PR_SET_PDEATHSIG: that fires when the *thread* that started the child ends). A child process, not
a thread of the trainer: a trainer frozen by SIGSTOP would freeze a store in its own process, and
store calls to a frozen TCPStore block with no timeout.

A keeper names itself `store_keeper` (its comm, what `ps -o comm` and plain `pgrep` match) and
works in its run's elastic directory, so that `running(run_dir)` finds one left behind.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal

NAME = b"store_keeper"
PR_SET_NAME = 15


def serve(size: int, timeout_s: float, workdir: str, port_out, node_alive, addr: str = "0.0.0.0",
          named: str = "") -> None:
    """The keeper's body (in the fork server's child): host the store on `addr` (how the other
    nodes reach this one: sync.listen), send its port on `port_out`, serve until `node_alive` (the
    node's end of a pipe) is closed. A store it cannot host (an address not of this host, which
    `named` names: sync.listen.not_here) is sent instead, as the ConfigError its node raises."""
    # Ctrl-C, scancel's SIGTERM and Slurm's preemption signal reach every process of a step: they
    # are for the trainer, which stops after an iteration that still needs this store
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):  # not Linux: only the leftover check loses its handle
        ctypes.CDLL(None).prctl(PR_SET_NAME, NAME, 0, 0, 0)
    os.chdir(workdir)
    from nodes.errors import ConfigError
    from sync.listen import serving_store

    try:
        store = serving_store(addr, 0, size, timeout_s, wait_for_workers=False, named=named)
    except ConfigError as exc:
        port_out.send(exc)
        os._exit(0)
    port_out.send(store.port)
    port_out.close()
    with contextlib.suppress(EOFError, OSError):
        node_alive.recv()  # nothing is ever sent: end-of-file when the node is gone
    # at once, without the store's destructor: a server tearing down still accepts connections and
    # answers none, which made a survivor's heartbeat look block for 10+ s before it saw the loss
    os._exit(0)


def running(run_dir: str) -> list[int]:
    """The pids of the store keepers of the run in `run_dir` still running."""
    root = os.path.realpath(run_dir) + os.sep
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm", "rb") as f:
                if f.read().strip() != NAME:
                    continue
            if (os.path.realpath(os.readlink(f"/proc/{pid}/cwd")) + os.sep).startswith(root):
                pids.append(int(pid))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids
