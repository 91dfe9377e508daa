"""What the sampler's layout derives from a config: its trajectory buffers and its batches.

The sampler, the learner's batcher and the launchers' checks call these with a SamplerConfig (and
the sync settings), so the processes that build the buffers and the ones that size the batches
agree on one answer. Which values are allowed is nodes.config.validate's job.
"""
from __future__ import annotations

from typing import Any


def in_rounds(s: Any) -> bool:
    """Whether the envs collect in rounds of one rollout each, a batch being one round of every env
    (sync, deterministic), rather than slots being batched as they finish (async)."""
    return s.mode in ("sync", "deterministic")


def slots_per_batch(s: Any) -> int:
    """Trajectories per learner batch: batch_size / rollout, or one per env in rounds."""
    assert s.num_workers != "auto", "num_workers=auto is resolved where the rank starts (nodes.sampling.placement)"
    return s.num_workers * s.envs_per_worker if in_rounds(s) else s.batch_size // s.rollout


def splits_batch(global_batch: Any, device: str) -> bool:
    """sync.global_batch resolved for a node computing on `device` (train.device): auto splits the
    world's batch on CPUs and not on GPUs."""
    return not device.startswith("cuda") if global_batch == "auto" else bool(global_batch)


def node_batch_size(s: Any, nodes: int, global_batch: bool) -> int:
    """A node's learner batch: sampler.batch_size, or with sync.global_batch its share of it over
    the launch's `nodes`, in whole rollouts and at least one (beyond batch_size / rollout nodes the
    world's batch grows: one rollout per node). Rounds (sync, deterministic) batch one round of
    every env: no share."""
    if not global_batch or nodes <= 1 or in_rounds(s):
        return s.batch_size
    return max(1, s.batch_size // nodes // s.rollout) * s.rollout


def num_slots(s: Any, members: int = 1) -> int:
    """Trajectory buffers: async, one per env (filling) plus one learner batch, the fewest that
    cannot deadlock (an env that waits for a free slot holds its worker's other envs' slots); in
    sync mode one per env (an env waits for the learner's update before it collects again); in
    deterministic mode two per env (one round filling while the learner learns on the other).

    When the learner is the bottleneck, every extra slot only adds policy lag: a batch's slots
    return when the learner takes it (nodes.sampling.batcher), so with the default the envs collect the
    next batch during the step, half of it ahead of time (lag 1.5 on doom_basic, 2 x 8 envs;
    2.0 with one more per env, 3.0 when slots returned at the batcher's copy). A population of
    `members` (async only) gets one batch per member (nodes.sampling.batcher.wait_for_batches).
    """
    if s.mode == "sync":
        return s.num_workers * s.envs_per_worker
    if s.mode == "deterministic":
        return 2 * s.num_workers * s.envs_per_worker
    if s.num_slots:
        return s.num_slots
    return s.num_workers * s.envs_per_worker + members * slots_per_batch(s)
