"""`python -m launch.scaling [overrides]`: the cluster on paper.

A 2-core machine cannot show many-node speed-ups, so this measures what decides them and models
the rest. env=, model=, sampler.* pick the model and the batch, as for launch.train.

1. learner: one iteration on this CPU as a node's learner runs it: the real model and
   Learner.train_step on a synthetic batch of the configured shape (batch_size / rollout
   trajectories of `rollout` steps, random observations of the env's shape; in sampler.mode=sync
   or deterministic one rollout of every env), in this process with train.learner_threads or this
   process's cores; WARMUP steps, then the median of bench.scaling_steps. One more step runs
   under torch's FlopCounterMode: its matmul and convolution FLOPs, forward and backward.
2. all-reduce: gloo groups of bench.scaling_ranks local ranks on 127.0.0.1 (torch.multiprocessing
   spawn; sync.peers.DistPeers, as the nodes use it) time a flat float32 all-reduce of the
   gradient buffer's size (the gradient, the running norms' moments, the sample count and the stop
   vote), of 1/64, 1/8 and 4x that, and of TINY_FLOATS floats (the
   latency of the small per-iteration collectives): WARMUP of each, then bench.scaling_repeats,
   each after a 1-float all-reduce that lines the ranks up (the barrier); the slowest rank's time,
   the median over the repeats.
3. fit: the ring all-reduce t(p, n) = 2(p-1) alpha + 2(p-1)/p n beta (n bytes), least squares on
   the relative residuals (each point weighted by 1/t, so latency points count as much as
   bandwidth ones).
4. prediction for NODES x LINKS_GBPS, with the CPU iteration of 1 and the GPU iteration assumed
   (bench.gpu_iteration_s): sync per iteration = the gradient all-reduce (with the running norms'
   moments, the sample count and the stop votes in the same buffer) + the stats-row all-gather every
   sync.stats_every iterations + the checksum all-gather every sync.check_every iterations (both
   amortised), each with the ring's latency and
   bandwidth terms, where alpha = the gloo software latency fitted in 3 + LINK_LATENCY_S of the
   link, and beta = 8 / (link bits per s).
   The gradient all-reduce follows the backward (never overlapped with it), so sync share =
   sync / (iteration + sync) and efficiency = iteration / (iteration + sync), as if the learner
   were the node's bottleneck.

The ring's latency term grows linearly in the nodes; NCCL uses trees at that scale, so at 256 nodes
this model is pessimistic for latency. The last line printed is one JSON object. Bad values are
refused with one line (exit code 2) before any process starts; Ctrl-C or SIGTERM stops it with one
line and exit code 128 + the signal, leaving no process and no run directory behind.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields

import hydra

from launch.app import check as check_config
from launch.app import hydra_run_dir, resolve
from launch.exits import tool_failed
from launch.overrides import check_command, refuse
from nodes.config import in_rounds
from nodes.errors import ConfigError, Stopped, need, one_line

NODES = (8, 64, 256)
LINKS_GBPS = (10, 25, 100, 400)
# What the link adds to each step of the ring, on top of the software latency measured here (gloo
# over loopback TCP): Ethernet-class links (10, 25 Gb/s: TCP through a switch) 25 us;
# InfiniBand-class links (100, 400 Gb/s: RDMA) 3 us.
LINK_LATENCY_S = {10: 25e-6, 25: 25e-6, 100: 3e-6, 400: 3e-6}
LINK_CLASS = {10: "Ethernet", 25: "Ethernet", 100: "InfiniBand", 400: "InfiniBand"}
# NCCL's own latency per ring step on GPU nodes, assumed (no GPU here): a few microseconds, two
# orders below gloo's over TCP; it matters only where latency dominates (many nodes, small tensors)
NCCL_STEP_LATENCY_S = 5e-6
TINY_FLOATS = 16  # the small collectives' size class (the stats row is 8 floats, the checksum 32 bytes)
SIZE_FACTORS = ((1 / 64, "buffer/64"), (1 / 8, "buffer/8"), (1, "buffer"), (4, "4 x buffer"))  # of the gradient buffer
WARMUP = 2  # learner steps, and all-reduces of each size, before the timed ones
JOIN_SLACK_S = 60.0  # a measurement group still running sync.timeout_s + this after its start is killed
CHECKSUM_BYTES = 32  # sha256 of the parameters (sync.peers.DistPeers.check_agreement)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


# ----------------------------------------------------------------------------- the model (pure)
def ring_allreduce_s(p: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring all-reduce of nbytes over p ranks: 2(p-1) steps of latency alpha (s), each rank sending
    2(p-1)/p of the tensor at beta seconds per byte."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta


def ring_allgather_s(p: int, row_bytes: float, alpha: float, beta: float) -> float:
    """Ring all-gather of one row of row_bytes per rank: p-1 steps, each passing one row on."""
    return (p - 1) * alpha + (p - 1) * row_bytes * beta


def link_beta(gbps: float) -> float:
    """Seconds per byte on a link of gbps gigabits per second."""
    return 8 / (gbps * 1e9)


@dataclass(frozen=True)
class RingFit:
    alpha_s: float  # latency per step of the ring
    beta_s_per_byte: float
    worst_rel_residual: float  # the largest |model - measured| / measured over the points

    @property
    def gbytes_per_s(self) -> float:
        """The effective bandwidth 1/beta, GB/s."""
        return 1e-9 / self.beta_s_per_byte if self.beta_s_per_byte > 0 else math.inf


def fit_ring(points: Sequence[tuple[int, float, float]]) -> RingFit:
    """Fit ring_allreduce_s to (ranks, bytes, seconds) points: least squares on the relative
    residuals; alpha and beta stay >= 0 (one that comes out negative is refitted as 0). Needs
    points of at least two sizes."""
    import numpy as np

    p, n, t = (np.asarray(col, dtype=float) for col in zip(*points))
    if len(set(zip(p.tolist(), n.tolist()))) < 2 or np.any(t <= 0):
        raise ValueError("fit_ring needs positive times at two or more (ranks, bytes) points")
    terms = np.stack([2 * (p - 1), 2 * (p - 1) / p * n], 1)
    scaled, ones = terms / t[:, None], np.ones_like(t)
    coef = np.linalg.lstsq(scaled, ones, rcond=None)[0]
    if np.any(coef < 0):  # one term alone: the other one's best non-negative value is 0
        keep = int(np.argmax(coef))
        column = scaled[:, keep]
        coef = np.zeros(2)
        coef[keep] = max(0.0, float(column @ ones / (column @ column)))
    worst = float(np.max(np.abs(terms @ coef - t) / t))
    return RingFit(float(coef[0]), float(coef[1]), worst)


@dataclass(frozen=True)
class Traffic:
    """What each node sends in its collectives, per iteration (sync.peers.DistPeers)."""

    # the gradient all-reduce: float32 gradients, the running norms' moments, the sample count and the stop vote
    grad_bytes: int
    stats_row_bytes: int  # each rank's stats row (the all-gather) ...
    stats_every: int = 10  # ... every this many iterations (sync.stats_every)
    checksum_bytes: int = CHECKSUM_BYTES  # the parameter-checksum all-gather ...
    check_every: int = 50  # ... every this many iterations (sync.check_every)


def sync_times(p: int, traffic: Traffic, alpha: float, beta: float, gather_alpha: float | None = None
               ) -> tuple[float, float]:
    """(gradient all-reduce, the small collectives) seconds per iteration on p nodes. gather_alpha:
    the all-gathers' latency when they take another path (on GPU nodes the stats row and the
    checksum are CPU tensors over gloo, the gradient goes over NCCL)."""
    g_alpha = alpha if gather_alpha is None else gather_alpha
    grad = ring_allreduce_s(p, traffic.grad_bytes, alpha, beta)
    small = ring_allgather_s(p, traffic.stats_row_bytes, g_alpha, beta) / traffic.stats_every
    small += ring_allgather_s(p, traffic.checksum_bytes, g_alpha, beta) / traffic.check_every
    return grad, small


def predict(iterations: Mapping[str, float], traffic: Traffic, software_alpha_s: float,
            nodes: Sequence[int] = NODES, links_gbps: Sequence[float] = LINKS_GBPS,
            link_latency_s: Mapping[float, float] = LINK_LATENCY_S, nccl_alpha_s: float = NCCL_STEP_LATENCY_S
            ) -> list[dict]:
    """One row per (device, nodes, link): the iteration (seconds, by device name), the sync that
    follows it and what it costs. alpha = the software's latency per step (gloo's, measured:
    software_alpha_s; on "gpu" rows NCCL's, assumed: nccl_alpha_s, while the all-gathers stay on
    gloo) + the link's latency; beta = the link's."""
    rows = []
    for device, iteration in iterations.items():
        for p in nodes:
            for gbps in links_gbps:
                gloo_alpha = software_alpha_s + link_latency_s[gbps]
                alpha = nccl_alpha_s + link_latency_s[gbps] if device == "gpu" else gloo_alpha
                grad, small = sync_times(p, traffic, alpha, link_beta(gbps), gather_alpha=gloo_alpha)
                sync = grad + small
                rows.append(dict(device=device, iteration_s=iteration, nodes=p, link_gbps=gbps, alpha_s=alpha,
                                 allreduce_s=grad, small_s=small, sync_s=sync, sync_share=sync / (iteration + sync),
                                 efficiency=iteration / (iteration + sync), speedup=p * iteration / (iteration + sync)))
    return rows


# ----------------------------------------------------------------------------- measurements
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

    from nodes.buffers import SlotBatch

    g = torch.Generator().manual_seed(seed)
    n, t = trajectories, rollout
    if np.dtype(spec.obs_dtype) == np.uint8:
        obs = torch.randint(0, 256, (n, t + 1, *spec.obs_shape), dtype=torch.uint8, generator=g)
    else:
        obs = torch.randn(n, t + 1, *spec.obs_shape, generator=g)
    return SlotBatch(
        obs=obs, meas=torch.randn(n, t + 1, spec.meas_size, generator=g),
        actions=torch.stack([torch.randint(0, k, (n, t), generator=g) for k in spec.action_heads], -1),
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


def measure_learner(cfg) -> LearnerFigures:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from nodes.envs import env_spec
    from nodes.learner import Learner
    from nodes.models import ActorCritic
    from nodes.placement import choose_precision, has_fast_bf16
    from nodes.stats import RankRow

    threads = cfg.train.learner_threads or len(os.sched_getaffinity(0))  # the learner alone: every core
    torch.set_num_threads(threads)
    torch.manual_seed(cfg.seed)
    spec = env_spec(cfg.env)
    model = ActorCritic(spec, cfg.model)
    learner = Learner(model, cfg.algo, precision=choose_precision(cfg.train.precision, ["cpu"], has_fast_bf16))
    n, t = batch_shape(cfg)
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
    # each norm's count, sum and sum of squares (float32) ride in the gradient's buffer (nodes.models.batch_moments)
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


def _allreduce_rank(rank: int, ranks: int, port: int, sizes: list[int], repeats: int, sync_cfg, path: str) -> None:
    """One rank of a measurement group (a spawned process); rank 0 writes the medians to `path`."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # die with the parent
    if os.getppid() == 1:  # the parent died before we could ask to follow it
        os._exit(1)
    # started with SIGINT and SIGTERM blocked (measure_allreduce): Ctrl-C is the parent's to handle,
    # and it ends the group; SIGTERM ends this rank
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    import torch

    from sync.peers import DistPeers
    from sync.world import World

    torch.set_num_threads(1)
    peers = DistPeers(World(rank, ranks, rank, "127.0.0.1", port, "env"), sync_cfg)
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


def measure_allreduce(ranks: Sequence[int], sizes: Sequence[int], repeats: int, sync_cfg) -> dict[int, list[float]]:
    """{ranks: median seconds per size} from one gloo group of each size in turn."""
    import torch.multiprocessing as mp

    from launch.local import free_port
    from nodes.signals import StopSignals

    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)  # not its notes on ending the others
    out = {}
    with tempfile.TemporaryDirectory(prefix="distrl-scaling-") as tmp:
        for p in ranks:
            path = os.path.join(tmp, f"ranks{p}.json")
            with StopSignals().blocked():  # the ranks inherit the mask: a Ctrl-C while they start is ours alone
                group = mp.spawn(_allreduce_rank, args=(p, free_port(), list(sizes), repeats, sync_cfg, path),
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


# ----------------------------------------------------------------------------- the app
def check_scaling(cfg) -> None:
    """What launch.scaling needs beyond launch.app's checks (ConfigError, one line)."""
    need(cfg.nodes == 1, f"launch.scaling predicts {', '.join(map(str, NODES))} nodes from measurements on this "
                         f"machine: leave nodes=1, got nodes={cfg.nodes}")
    need(cfg.launcher.name == "local", "launch.scaling measures this machine: use launcher=local")
    need(cfg.train.device == "cpu", "launch.scaling measures the learner on this CPU (a GPU's iteration is "
                                    f"bench.gpu_iteration_s): use train.device=cpu, got '{cfg.train.device}'")
    need(not in_rounds(cfg.sampler) or cfg.sampler.num_workers != "auto",
         f"sampler.mode={cfg.sampler.mode}: a batch is one rollout of every env, so launch.scaling needs a number "
         "for sampler.num_workers, not auto")


def check(cfg) -> None:
    """Every check of a composed point before anything starts: ours, then launch.app's."""
    check_scaling(cfg)
    check_config(cfg)


def _stop(signum, frame) -> None:
    raise Stopped(signum)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg) -> None:
    obj = resolve(cfg, hydra_run_dir())  # launch.app's checks
    try:
        check_scaling(obj)
    except ConfigError as exc:
        shutil.rmtree(obj.run_dir, ignore_errors=True)
        refuse(str(exc))
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        scaling(obj)
    except (Exception, KeyboardInterrupt) as exc:
        code = tool_failed("scaling", exc)  # one line (an unexpected error's traceback to the log)
        sys.exit(code)
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(obj.run_dir, ignore_errors=True)  # a benchmark leaves no run behind


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def scaling(obj) -> None:
    b = obj.bench
    ranks = sorted(set(b.scaling_ranks))
    n, t = batch_shape(obj)
    cores, load = len(os.sched_getaffinity(0)), os.getloadavg()[0]
    print(f"scaling: env={obj.env.name} model={obj.model.name} batch={n * t} ({n} trajectories x {t} steps); "
          f"learner: median of {b.scaling_steps} steps; all-reduce: gloo groups of {', '.join(map(str, ranks))} "
          f"local ranks, median of {b.scaling_repeats}; load average {load:.2f} on {cores} cores before", flush=True)
    if load > 0.5:
        print("  note: other processes are using the cores: the times below include waiting for them (a learner "
              "with several threads suffers most: each parallel region waits for its slowest thread)", flush=True)
    lf = measure_learner(obj)
    print(f"  learner: {lf.iteration_s * 1e3:.1f} ms per iteration on this CPU ({lf.threads} threads; steps "
          f"{min(lf.steps_s) * 1e3:.1f} to {max(lf.steps_s) * 1e3:.1f} ms), {lf.flops / 1e9:.2f} GFLOP (matmuls "
          f"and convolutions, forward and backward), {lf.gradient_elements:,} gradient elements", flush=True)
    sizes = allreduce_sizes(lf.traffic.grad_bytes // 4)  # the whole buffer the nodes all-reduce
    measured = measure_allreduce(ranks, [f for _, f in sizes], b.scaling_repeats, obj.sync)
    points = [(p, 4 * f, sec) for p in ranks for (_, f), sec in zip(sizes, measured[p])]
    # ranks beyond the cores take turns on them: their latency is this machine's oversubscription,
    # not gloo's, so the model is fitted to the rank counts that fit in the cores (all if none do)
    fit = fit_ring([x for x in points if x[0] <= cores] or points)
    alone = {p: fit_ring([x for x in points if x[0] == p]).alpha_s for p in ranks} if len(ranks) > 1 else {}
    _print_allreduce(ranks, sizes, measured, fit, alone, b.scaling_repeats, cores)
    _print_model(lf, fit, b.gpu_iteration_s)
    rows = predict({"cpu": lf.iteration_s, "gpu": b.gpu_iteration_s}, lf.traffic, fit.alpha_s)
    _print_predicted(rows)
    print(json.dumps(dict(
        load_average=round(load, 2), cores=cores,
        learner=dict(iteration_s=_sig(lf.iteration_s), steps_s=[_sig(x) for x in lf.steps_s], threads=lf.threads,
                     trajectories=lf.trajectories, rollout=lf.rollout, gradient_elements=lf.gradient_elements,
                     allreduce_bytes=lf.traffic.grad_bytes,
                     flops=lf.flops),
        allreduce=[dict(ranks=p, bytes=nbytes, seconds=_sig(sec)) for p, nbytes, sec in points],
        fit=dict(alpha_us=_sig(fit.alpha_s * 1e6), beta_gbytes_per_s=_sig(fit.gbytes_per_s),
                 worst_rel_residual=_sig(fit.worst_rel_residual, 3),
                 alpha_us_by_ranks={str(p): _sig(a * 1e6) for p, a in alone.items()}),
        assumptions=dict(gpu_iteration_s=b.gpu_iteration_s,
                         link_latency_us={str(g): LINK_LATENCY_S[g] * 1e6 for g in LINKS_GBPS},
                         nccl_step_latency_us=NCCL_STEP_LATENCY_S * 1e6, model="ring"),
        traffic=asdict(lf.traffic),
        predicted=[{k: _sig(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows])), flush=True)


def _print_allreduce(ranks, sizes, measured, fit: RingFit, alone: dict[int, float], repeats: int, cores: int) -> None:
    """The measured table (ranks x bytes -> ms, the fit's value beside each) and the fit."""
    def model(p, nbytes):
        return ring_allreduce_s(p, nbytes, fit.alpha_s, fit.beta_s_per_byte)

    fitted = [p for p in ranks if p <= cores] or ranks  # what the fit saw (main)
    print(f"  all-reduce over gloo on 127.0.0.1, ms (median of {repeats}, slowest rank; [ring fit]):")
    print(f"  {'bytes':>12}  {'tensor':<13}" + "".join(f"{f'{p} ranks':>20}" for p in ranks))
    for i, (label, f) in enumerate(sizes):
        cells = "".join(f"{measured[p][i] * 1e3:>11.3f} [{model(p, 4 * f) * 1e3:>6.3g}]" for p in ranks)
        print(f"  {4 * f:>12,}  {label:<13}{cells}")
    points = [(p, 4 * f, measured[p][i]) for p in fitted for i, (_, f) in enumerate(sizes)]
    worst = max(points, key=lambda x: abs(model(x[0], x[1]) - x[2]) / x[2])
    print(f"  ring fit to {', '.join(map(str, fitted))} ranks: alpha {fit.alpha_s * 1e6:.1f} us per step (gloo's "
          "software latency here), beta "
          f"{fit.gbytes_per_s:.2f} GB/s effective (loopback copies and sums on this CPU); worst relative residual "
          f"{fit.worst_rel_residual:.0%} ({worst[0]} ranks, {_bytes(worst[1])})")
    if alone:
        print("  alpha fitted to each rank count alone: " + ", ".join(f"{p} ranks {a * 1e6:.1f} us"
                                                                       for p, a in alone.items()))
    if max(ranks) > cores:
        print(f"  note: {max(ranks)} ranks share this machine's {cores} cores, so their times include waiting "
              "for a core")


def _print_model(lf: LearnerFigures, fit: RingFit, gpu_iteration_s: float) -> None:
    """What each node sends, what is assumed, and what the model leaves out."""
    tr = lf.traffic
    print(f"  per iteration and node: gradient all-reduce {_bytes(tr.grad_bytes)} (with the running-norm "
          f"moments); stats row {tr.stats_row_bytes} B per rank every "
          f"{tr.stats_every} iterations (all-gather); checksum {tr.checksum_bytes} B every {tr.check_every} "
          "iterations (all-gather)")
    print(f"  assumed: GPU iteration {gpu_iteration_s * 1e3:.1f} ms (bench.gpu_iteration_s: this model's "
          f"{lf.flops / 1e9:.1f} GFLOP at {lf.flops / gpu_iteration_s / 1e12:.1f} TFLOP/s achieved)")
    latency = ", ".join(f"{g:g} Gb/s {LINK_LATENCY_S[g] * 1e6:g} us ({LINK_CLASS[g]}-class)" for g in LINKS_GBPS)
    print(f"  assumed: link latency per ring step {latency}, added to the {fit.alpha_s * 1e6:.1f} us measured "
          f"(gloo; GPU rows: NCCL's {NCCL_STEP_LATENCY_S * 1e6:g} us per step, assumed, for the gradient, "
          "gloo's for the all-gathers); beta = 8 / link bits per second")
    print("  model: ring all-reduce, whose latency term 2(p-1) alpha grows linearly with the nodes (pessimistic "
          "at 256 nodes, where NCCL would use trees); the gradient all-reduce runs after the backward, not "
          "overlapped with it; efficiency as if the learner were the node's bottleneck")
    local_gbps = 8 * fit.gbytes_per_s
    faster = [g for g in LINKS_GBPS if g > local_gbps]
    if faster:
        print(f"  note: gloo moved {local_gbps:.1f} Gb/s between local ranks here; on {', '.join(map(str, faster))} "
              "Gb/s links a CPU node's copies and sums, not the link, may bound it (the table uses the link's rate)")
    sys.stdout.flush()


def _print_predicted(rows: list[dict]) -> None:
    print("  predicted per iteration:")
    print(f"  {'iteration':<24}{'nodes':>6}{'link':>10}{'alpha':>10}{'sync':>11}{'share':>8}{'efficiency':>12}"
          f"{'speed-up':>10}")
    for r in rows:
        what = f"{r['device']} {r['iteration_s'] * 1e3:.1f} ms ({'measured' if r['device'] == 'cpu' else 'assumed'})"
        print(f"  {what:<24}{r['nodes']:>6}{r['link_gbps']:>5} Gb/s{r['alpha_s'] * 1e6:>7.1f} us"
              f"{r['sync_s'] * 1e3:>8.2f} ms{r['sync_share']:>8.3f}{r['efficiency']:>12.3f}{r['speedup']:>10.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    check_command(sys.argv[1:], check)
    main()
