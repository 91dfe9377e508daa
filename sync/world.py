"""Which world this process belongs to, read from the environment it was started in.

Sources, in order: torchrun (and our local spawner), which set RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT / LOCAL_RANK; then a Slurm job step with several tasks (srun), which sets
SLURM_PROCID / SLURM_STEP_NUM_TASKS / SLURM_LOCALID / SLURM_STEP_NODELIST. A Slurm batch script
(no step) is not a world: it is where a launcher starts one. The rendezvous port comes from the
environment (launch.slurm.step puts the one rank 0 publishes there), else from the Slurm job and
step ids (so every task of a step derives the same one).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

# Ports derived from a job id: above the privileged ports and below Linux's ephemeral range
# (32768-60999, where the kernel picks outgoing connections' local ports, which would hold ours)
PORT_BASE, PORT_SPAN = 20000, 32768 - 20000


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    master_addr: str
    master_port: int
    source: str  # "env" (RANK/WORLD_SIZE: torchrun, launch.spawn.local) | "slurm" (an srun step)


def first_host(nodelist: str) -> str:
    """First host name of a Slurm node list such as 'n[1-3,7],gpu2' -> 'n1'."""
    if shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                                 text=True, timeout=10).stdout.split()
            if out:
                return out[0]
        except (OSError, subprocess.SubprocessError):
            pass
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if not m:
        return nodelist
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def port_for_job(job_id: str, step_id: str = "0") -> int:
    """The same port on every task of a step, when nothing set one (launch.slurm.step publishes a
    free port instead for the runs it starts). A hash of job and step: ids that differ by the span,
    and two steps of one job, get different ports (two jobs on one node still can collide)."""
    return PORT_BASE + zlib.crc32(f"{job_id}.{step_id}".encode()) % PORT_SPAN


def launched_size(env: Mapping[str, str] | None = None) -> int:
    """How many ranks torchrun or an srun step started (what `detect` finds), 1 outside one."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["WORLD_SIZE"])
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and env.get("SLURM_STEP_NUM_TASKS"):
        return int(env["SLURM_STEP_NUM_TASKS"])
    return 1


def detect(env: Mapping[str, str] | None = None) -> World | None:
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        size = int(env["WORLD_SIZE"])
        if size <= 1:
            return None
        port = env.get("MASTER_PORT") or (port_for_job(env["SLURM_JOB_ID"], env.get("SLURM_STEP_ID", "0"))
                                           if "SLURM_JOB_ID" in env else None)
        if not port:
            raise RuntimeError("RANK/WORLD_SIZE are set but MASTER_PORT is not")
        return World(int(env["RANK"]), size, int(env.get("LOCAL_RANK", 0)),
                     env.get("MASTER_ADDR", "127.0.0.1"), int(port), "env")
    ntasks = env.get("SLURM_STEP_NUM_TASKS")
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and ntasks and int(ntasks) > 1:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "127.0.0.1")
        port = env.get("MASTER_PORT") or port_for_job(env.get("SLURM_JOB_ID", "0"), env["SLURM_STEP_ID"])
        return World(int(env["SLURM_PROCID"]), int(ntasks), int(env.get("SLURM_LOCALID", 0)),
                     env.get("MASTER_ADDR") or first_host(nodelist), int(port), "slurm")
    return None
