"""Inside a Slurm job step of several tasks: where its ranks meet (address and port)."""
from __future__ import annotations

import os
import re
import subprocess
from collections.abc import MutableMapping

from nodes.config import Config


def in_slurm_step(env=None) -> bool:
    env = os.environ if env is None else env
    return "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_JOB_ID" in env


def node_addr(name: str) -> str:
    """The address slurmctld reaches a node at (NodeAddr; on most clusters its host name)."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "node", name], capture_output=True, text=True,
                             timeout=20).stdout
        m = re.search(r"\bNodeAddr=(\S+)", out)
        if m:
            return m.group(1)
    except (OSError, subprocess.SubprocessError):
        pass
    return name


def prepare_env(cfg: Config, env: MutableMapping[str, str] | None = None) -> None:
    """Inside a Slurm step of several tasks (and no torchrun world): the rendezvous address is the
    first node's NodeAddr, and sync.master_port, when set, the port (else sync.world derives it
    from the job id, the same on every task)."""
    env = os.environ if env is None else env
    if "RANK" in env or not in_slurm_step(env) or int(env.get("SLURM_STEP_NUM_TASKS", "1") or 1) <= 1:
        return
    if cfg.sync.master_port and "MASTER_PORT" not in env:
        env["MASTER_PORT"] = str(cfg.sync.master_port)
    if "MASTER_ADDR" not in env:
        from sync.world import first_host
        env["MASTER_ADDR"] = node_addr(first_host(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"]))


def under_hydra_submitit() -> bool:
    """This process runs a Hydra job through hydra-submitit-launcher (hydra/launcher=submitit_slurm):
    the sweep directory was fixed by the submitting process, so every task has the same run dir."""
    return bool(os.environ.get("SUBMITIT_FOLDER")) and os.environ.get("SUBMITIT_EXECUTOR") == "slurm"
