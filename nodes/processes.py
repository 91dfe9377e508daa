"""Starting and supervising a node's worker processes.

Every worker: dies with its parent (PR_SET_PDEATHSIG), joins the janitor's process group (so
the janitor can kill it and its VizDoom engine if the main process is SIGKILLed), ignores SIGINT
(Ctrl-C reaches the main process, which stops everyone in order), uses one torch thread, and
reports an exception's traceback on the report queue before exiting non-zero.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass
from typing import Any, List, Optional

import torch.multiprocessing as mp
from faster_fifo import Queue

PR_SET_PDEATHSIG = 1
JANITOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "janitor.py")


def start_janitor() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, JANITOR], stdin=subprocess.PIPE, process_group=0,
                            close_fds=True)


def stop_janitor(janitor: subprocess.Popen, timeout: float = 20.0) -> None:
    try:
        janitor.stdin.close()
        janitor.wait(timeout)
    except (OSError, subprocess.TimeoutExpired):
        janitor.kill()


@dataclass
class Channels:
    """Every queue of one node. Messages are small tuples of indices, never observations."""

    requests: Any  # rollout worker -> policy workers: (worker, group)
    actions: List[Any]  # policy worker -> rollout worker w: group
    trajectories: Any  # rollout workers -> learner: finished slot
    free_slots: Any  # learner -> rollout workers: slot to fill
    reports: Any  # everyone -> main: ("episode", reward, length) | ("error", who, text) | ("ready", who)

    @classmethod
    def create(cls, num_workers: int) -> "Channels":
        return cls(Queue(1 << 20), [Queue(1 << 16) for _ in range(num_workers)], Queue(1 << 20),
                   Queue(1 << 20), Queue(1 << 22))


def boot_worker(pgid: int, cpu: Optional[int]) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    if os.getppid() == 1:  # parent died before we could ask to follow it
        os._exit(1)
    try:
        os.setpgid(0, pgid)
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch
    torch.set_num_threads(1)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def _entry(fn, who: str, pgid: int, cpu: Optional[int], reports, args) -> None:
    boot_worker(pgid, cpu)
    try:
        fn(*args)
    except SystemExit:  # a worker leaving its loop because the node is stopping
        pass
    except BaseException:  # noqa: BLE001 - report everything, then exit non-zero
        try:
            reports.put(("error", who, traceback.format_exc()), timeout=1.0)
        except Exception:  # noqa: BLE001
            pass
        os._exit(1)


def spawn(fn, who: str, pgid: int, cpu: Optional[int], reports, *args) -> mp.Process:
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_entry, args=(fn, who, pgid, cpu, reports, args), name=who, daemon=True)
    p.start()
    return p
