"""The cluster on paper: launch.scaling's model, pure functions (no measurement, no I/O).

A ring all-reduce of n bytes over p ranks takes t(p, n) = 2(p-1) alpha + 2(p-1)/p n beta: alpha the
latency per step of the ring, beta the seconds per byte. `fit_ring` fits alpha and beta to measured
(ranks, bytes, seconds) points, least squares on the relative residuals (each point weighted by 1/t,
so latency points count as much as bandwidth ones).

`predict` gives one row per (device, NODES, LINKS_GBPS): sync per iteration = the gradient
all-reduce (with the running norms' moments, the sample count and the stop votes in the same buffer)
+ the stats-row all-gather every sync.stats_every iterations + the checksum all-gather every
sync.check_every iterations (both amortised; `Traffic` says what each carries), each with the ring's
latency and bandwidth terms, where alpha = the software latency (gloo's, fitted; NCCL's, assumed,
for the gradient on GPU rows) + LINK_LATENCY_S of the link, and beta = 8 / (link bits per s). The
gradient all-reduce follows the backward (never overlapped with it), so sync share = sync /
(iteration + sync) and efficiency = iteration / (iteration + sync), as if the learner were the
node's bottleneck. Where sync.global_batch splits the world's batch (auto, the default: on CPU
nodes) each node learns on its share of it (`node_batch`): more nodes, a shorter iteration, a
larger sync share.

The ring's latency term grows linearly in the nodes; NCCL uses trees at that scale, so at 256 nodes
this model is pessimistic for latency.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

NODES = (8, 64, 256)
LINKS_GBPS = (10, 25, 100, 400)
# What the link adds to each step of the ring, on top of the software latency measured here (gloo
# over loopback TCP), assumed per class: Ethernet-class links (10, 25 Gb/s: TCP through a switch)
# tens of microseconds; InfiniBand-class links (100, 400 Gb/s: RDMA) a few.
LINK_LATENCY_S = {10: 25e-6, 25: 25e-6, 100: 3e-6, 400: 3e-6}
LINK_CLASS = {10: "Ethernet", 25: "Ethernet", 100: "InfiniBand", 400: "InfiniBand"}
# NCCL's own latency per ring step on GPU nodes, assumed (no GPU here): a few microseconds, two
# orders below gloo's over TCP; it matters only where latency dominates (many nodes, small tensors)
NCCL_STEP_LATENCY_S = 5e-6
CHECKSUM_BYTES = 64  # two sha256 digests, parameters and run state (sync.dist_peers.DistPeers.check_agreement)


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
    """What each node sends in its collectives, per iteration (sync.dist_peers.DistPeers)."""

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


def predict(iterations: Mapping[str, float | Callable[[int], float]], traffic: Traffic, software_alpha_s: float,
            node_batch: Callable[[int], int] | None = None, nodes: Sequence[int] = NODES,
            links_gbps: Sequence[float] = LINKS_GBPS, link_latency_s: Mapping[float, float] = LINK_LATENCY_S,
            nccl_alpha_s: float = NCCL_STEP_LATENCY_S) -> list[dict]:
    """One row per (device, nodes, link): the iteration (seconds, by device name), the sync that
    follows it and what it costs. alpha = the software's latency per step (gloo's, measured:
    software_alpha_s; on "gpu" rows NCCL's, assumed: nccl_alpha_s, while the all-gathers stay on
    gloo) + the link's latency; beta = the link's.

    node_batch(p): each node's batch in samples on p nodes (sync.global_batch splits the world's
    batch over the nodes; None: every node learns on the same batch at any p). An iteration is then
    a function of that batch (a float: the same at every batch), and the speed-up compares samples
    per second: p x node_batch(p) / (iteration + sync) against one node's node_batch(1) / iteration."""
    batch = node_batch or (lambda p: 1)
    rows = []
    for device, at in iterations.items():
        at_batch = at if callable(at) else (lambda samples, s=at: s)
        one = batch(1) / at_batch(batch(1))  # one node's samples per second
        for p in nodes:
            samples = batch(p)
            iteration = at_batch(samples)
            for gbps in links_gbps:
                gloo_alpha = software_alpha_s + link_latency_s[gbps]
                alpha = nccl_alpha_s + link_latency_s[gbps] if device == "gpu" else gloo_alpha
                grad, small = sync_times(p, traffic, alpha, link_beta(gbps), gather_alpha=gloo_alpha)
                sync = grad + small
                rows.append(dict(device=device, iteration_s=iteration, node_batch=node_batch and samples, nodes=p,
                                 link_gbps=gbps, alpha_s=alpha, allreduce_s=grad, small_s=small, sync_s=sync,
                                 sync_share=sync / (iteration + sync), efficiency=iteration / (iteration + sync),
                                 speedup=p * samples / (iteration + sync) / one))
    return rows
