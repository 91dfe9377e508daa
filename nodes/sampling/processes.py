"""A node's worker processes: starting, supervising and stopping them (`WorkerPool`).

Every worker: dies with its parent (PR_SET_PDEATHSIG), joins the janitor's process group (so
the janitor can kill it and its VizDoom engine if the main process is SIGKILLed), ignores SIGINT
(Ctrl-C reaches the main process, which stops everyone in order), uses one torch thread, and
reports an exception's traceback on the report queue before exiting non-zero.

Workers start from a fork server (multiprocessing's forkserver) that imported torch and the
worker modules once: a spawned worker imported them itself, about a second of CPU per worker,
paid again by every node launch (and by the test suite's few hundred launches). A launch starts
the server before it imports torch (nodes.sampling.fork_server), so that the server's imports run beside
the main process's own. What a spawned worker got from the main process at its start, a forked
one gets as a spawned one did: the environment and working directory are sent with each start
and set first (the server's are those of its own start), and the server is started with the stop
signals blocked, a mask every worker inherits. A worker that must not see a GPU hides it itself
(CUDA_VISIBLE_DEVICES="", read when CUDA is first used, which the server never does). The server
exits when this process does, and a worker's parent is the server: PR_SET_PDEATHSIG still ends
it, since the server ends with us (and the janitor kills the group whatever happens).
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import queue
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing import util as mp_util
from typing import Any

import torch
import torch.multiprocessing as mp
from faster_fifo import Queue

from nodes import janitor as janitor_script
from nodes.config.layout import in_rounds
from nodes.errors import Stopped, WorkerFailed
from nodes.run.signals import StopSignals
from nodes.sampling.buffers import Control, allocate
from nodes.sampling.fork_server import ensure_fork_server, start_context
from nodes.sampling.placement import worker_cpus
from nodes.sampling.policy_worker import run_policy_worker
from nodes.sampling.rollout_worker import run_rollout_worker
from nodes.sampling.weights import SharedWeights

log = logging.getLogger("nodes")

PR_SET_PDEATHSIG = 1
JANITOR = janitor_script.__file__  # run by path: it imports nothing of ours


def start_janitor(run_dir: str | None = None) -> subprocess.Popen:
    """The janitor of this process's workers (nodes/janitor.py); run_dir: where they and this
    process write (their working directories, this process's temp files), for it to clean."""
    # multiprocessing's temp dir of this process (made here if the fork server has not made it yet; it
    # is removed at our normal exit), for the janitor to remove if we are killed
    temp_dir = mp_util.get_temp_dir()
    return subprocess.Popen([sys.executable, JANITOR, str(os.getpid()), temp_dir, *([run_dir] if run_dir else [])],
                            stdin=subprocess.PIPE, process_group=0, close_fds=True)


def stop_janitor(janitor: subprocess.Popen, timeout: float = 20.0) -> None:
    try:
        janitor.stdin.write(janitor_script.STOP)  # an orderly stop: this process lives on
        janitor.stdin.close()
        janitor.wait(timeout)
    except (OSError, subprocess.TimeoutExpired):
        janitor.kill()


@dataclass
class Channels:
    """Every queue of one node. Messages are small tuples of indices, never observations."""

    requests: Any  # rollout worker -> policy workers: (worker, group)
    actions: list[Any]  # policy worker -> rollout worker w: group
    trajectories: list[Any]  # rollout workers -> learner: finished slot, one queue per population member
    free_slots: Any  # learner -> rollout workers: slot to fill
    # everyone -> main: ("episode", reward, length in env frames, true objective, match result or None, member,
    #                    opponents' members) |
    # ("error", who, text) |
    # ("ready", who[, device]) | ("restart", who, reason): a match between agents was restarted
    reports: Any

    @classmethod
    def create(cls, num_workers: int, members: int = 1) -> Channels:
        return cls(Queue(1 << 20), [Queue(1 << 16) for _ in range(num_workers)],
                   [Queue(1 << 20) for _ in range(members)], Queue(1 << 20), Queue(1 << 22))


# A forked worker re-runs the main module (launch.node, launch.train) by name while the server's
# preload already imported it, and runpy warns about exactly that ("found in sys.modules after
# import of package ... may result in unpredictable behaviour"): expected here, every worker, once
warnings.filterwarnings("ignore", message=r".*found in sys\.modules after import of package", category=RuntimeWarning)


def boot_worker(pgid: int, cpus: set[int] | None, gpu: bool = True) -> None:
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # parent died before we could ask to follow it
        os._exit(1)
    with contextlib.suppress(OSError):
        os.setpgid(0, pgid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not gpu:  # envs never need one; a CUDA context would cost ~300 MB each
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    torch.set_num_threads(1)
    if cpus:
        os.sched_setaffinity(0, cpus)


def _entry(fn, who: str, pgid: int, cpus: set[int] | None, gpu: bool, reports, args, env: dict, cwd: str) -> None:
    os.environ.clear()  # the main process's environment at this worker's start, not the server's
    os.environ.update(env)
    os.chdir(cwd)
    boot_worker(pgid, cpus, gpu)
    try:
        fn(*args)
    except SystemExit:  # a worker leaving its loop because the node is stopping
        pass
    except BaseException:  # noqa: BLE001 - report everything, then exit non-zero
        with contextlib.suppress(Exception):
            reports.put(("error", who, traceback.format_exc()), timeout=1.0)
        os._exit(1)


def spawn(fn, who: str, pgid: int, cpus: set[int] | None, reports, *args, gpu: bool = True) -> mp.Process:
    """Start fn(*args) in a worker (who: its name in reports) on `cpus` (None: wherever this process
    may run); gpu=False hides the GPUs from it."""
    ctx = start_context()
    p = ctx.Process(target=_entry, args=(fn, who, pgid, cpus, gpu, reports, args, dict(os.environ), os.getcwd()),
                    name=who, daemon=True)
    p.start()
    return p


class WorkerPool:
    """The worker processes of one node and everything they share with it: the queues, the
    trajectory buffers, the weights hand-off, the control block, the janitor.

    start_version: the learner's version (the envs' and the action draws' streams depend on it).
    `start(phase)` starts policy workers (not for "simulate") and rollout workers (on their cores:
    sampler.pin_workers), and returns once each has reported ready; `poll()` takes the workers'
    reports (episodes go to `on_episode`, an error report raises WorkerFailed); `check_alive()`
    raises WorkerFailed when a worker died; `stop()` stops them all, in order, and the janitor last.
    """

    def __init__(self, cfg, rank: int, spec, models: list, signals: StopSignals,
                 on_episode: Callable[..., None], worker_cores: list[int], start_version: int = 0,
                 shaping: torch.Tensor | None = None):
        """models: what the policy workers serve, the learners' models (one per population member)
        then any self-play snapshots; shaping: the members' reward-shaping weights [P, K]
        (Control.shaping)."""
        s = cfg.sampler
        self.cfg, self.rank, self.spec, self.signals, self.on_episode = cfg, rank, spec, signals, on_episode
        self.worker_cores = worker_cores  # the rollout workers' cores (worker w's alone, w % len, when pinned)
        self.restarts = 0  # matches between agents restarted after an engine died or hung
        self.control = Control.create(s.num_workers, start_version, s.num_policy_workers, shaping)
        learners = cfg.population.size  # the members with trajectory queues and batches
        self.channels = Channels.create(s.num_workers, learners)
        self.buffers = allocate(spec, s, models[0].state_size, learners)
        # one weights hand-off per member (the policy workers hold every member's model)
        self.weights = [SharedWeights(m, s.policy_device or cfg.train.device) for m in models]
        self.janitor: subprocess.Popen | None = None
        self.procs: list[mp.Process] = []
        self.ready = 0  # workers that reported ready

    def start(self, phase: str, timeout_s: float = 300.0) -> None:
        """phase: "train" and "sample" start policy and rollout workers; "simulate" only rollout
        workers, stepping with random actions."""
        s, ch, cfg = self.cfg.sampler, self.channels, self.cfg
        ensure_fork_server(self.signals)  # its workers inherit the mask (no-op: the node started it)
        with self.signals.blocked():  # the janitor inherits the mask
            resource_tracker.ensure_running()
            with self.signals.blocked():  # starting the tracker unblocked them in this thread
                self.janitor = start_janitor(cfg.run_dir)
                pgid = self.janitor.pid
                if phase != "simulate":
                    for i in range(s.num_policy_workers):
                        self.procs.append(spawn(run_policy_worker, f"policy worker {i}", pgid, None, ch.reports,
                                                cfg, self.rank, i, self.spec, self.buffers, ch, self.control,
                                                self.weights, s.policy_device or cfg.train.device))
                    if not in_rounds(s):  # in rounds each env owns its slots (nodes.sampling.rollout_worker)
                        ch.free_slots.put_many(list(range(self.buffers.num_slots)))
                cores = self.worker_cores
                for w in range(s.num_workers):
                    self.procs.append(spawn(run_rollout_worker, f"rollout worker {w}", pgid,
                                            worker_cpus(s.pin_workers, cores, w), ch.reports,
                                            cfg, self.rank, w, self.buffers, ch, self.control,
                                            phase == "simulate", gpu=False))
        deadline = time.time() + timeout_s
        while self.ready < len(self.procs):
            if time.time() > deadline:
                raise WorkerFailed(f"workers not ready after {timeout_s:.0f} s ({self.ready}/{len(self.procs)})")
            self.poll()
            self.check_alive()
            if self.signals.received is not None and not self.signals.vote:  # several nodes: a vote, later
                raise Stopped(self.signals.received)

    def poll(self, timeout: float = 0.05) -> None:
        """Take the workers' reports (waiting up to `timeout` for the first one; 0: no wait)."""
        try:
            msgs = self.channels.reports.get_many(block=timeout > 0, timeout=timeout)
        except queue.Empty:
            return
        for m in msgs:
            if m[0] == "episode":
                self.on_episode(*m[1:])  # reward, length, true objective, match result, member, opponents
            elif m[0] == "ready":
                self.ready += 1
                if len(m) > 2:
                    log.info("%s ready on %s", m[1], m[2])
            elif m[0] == "restart":
                self.restarts += 1
                log.warning("%s: a VizDoom match between agents was restarted (%d so far on this node): %s",
                            m[1], self.restarts, m[2])
            elif m[0] == "error":
                raise WorkerFailed(f"{m[1]} crashed:\n{m[2].rstrip()}")

    def check_alive(self) -> None:
        for p in self.procs:
            if p.exitcode is not None and not self.control.stop[0]:
                self.poll(timeout=0.0)  # prefer the worker's own traceback if it sent one
                raise WorkerFailed(f"{p.name} exited unexpectedly (exit code {p.exitcode})")

    @property
    def shared_bytes(self) -> int:
        """Bytes of the node's own shared memory: trajectory buffers, control block, weights."""
        tensors = [getattr(self.buffers, f.name) for f in dataclasses.fields(self.buffers)]
        tensors += [getattr(self.control, f.name) for f in dataclasses.fields(self.control)
                    if isinstance(getattr(self.control, f.name), torch.Tensor)]
        tensors += [t for w in self.weights for t in (w.flat, w.meta)]
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def worker_steps(self) -> int:
        """Agent steps taken by all rollout workers so far."""
        return int(self.control.worker_steps.sum())

    def stop(self, timeout_s: float = 15.0, keep_janitor: bool = False) -> None:
        """Every worker stopped (killed after timeout_s); the janitor too unless `keep_janitor`: a
        node keeps it until its final checkpoint and summary are written (release_janitor), to
        remove what they leave if the node is killed meanwhile."""
        self.control.stop[0] = 1
        deadline = time.time() + timeout_s
        for p in self.procs:
            p.join(max(0.1, deadline - time.time()))
        for p in self.procs:
            if p.is_alive():
                log.warning("%s did not stop in time; killing it", p.name)
                p.kill()
                p.join(5)
        if not keep_janitor:
            self.release_janitor()

    def release_janitor(self) -> None:
        if self.janitor is not None:
            stop_janitor(self.janitor)
            self.janitor = None
