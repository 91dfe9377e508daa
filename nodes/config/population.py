"""Populations: several policies in one run (PopulationConfig) and population-based training
between them (PbtConfig).

Sections of the structured config (nodes.config.schema.Config). Every default of these keys lives
here, and the comments beside and above each field are its entry in docs/configuration.md
(launch.config_docs reads them from this source).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PopulationConfig:
    """Several policies in one run (nodes/population/assignment.py): each member has its own learner,
    optimizer, hyper-parameters and, with several nodes, its own gradient all-reduce group; they
    share the node's rollout and policy workers (requests are routed to the env's member)."""

    size: int = 1  # the members (policies); 1: one policy
    # single-agent envs: fixed (a rank's envs in `size` contiguous blocks, block p always played by
    # member p) | episode (each episode draws a member uniformly). The seats of a match between
    # agents always draw at each match (self-play)
    assign: str = "fixed"
    # Self-play (matches between agents): frozen past copies of the members kept as extra opponents
    # (0: none). Every snapshot_every_frames env frames per member the next member in turn is copied
    # into the oldest of the `snapshots` slots; once one exists, each seat of a match but the first
    # plays a random snapshot with probability snapshot_prob. Nobody learns from a snapshot's seat.
    snapshots: int = 0
    snapshot_every_frames: int = 1_000_000  # env frames per member between snapshots
    snapshot_prob: float = 0.5  # probability that a seat (not the first) plays a snapshot


@dataclass
class PbtConfig:
    """Population-based training (nodes/population/pbt.py), on when population.size > 1 and period_frames > 0.
    The defaults are Sample Factory's recipe: every period_frames env frames per member, the
    members in the bottom replace_frac (by objective) copy the weights and hyper-parameters of a
    random member of the top replace_frac, if it is better by replace_gap (relative to its own
    objective's magnitude) and by replace_gap_abs, then each of their hyper-parameters is
    multiplied or divided by `perturb` with probability mutation_rate (at least one is)."""

    period_frames: int = 5_000_000  # env frames per member (the run's frames / population.size); 0: no PBT
    start_frames: int = 0  # no PBT step before this many frames per member
    # reward: mean recent episode reward | true_objective: their mean true objective (the env's own
    # unshaped measure; the reward where it has none) | win: recent match win rate (VizDoom matches)
    objective: str = "reward"
    replace_frac: float = 0.3  # the bottom (and top) fraction of members in a PBT step
    replace_gap: float = 0.1  # a top member must be better by this, relative to the objective's magnitude
    replace_gap_abs: float = 1e-6  # ... and by this much in absolute terms
    mutation_rate: float = 0.15  # probability that each hyper-parameter of a replaced member mutates
    perturb: float = 1.2  # a mutation multiplies or divides by this
    # what mutates: the learning rate, the exploration loss's coefficient and every env.shaping /
    # env.pickups weight (the env reports each term's change; the worker weighs it by the member's)
    mutate: list[str] = field(default_factory=lambda: ["lr", "entropy_coeff", "shaping"])
