"""A rank inside a Slurm job: training under the preemption signal, then the checkpoint and the requeue."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time

from launch.slurm.checks import preempt_signal
from nodes.config.schema import Config
from nodes.run.signals import DEFAULT as DEFAULT_STOP_SIGNALS

log = logging.getLogger("launch.slurm")


def run_slurm_rank(cfg: Config, world, rendezvous=None) -> int:
    """Train as one rank of a Slurm step (world None: a one-task job, the single-node fallback), or
    as an array element (`rendezvous`: its elastic rendezvous). Returns the exit code; after the
    preemption signal, requeues the job (an array: every element itself) and raises SystemExit."""
    sig = preempt_signal(cfg.launcher.signal)
    env = os.environ
    rank = world.rank if world else 0
    log.info("rank %d: Slurm job %s task %s on node %s (restart %s)", rank, env.get("SLURM_JOB_ID", "?"),
             env.get("SLURM_PROCID", "?"), env.get("SLURMD_NODENAME", "?"), env.get("SLURM_RESTART_COUNT", "0"))
    if rendezvous is not None:  # an array element: SIGTERM is its own, not a vote (SlurmArrayTask)
        from launch.spawn.ranks import run_rank
        code = run_rank(cfg, world, (signal.SIGINT, sig), rendezvous)
    elif world is not None:
        from launch.spawn.ranks import run_rank
        code = run_rank(cfg, world, (*DEFAULT_STOP_SIGNALS, sig))
    else:
        from launch.spawn.driver import run_node
        code = run_node(cfg, stop_signals=(*DEFAULT_STOP_SIGNALS, sig))
    if code != 128 + sig:
        return code
    # every rank got the signal and stopped after the same iteration; rank 0 has checkpointed.
    # One job: rank 0 requeues it; an array: each element its own job
    previous = signal.getsignal(signal.SIGTERM)
    killed = catch_requeue_kill()  # before the requeue: its SIGTERM can come before scontrol returns
    if (rank == 0 or rendezvous is not None) and not requeue(cfg):
        signal.signal(signal.SIGTERM, previous)
        return code
    await_requeue_kill(killed)
    # the job comes back: leave without a submitit result (it would mark the job as done)
    raise SystemExit(code)


def catch_requeue_kill() -> threading.Event:
    """An event set by the next SIGTERM (a handler, not sigwait: the kernel hands a process's SIGTERM
    to any thread that does not block it, and rank 0's rendezvous store has threads of its own,
    where a sigwait in the main thread never saw it and the task sat out KillWait until its SIGKILL)."""
    killed = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: killed.set())  # Python runs it in the main thread
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    return killed


def await_requeue_kill(killed: threading.Event, timeout_s: float = 60.0) -> None:
    """Leave when the requeue kills the job's tasks (SIGTERM, then SIGKILL after KillWait), not
    before: a job whose tasks all exit on their own while it is being requeued can end FAILED."""
    deadline = time.monotonic() + timeout_s
    while not killed.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)  # a signal ends the sleep and its handler runs
    if not killed.is_set():
        log.warning("no requeue of Slurm job %s after %.0f s: leaving", os.environ.get("SLURM_JOB_ID"), timeout_s)


def requeue(cfg: Config) -> bool:
    job = os.environ.get("SLURM_JOB_ID")
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    if not job:
        return False
    if restarts >= cfg.launcher.max_requeues:
        log.error("not requeueing Slurm job %s: it already ran %d times (launcher.max_requeues=%d)", job,
                  restarts + 1, cfg.launcher.max_requeues)
        return False
    try:
        proc = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:  # e.g. a container without a Slurm client
        log.error("scontrol requeue %s failed: %s", job, exc)
        return False
    if proc.returncode != 0:
        log.error("scontrol requeue %s failed: %s", job, (proc.stderr or proc.stdout).strip())
        return False
    log.info("requeued Slurm job %s after the checkpoint (restart %d); its next run resumes from it",
             job, restarts + 1)
    return True
