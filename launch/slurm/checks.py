"""launcher=slurm values, checked before anything is submitted, and what a job asks each node for."""
from __future__ import annotations

import copy
import math
import re
import shutil
import signal

from nodes.config.schema import Config
from nodes.errors import ConfigError, need

# per process of a rank, resident memory besides the shared buffers (measured on CPU; a CUDA
# context adds about 0.5 GB to each process that opens one)
LEARNER_GB, POLICY_WORKER_GB, ROLLOUT_WORKER_GB, CUDA_CONTEXT_GB = 1.5, 0.5, 0.4, 0.5
SET_BY_LAUNCHER = ("nodes", "ntasks", "ntasks-per-node", "output", "error", "signal", "open-mode", "array")


def preempt_signal(name: str) -> int:
    sig = getattr(signal, "SIG" + name.upper().removeprefix("SIG"), None)
    if not isinstance(sig, signal.Signals) or sig in (signal.SIGKILL, signal.SIGSTOP):
        raise ConfigError(f"launcher.signal must name a catchable signal such as USR2, got '{name}'")
    return int(sig)


def check(cfg: Config) -> None:
    """launcher=slurm values; raises ConfigError with one line. Nothing is submitted before."""
    c = cfg.launcher
    need(c.tasks_per_node >= 1, f"launcher.tasks_per_node must be >= 1, got {c.tasks_per_node}")
    need(cfg.nodes % c.tasks_per_node == 0,
         f"nodes ({cfg.nodes}) must be a multiple of launcher.tasks_per_node ({c.tasks_per_node}): "
         "every Slurm node runs the same number of ranks")
    need(c.time_min >= 1, f"launcher.time_min must be >= 1 (minutes), got {c.time_min}")
    for key in ("gpus_per_node", "cpus_per_task", "mem_gb", "signal_delay_s", "max_requeues"):
        need(getattr(c, key) >= 0, f"launcher.{key} must be >= 0, got {getattr(c, key)}")
    need(c.signal_delay_s < c.time_min * 60,
         f"launcher.signal_delay_s ({c.signal_delay_s}) must be shorter than the time limit "
         f"(launcher.time_min={c.time_min} min)")
    need(c.poll_s > 0, f"launcher.poll_s must be > 0, got {c.poll_s}")
    need(not c.array or cfg.sync.elastic, "launcher.array=true needs sync.elastic=true: its elements join and "
         "leave the run one by one")
    need(not c.array or c.tasks_per_node == 1, "launcher.array=true runs one node per array element: "
         f"launcher.tasks_per_node must be 1, got {c.tasks_per_node}")
    preempt_signal(c.signal)
    need(bool(re.fullmatch(r"[A-Za-z0-9_.-]+", c.job_name)),
         f"launcher.job_name must be letters, digits, '_', '.', '-', got '{c.job_name}'")
    sbatch_options(c.sbatch)
    need(all(isinstance(line, str) for line in c.setup), "launcher.setup must be a list of shell lines")
    resources(cfg)


def shared_buffers_gb(cfg: Config) -> float:
    """The trajectory buffers one rank allocates in /dev/shm (observations dominate)."""
    import numpy as np

    from nodes.config.layout import num_slots
    from nodes.envs import env_spec

    spec = env_spec(cfg.env)
    obs_bytes = math.prod(spec.obs_shape) * np.dtype(spec.obs_dtype).itemsize
    s = cfg.sampler
    return num_slots(s, cfg.population.size) * (s.rollout + 1) * (obs_bytes + 4 * spec.meas_size + 64) / 2**30


def resources(cfg: Config) -> dict:
    """What one Slurm node is asked for: {gpus_per_node, cpus_per_task, mem_gb}, 0 = Slurm's
    default. With train.device=cuda: a GPU per task unless set, and cores and memory derived from
    the layout (a GPU node's Slurm defaults are one core and little memory); ConfigError when
    they cannot be derived or cannot fit."""
    c, s = cfg.launcher, cfg.sampler
    cuda = cfg.train.device.startswith("cuda")
    auto = s.num_workers == "auto"
    gpus = c.gpus_per_node or (c.tasks_per_node if cuda else 0)
    need(not cuda or gpus >= c.tasks_per_node,
         f"launcher.gpus_per_node ({gpus}) must be >= launcher.tasks_per_node ({c.tasks_per_node}) with "
         "train.device=cuda: one GPU per rank")
    need(not cuda or ":" not in cfg.train.device or c.tasks_per_node == 1,
         f"train.device={cfg.train.device} with launcher.tasks_per_node={c.tasks_per_node} puts every rank of a "
         "node on one GPU: use train.device=cuda")
    need(c.cpus_per_task or not auto,
         "sampler.num_workers=auto with launcher=slurm needs launcher.cpus_per_task (the cores each rank gets)")
    cpus = c.cpus_per_task
    if not cpus and cuda:  # a rollout worker per core, plus the learner and the policy workers
        cpus = s.num_workers + s.num_policy_workers + 1
    mem = c.mem_gb
    if not mem and cuda:
        workers = (cpus - s.num_policy_workers - 1) if auto else s.num_workers
        resolved = copy.deepcopy(cfg)
        resolved.sampler.num_workers = max(1, workers)
        per_task = (shared_buffers_gb(resolved) + LEARNER_GB + s.num_policy_workers * POLICY_WORKER_GB
                    + (1 + s.num_policy_workers) * CUDA_CONTEXT_GB + max(1, workers) * ROLLOUT_WORKER_GB)
        mem = math.ceil(1.25 * per_task * c.tasks_per_node)  # headroom over the estimate
    return dict(gpus_per_node=gpus, cpus_per_task=cpus, mem_gb=mem)


def sbatch_options(items) -> dict:
    """launcher.sbatch ["--exclusive", "--mail-type=END"] -> submitit's additional_parameters."""
    out = {}
    for item in items:
        m = re.fullmatch(r"--([A-Za-z][A-Za-z0-9-]*)(?:=(.*))?", str(item))
        if not m:
            raise ConfigError(f"launcher.sbatch takes long sbatch options such as --exclusive or --mail-type=END, "
                              f"got '{item}'")
        if m.group(1) in SET_BY_LAUNCHER:
            raise ConfigError(f"launcher.sbatch: --{m.group(1)} is set by the launcher (nodes=, "
                              "launcher.tasks_per_node=, launcher.signal=, <run_dir>/slurm/)")
        out[m.group(1).replace("-", "_")] = True if m.group(2) is None else m.group(2)
    return out


def need_slurm_commands() -> None:
    try:
        import submitit  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"launcher=slurm needs submitit ({exc}): pip install submitit") from None
    for tool in ("sbatch", "srun", "scontrol"):
        if shutil.which(tool) is None:
            raise ConfigError(f"{tool} not found: launcher=slurm submits with the Slurm client commands "
                              "(sbatch, srun, scontrol); run it where they are on PATH")
