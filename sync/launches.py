"""Which launch of a run this process belongs to: the key of its elastic rendezvous' keys.

A run directory outlives its launches: a run that finished, stopped or failed can be started again
(a relaunch, which resumes from its last checkpoint), by the same command or another. The elastic
rendezvous file (sync.rendezvous) keeps every launch's generations under a key of that launch, so a
relaunch never reads the last launch's state: before this, a relaunch under srun or torchrun found
the finished launch's `over` mark and every rank left at once with exit 0, training nothing.

Every rank of one launch must derive the same key, and two launches different ones:

- DISTRL_LAUNCH_ID, set by our own spawners (launch.spawn.local, the chaos soak) for their ranks;
- a Slurm step of several tasks (srun, launcher=slurm, torchrun started by srun): job id, step id
  and the job's restart count (a requeued job runs step 0 again: a new launch that resumes);
- a one-node element of a launcher.array=true job array: the array's job id (an element that
  requeues itself rejoins the elements still running, so the restart count is not part of it);
- torchrun: its agents' store (MASTER_ADDR:MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE) lives as
  long as the launch, so the first rank to ask writes a fresh token there and every rank reads it;
  with torchrun's restart count (a worker group restarted by `--max-restarts` resumes as a new
  launch). TORCHELASTIC_RUN_ID alone would not do: static rendezvous sets it to "none", and users
  reuse `--rdzv-id` across launches.
- anything else (a node started by hand to join a run in progress): None, the run's current launch.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from datetime import timedelta

ENV = "DISTRL_LAUNCH_ID"
TOKEN_KEY = "distrl/launch"  # in torchrun's agent store


def launch_id(env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> str | None:
    """This process's launch key, or None for a node that joins the run's current launch."""
    env = os.environ if env is None else env
    if env.get(ENV):
        return env[ENV]
    if env.get("SLURM_JOB_ID") and env.get("SLURM_STEP_ID") and int(env.get("SLURM_STEP_NUM_TASKS") or 1) > 1:
        # (an element of hydra-submitit's sweep arrays runs its ranks as such a step: its own job id)
        return f"slurm-{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}.{env.get('SLURM_RESTART_COUNT') or 0}"
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"slurm-array-{env['SLURM_ARRAY_JOB_ID']}"
    if "TORCHELASTIC_RUN_ID" in env and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        token = torchrun_token(env["MASTER_ADDR"], int(env["MASTER_PORT"]), timeout_s)
        return f"torchrun-{token}.{env.get('TORCHELASTIC_RESTART_COUNT') or 0}"
    return None


def torchrun_token(addr: str, port: int, timeout_s: float) -> str:
    """A token every worker of one torchrun launch shares: the first to ask writes it in the
    agents' store, the others read it (compare_set: one write wins)."""
    import torch.distributed as dist

    store = dist.TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=timeout_s))
    return store.compare_set(TOKEN_KEY, "", uuid.uuid4().hex[:12]).decode()


def new_launch() -> str:
    """A launch key for the ranks one of our spawners starts."""
    return "local-" + uuid.uuid4().hex[:12]
