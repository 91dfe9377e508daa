"""Where one rank runs on its host: its device, its share of the cores, and how many of each process.

Pure functions of what the rank can see (its environment variables, the GPUs visible to it, its
CPU affinity), so tests can fake torchrun, `srun -n`, submitit or the local spawner. The launcher
(launch.spawn.ranks, launch.spawn.driver) calls `place()` where the rank starts, never on the submitting host:
a login node without a GPU can submit a `train.device=cuda` job.

Rules (docs/gpu.md):
- One rank per GPU. With one GPU visible (per-task binding: every task sees its own as cuda:0) the
  rank takes cuda:0; with all of the host's GPUs visible, local rank r takes cuda:r. More ranks on
  a host than GPUs is refused with NCCL (it refuses two ranks on one GPU); with sync.backend=gloo
  ranks may share one. An explicit cuda:N is refused when a host runs several ranks.
- Ranks per host: LOCAL_WORLD_SIZE (torchrun, launch.spawn.local), else the Slurm step's tasks on this
  node (SLURM_STEP_TASKS_PER_NODE, set by `srun -n` and submitit alike, indexed by SLURM_NODEID),
  else SLURM_TASKS_PER_NODE, else 1.
- Cores: when Slurm bound this task to its own CPUs (SLURM_CPU_BIND_TYPE other than none), the
  affinity already is the rank's share; otherwise the ranks of a host split its affinity evenly.
  Rollout workers are pinned to the share; on a GPU rank the first cores are left to the learner
  and the policy workers when there are enough, and the learner uses 1-2 threads (more only spin);
  on a CPU rank the learner's threads are the cores the workers leave (at least one).
- Precision: train.precision=auto is bf16 where every device the rank computes on (its learner's
  and its policy workers') has bf16 units: a GPU of compute capability 8.0 or more, a CPU with
  AVX-512 BF16 or AMX (x86) or the BF16 extension (Arm); else fp32. Emulated bf16 is slower than
  fp32, so it is never chosen there.
"""
from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nodes.errors import ConfigError, need

CUDA_LEARNER_THREADS = 2


@dataclass(frozen=True)
class Placement:
    device: str  # the learner's device: cpu or cuda:N
    policy_device: str  # the policy workers' device
    num_workers: int  # rollout workers (sampler.num_workers=auto resolved)
    worker_cores: list[int]  # the rollout workers' cores: worker w's alone when pinned, worker_cores[w % len]
    learner_threads: int
    precision: str = "fp32"  # fp32 | bf16 (train.precision=auto resolved)
    pin_workers: bool = True  # sampler.pin_workers=auto resolved (pin_rollout_workers)


def expand_tasks_per_node(value: str) -> list[int]:
    """Slurm's compressed per-node task counts: '2(x3),1' -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in value.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return []
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def ranks_per_host(env: Mapping[str, str]) -> int:
    if env.get("LOCAL_WORLD_SIZE"):
        return max(1, int(env["LOCAL_WORLD_SIZE"]))
    node = int(env.get("SLURM_NODEID", "0") or 0)
    for key in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        counts = expand_tasks_per_node(env.get(key, ""))
        if counts:
            return counts[min(node, len(counts) - 1)]
    if env.get("SLURM_NTASKS_PER_NODE", "").isdigit():
        return int(env["SLURM_NTASKS_PER_NODE"])
    return 1


def local_rank(env: Mapping[str, str]) -> int:
    return int(env.get("LOCAL_RANK") or env.get("SLURM_LOCALID") or 0)


def slurm_bound_cpus(env: Mapping[str, str]) -> bool:
    """Slurm pinned this task to its own CPUs (--cpu-bind=cores, task/affinity)."""
    kind = env.get("SLURM_CPU_BIND_TYPE", "")
    return bool(kind) and not kind.startswith("none")


def where(env: Mapping[str, str]) -> str:
    return f"host {socket.gethostname()} (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')})"


def choose_device(device: str, rank_on_host: int, ranks_on_host: int, visible: int, backend: str,
                  env: Mapping[str, str]) -> str:
    """cpu, or the cuda:N this rank uses; ConfigError (one line naming the host) when impossible."""
    if not device.startswith("cuda"):
        return device
    need(visible > 0, f"train.device={device} but no CUDA device is visible on {where(env)}")
    shared_ok = backend == "gloo"
    if ":" in device:
        index = int(device.split(":", 1)[1])
        need(ranks_on_host == 1 or shared_ok,
             f"train.device={device} would put all {ranks_on_host} ranks of {where(env)} on one GPU: "
             "use train.device=cuda (one GPU per rank)")
        need(index < visible, f"train.device={device} but only {visible} CUDA device(s) are visible on {where(env)}")
        return device
    if visible == 1 and ranks_on_host > 1:
        # per-task binding (each task sees only its own GPU) or one GPU shared by every rank:
        # Slurm's count of the job's GPUs on this node tells them apart when it is there
        gpus_here = int(env.get("SLURM_GPUS_ON_NODE", "0") or 0)
        need(gpus_here >= ranks_on_host or shared_ok,
             f"{ranks_on_host} ranks on {where(env)} but {gpus_here or 1} GPU(s): one rank per GPU "
             "(launcher.gpus_per_node >= launcher.tasks_per_node), or sync.backend=gloo to share one")
        return "cuda:0"
    need(visible >= ranks_on_host or shared_ok,
         f"{ranks_on_host} ranks on {where(env)} but {visible} visible GPU(s): one rank per GPU, "
         "or sync.backend=gloo to share them")
    return f"cuda:{rank_on_host % visible}"


def core_share(affinity: Sequence[int], rank_on_host: int, ranks_on_host: int, bound: bool) -> list[int]:
    """This rank's cores: the whole affinity when Slurm bound it, else an even split of the host's."""
    cores = sorted(affinity)
    if bound or ranks_on_host <= 1:
        return cores
    per = len(cores) // ranks_on_host
    if per == 0:  # more ranks than cores: they share, one core each
        return [cores[rank_on_host % len(cores)]]
    return cores[rank_on_host * per : (rank_on_host + 1) * per]


def plan_processes(cores: list[int], num_workers: int | str, num_policy_workers: int, on_cuda: bool,
                   learner_threads: int, pin_offset: int = 0,
                   learns_alone: bool = False) -> tuple[int, list[int], int]:
    """(rollout workers, the cores they are pinned to, learner threads).

    num_workers="auto": every core of the share left after the learner and the policy workers
    (at least one). On a GPU rank with enough cores, the rollout workers keep off the first
    1 + num_policy_workers cores, where the learner and policy workers feed the GPU.

    Learner threads on a CPU: the cores the rollout and policy workers leave, at least one. They all
    compute at once, and a learner with more threads than free cores loses to its own barriers:
    every parallel kernel waits for its slowest thread, and with the cores shared one of them is
    often descheduled. On a 2-core node (2 workers, 1 policy worker) one thread trained faster
    than two in every alternated pair (`python -m launch.bench bench.modes=[async]`). learns_alone
    (sampler.mode=sync): the workers wait while the learner learns, so its threads are every core
    of the share: Pong with 4 x 4 minibatches trained faster with two threads than with one on a
    2-core node (docs/environments.md). The figures: docs/benchmarks.md#figures-behind-the-codes-choices.
    """
    reserved = 1 + num_policy_workers
    workers = max(1, len(cores) - reserved) if num_workers == "auto" else int(num_workers)
    worker_cores = cores
    if on_cuda and len(cores) > reserved:
        worker_cores = cores[reserved:]
    if pin_offset:
        k = pin_offset % len(worker_cores)
        worker_cores = worker_cores[k:] + worker_cores[:k]
    if learner_threads:
        threads = learner_threads
    elif on_cuda:
        threads = min(CUDA_LEARNER_THREADS, len(cores))
    elif learns_alone:
        threads = len(cores)
    else:
        threads = max(1, len(cores) - workers - num_policy_workers)
    return workers, worker_cores, threads


def choose_precision(precision: str, devices: Sequence[str], bf16_fast: Callable[[str], bool]) -> str:
    """train.precision for this rank: auto is bf16 when every one of `devices` is fast at it."""
    if precision != "auto":
        return precision
    return "bf16" if all(bf16_fast(d) for d in devices) else "fp32"


def cpu_has_bf16(cpuinfo: str) -> bool:
    """Whether /proc/cpuinfo's text shows bf16 units: AVX-512 BF16 or AMX-BF16 (x86), BF16 (Arm)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(value.split()))
    return False


def has_fast_bf16(device: str) -> bool:
    """bf16 units on this host's `device` (cpu or cuda:N)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_capability(torch.device(device)) >= (8, 0)
    try:
        with open("/proc/cpuinfo") as f:
            return cpu_has_bf16(f.read())
    except OSError:  # not Linux: no way to tell, keep fp32
        return False


def pin_rollout_workers(pin: bool | str, cores: Sequence[int], worker_cores: Sequence[int]) -> bool:
    """sampler.pin_workers for a rank with these `cores` whose rollout workers get `worker_cores`:
    auto pins each worker to one core only where the learner and policy workers keep off the
    workers' cores (a GPU rank with cores to spare). Where they share them (a CPU node), a worker
    pinned to one core waits there behind the learner while the other core idles: unpinned,
    doom_basic on a 2-core node trained faster, defend_the_center and Breakout no slower
    (`python -m launch.bench bench.modes=[async] sampler.pin_workers=P`, P alternated;
    docs/benchmarks.md#figures-behind-the-codes-choices)."""
    if pin != "auto":
        return bool(pin)
    return len(worker_cores) < len(cores)


def worker_cpus(pin: bool | str, worker_cores: Sequence[int], w: int) -> set[int]:
    """The cores rollout worker w may run on: its own one when pinned (sampler.pin_workers=true,
    round-robin over worker_cores), else any of worker_cores (false, and auto not yet resolved)."""
    return {worker_cores[w % len(worker_cores)]} if pin is True else set(worker_cores)


def place(cfg, env: Mapping[str, str], visible_gpus: int, affinity: Sequence[int], solo: bool,
          bf16_fast: Callable[[str], bool] = lambda device: False) -> Placement:
    """Everything above for one rank of `cfg` (solo: the single-node fallback, alone on its host
    whatever Slurm allocated); ConfigError names what cannot be done here. bf16_fast(device):
    whether that device has bf16 units (has_fast_bf16 where the rank runs)."""
    ranks_here, me = (1, 0) if solo else (ranks_per_host(env), local_rank(env))
    backend = cfg.sync.backend
    if backend == "auto":
        backend = "nccl" if cfg.train.device.startswith("cuda") else "gloo"
    device = choose_device(cfg.train.device, me, ranks_here, visible_gpus, backend, env)
    policy = cfg.sampler.policy_device or cfg.train.device
    policy = device if policy == cfg.train.device else choose_device(policy, me, ranks_here, visible_gpus,
                                                                     "gloo", env)
    cores = core_share(affinity, me, ranks_here, slurm_bound_cpus(env))
    workers, worker_cores, threads = plan_processes(
        cores, cfg.sampler.num_workers, cfg.sampler.num_policy_workers, device.startswith("cuda"),
        cfg.train.learner_threads, cfg.sampler.pin_offset, learns_alone=cfg.sampler.mode == "sync")
    if not worker_cores:
        raise ConfigError(f"no CPU core left for rollout workers on {where(env)}")
    precision = choose_precision(cfg.train.precision, sorted({device, policy}), bf16_fast)
    pin = pin_rollout_workers(cfg.sampler.pin_workers, cores, worker_cores)
    return Placement(device, policy, workers, worker_cores, threads, precision, pin)


def here(cfg, solo: bool) -> Placement:
    """`place` with this process's environment, visible GPUs and CPU affinity."""
    import os

    import torch

    return place(cfg, os.environ, torch.cuda.device_count(), os.sched_getaffinity(0), solo, has_fast_bf16)


def apply(cfg, p: Placement) -> None:
    """Write the placement into the rank's config: its worker processes read it from there."""
    cfg.train.device, cfg.sampler.policy_device = p.device, p.policy_device
    cfg.sampler.num_workers, cfg.train.learner_threads = p.num_workers, p.learner_threads
    cfg.train.precision, cfg.sampler.pin_workers = p.precision, p.pin_workers


def use_device(device: str) -> None:
    """In each process that computes on `device`: make it current (per process, and per thread)
    and allow the fast CUDA paths (cuDNN autotuning for fixed shapes, TF32 matmuls/convolutions)."""
    if not device.startswith("cuda"):
        return
    import torch

    torch.cuda.set_device(torch.device(device))
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
