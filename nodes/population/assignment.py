"""Who plays which env in a population of policies (`Assignment`).

Every node hosts the whole population (population.size members). Each member has its own
learner, optimizer and hyper-parameters (nodes.node); the rollout and policy workers are shared:
each env is played by one member at a time (buffers.env_policy), the policy workers route its
requests to that member's weights, and its trajectories go to that member's learner. An env
changes member only where an episode ends, and the trajectory slot it was filling ends there
(the rest of the slot is not trained on: SlotBatch.lengths), so every trajectory is one member's.

Each member's hyper-parameters: nodes.population.hypers; what each member did:
nodes.population.member_stats.
"""
from __future__ import annotations

import numpy as np

from nodes import seeds


class Assignment:
    """The member playing each env of one rollout worker. population.assign=fixed: env e (its index
    in the rank, of E) always plays member e * size // E: contiguous blocks, so an env group (a
    policy-worker request) is one member's and takes one forward pass, as without a population
    (env e -> e % size put every member in every group: four passes of one or two envs each, and
    a population of 4 trained well below one policy's speed:
    docs/benchmarks.md#figures-behind-the-codes-choices); episode, and the seats of every match
    between agents (self-play): each episode draws a member uniformly, from the env's own random
    stream."""

    def __init__(self, cfg, rank: int, first_env: int, count: int, start_version: int = 0, snapshots=None):
        """snapshots: the shared count of self-play snapshots that exist (Control.snapshots): with
        population.snapshots, each seat of a match but the first plays snapshot s (as member
        size + s) with probability population.snapshot_prob once one exists."""
        p = cfg.population
        self.size, self.agents = p.size, cfg.env.agents
        self.envs = cfg.sampler.num_workers * cfg.sampler.envs_per_worker
        self.snapshots, self.snapshot_prob = (snapshots if p.snapshots else None), p.snapshot_prob
        self.draws = (self.size > 1 or self.snapshots is not None) and (p.assign == "episode" or self.agents > 1)
        self.rngs = {e: np.random.default_rng(seeds.derive(cfg.seed, seeds.ASSIGN, rank, e, start_version))
                     for e in range(first_env, first_env + count)} if self.draws else {}

    def first(self, e: int) -> int:
        """The member that plays env e's first episode."""
        return self.next(e) if self.draws else e * self.size // self.envs

    def next(self, e: int, current: int = 0) -> int:
        """The member that plays env e's next episode (`current` played the one that ended)."""
        if not self.draws:
            return current if self.size > 1 else 0
        rng = self.rngs[e]
        # a match fills `agents` consecutive envs from a multiple of `agents`: e % agents is the seat
        if self.snapshots is not None and e % self.agents and int(self.snapshots[0]) > 0 \
                and rng.random() < self.snapshot_prob:
            return self.size + int(rng.integers(int(self.snapshots[0])))
        return int(rng.integers(self.size))

    @property
    def mixed(self) -> bool:
        """Whether envs may play anything but member 0 (then trajectories are routed by member)."""
        return self.size > 1 or self.snapshots is not None
