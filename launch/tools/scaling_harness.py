"""launch.scaling's measurements on this machine: a learner's iteration and gloo all-reduce times.

`measure_learner(cfg)`: one iteration on this CPU as a node's learner runs it (the real model and
Learner.train_step on a synthetic batch of the configured shape, `batch_shape`), WARMUP steps, then
the median of bench.scaling_steps; one more step under torch's FlopCounterMode counts its matmul and
convolution FLOPs. It also says what the nodes would send (launch.tools.scaling_model.Traffic).

`measure_allreduce(ranks, sizes, repeats, sync_cfg)`: for each rank count, a gloo group of that many
local ranks on 127.0.0.1 (spawned; sync.dist_peers.DistPeers, as the nodes use it) times a flat float32
all-reduce of each size: WARMUP of each, then `repeats`, each after a 1-float all-reduce that lines
the ranks up; the slowest rank's time, the median over the repeats. A failed rank ends its group at
once, a group still running sync.timeout_s + JOIN_SLACK_S after its start is killed, and a rank dies
with this process: no process is left behind.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import math
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields

from launch.tools.scaling_model import Traffic
from nodes.config.layout import in_rounds
from nodes.errors import one_line

TINY_FLOATS = 16  # the small collectives' size class (the stats row is 8 floats, the checksum 32 bytes)
SIZE_FACTORS = ((1 / 64, "buffer/64"), (1 / 8, "buffer/8"), (1, "buffer"), (4, "4 x buffer"))  # of the gradient buffer
WARMUP = 2  # learner steps, and all-reduces of each size, before the timed ones
JOIN_SLACK_S = 60.0  # a measurement group still running sync.timeout_s + this after its start is killed
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def batch_shape(cfg) -> tuple[int, int]:
    """(trajectories, steps) of one learner batch: batch_size / rollout trajectories, or one rollout
    of every env when the envs collect in rounds (sampler.mode=sync|deterministic)."""
    s = cfg.sampler
    if in_rounds(s):
        return s.num_workers * s.envs_per_worker, s.rollout
    return s.batch_size // s.rollout, s.rollout


def synthetic_batch(spec, state_size: int, trajectories: int, rollout: int, seed: int):
    """A SlotBatch of the shape the batcher hands the learner, filled with random values."""
    import numpy as np
    import torch

    from nodes.sampling.buffers import SlotBatch

    g = torch.Generator().manual_seed(seed)
    n, t = trajectories, rollout
    if np.dtype(spec.obs_dtype) == np.uint8:
        obs = torch.randint(0, 256, (n, t + 1, *spec.obs_shape), dtype=torch.uint8, generator=g)
    else:
        obs = torch.randn(n, t + 1, *spec.obs_shape, generator=g)
    return SlotBatch(
        obs=obs, meas=torch.randn(n, t + 1, spec.meas_size, generator=g),
        # float32 as in the slots: a discrete head's index, then the continuous dims' values
        actions=torch.cat([torch.randint(0, k, (n, t, 1), generator=g).float() for k in spec.action_heads]
                          + [torch.randn(n, t, spec.continuous, generator=g)], -1),
        logp=-torch.rand(n, t, generator=g) - 0.5, values=torch.randn(n, t, generator=g),
        rewards=0.1 * torch.randn(n, t, generator=g), dones=torch.rand(n, t, generator=g) < 0.01,
        versions=torch.zeros(n, t, dtype=torch.int64), h0=torch.zeros(n, state_size))


@dataclass
class LearnerFigures:
    iteration_s: float  # the median of the timed steps
    steps_s: list[float]
    threads: int
    trajectories: int
    rollout: int
    gradient_elements: int  # what the gradient all-reduce carries, less the sample count
    flops: float  # matmul and convolution FLOPs of one step, forward and backward
    traffic: Traffic


def measure_learner(cfg, trajectories: int | None = None) -> LearnerFigures:
    """One learner iteration on this CPU at the configured batch shape, or with `trajectories`
    rollouts (a node's share of the world's batch, sync.global_batch)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from nodes.envs import env_spec
    from nodes.learning.learner import Learner
    from nodes.models.actor_critic import ActorCritic
    from nodes.record.stats import RankRow
    from nodes.sampling.placement import choose_precision, has_fast_bf16

    threads = cfg.train.learner_threads or len(os.sched_getaffinity(0))  # the learner alone: every core
    torch.set_num_threads(threads)
    torch.manual_seed(cfg.seed)
    spec = env_spec(cfg.env)
    model = ActorCritic(spec, cfg.model)
    learner = Learner(model, cfg.algo, precision=choose_precision(cfg.train.precision, ["cpu"], has_fast_bf16))
    n, t = batch_shape(cfg)
    n = trajectories or n
    batch = synthetic_batch(spec, model.state_size, n, t, cfg.seed)
    for _ in range(WARMUP):
        learner.train_step(batch)
    steps = []
    for _ in range(cfg.bench.scaling_steps):
        t0 = time.perf_counter()
        learner.train_step(batch)
        steps.append(time.perf_counter() - t0)
    with FlopCounterMode(display=False) as counter:  # after the timed steps: counting slows a step down
        learner.train_step(batch)
    elements = sum(p.numel() for p in model.parameters() if p.grad is not None)
    # each norm's count, sum and sum of squares (float32) ride in the gradient's buffer
    # (nodes.models.normalisers.batch_moments)
    moments = [math.prod(spec.obs_shape)] + [spec.meas_size] * model.use_meas + [1] * (learner.returns is not None)
    traffic = Traffic(grad_bytes=4 * (elements + sum(1 + 2 * n for n in moments) + 2),
                      stats_row_bytes=8 * len(fields(RankRow)), stats_every=cfg.sync.stats_every,
                      check_every=cfg.sync.check_every)
    return LearnerFigures(statistics.median(steps), steps, threads, n, t, elements, float(counter.get_total_flops()),
                          traffic)


def allreduce_sizes(grad_floats: int) -> list[tuple[str, int]]:
    """(label, floats) of the tensors to time, smallest first: TINY_FLOATS, then SIZE_FACTORS of the
    gradient buffer; a size that repeats another is left out."""
    sizes = {TINY_FLOATS: f"{TINY_FLOATS} floats"}
    for factor, label in SIZE_FACTORS:
        sizes.setdefault(max(TINY_FLOATS, round(grad_floats * factor)), label)
    return [(label, n) for n, label in sorted(sizes.items())]


def _allreduce_rank(rank: int, ranks: int, port: int, sizes: list[int], repeats: int, sync_cfg, path: str,
                    hosts: tuple[list[str], str] | None = None) -> None:
    """One rank of a measurement group (a spawned process); rank 0 writes the medians to `path`.
    hosts: (each rank's network namespace, rank 0's address) on emulated hosts (launch.spawn.hosts)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # die with the parent
    if os.getppid() == 1:  # the parent died before we could ask to follow it
        os._exit(1)
    # started with SIGINT and SIGTERM blocked (measure_allreduce): Ctrl-C is the parent's to handle,
    # and it ends the group; SIGTERM ends this rank
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    import torch

    from sync.dist_peers import DistPeers
    from sync.world import World

    master = "127.0.0.1"
    if hosts is not None:
        from launch.spawn.hosts import enter
        enter(hosts[0][rank])
        master = hosts[1]
    torch.set_num_threads(1)
    peers = DistPeers(World(rank, ranks, rank, master, port, "env"), sync_cfg)
    lineup, medians, clean = torch.zeros(1), [], False
    try:
        for n in sizes:
            x = torch.zeros(n)  # zeros stay zeros: no overflow, no denormals, however many sums
            for _ in range(WARMUP):
                peers.all_sum(x)
            mine = []
            for _ in range(repeats):
                peers.all_sum(lineup)
                t0 = time.perf_counter()
                peers.all_sum(x)
                mine.append(time.perf_counter() - t0)
            slowest = [max(times) for times in zip(*peers.gather_stats(mine))]
            medians.append(statistics.median(slowest))
        clean = True
    finally:
        peers.close(clean)
    if rank == 0:
        with open(path + ".tmp", "w") as f:
            json.dump(medians, f)
        os.replace(path + ".tmp", path)


def measure_allreduce(ranks: Sequence[int], sizes: Sequence[int], repeats: int, sync_cfg, network=None
                      ) -> dict[int, list[float]]:
    """{ranks: median seconds per size} from one gloo group of each size in turn; on the emulated
    hosts of `network` (launch.spawn.hosts.Network, rank r on host r) when given, else on 127.0.0.1."""
    import torch.multiprocessing as mp

    from launch.spawn.local import free_port
    from nodes.run.signals import StopSignals

    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)  # not its notes on ending the others
    out = {}
    with tempfile.TemporaryDirectory(prefix="distrl-scaling-") as tmp:
        for p in ranks:
            path = os.path.join(tmp, f"ranks{p}.json")
            hosts = None if network is None else ([network.namespace(r) for r in range(p)], network.address(0))
            with StopSignals().blocked():  # the ranks inherit the mask: a Ctrl-C while they start is ours alone
                group = mp.spawn(_allreduce_rank, args=(p, free_port(), list(sizes), repeats, sync_cfg, path, hosts),
                                 nprocs=p, join=False)
            limit = sync_cfg.timeout_s + JOIN_SLACK_S
            deadline = time.monotonic() + limit
            try:
                while not group.join(timeout=0.5, grace_period=0):  # one rank failed: end the others at once
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the {p}-rank all-reduce measurement did not end in {limit:.0f} s")
            except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
                lines = [ln for ln in str(exc).splitlines() if ln.strip()]
                raise RuntimeError(f"rank {exc.error_index} of the {p}-rank all-reduce measurement failed: "
                                   f"{lines[-1] if lines else one_line(exc)}") from None
            finally:
                for proc in group.processes:  # ours, started above: none is left behind
                    if proc.is_alive():
                        proc.kill()
                    proc.join()
            with open(path) as f:
                out[p] = json.load(f)
    return out
