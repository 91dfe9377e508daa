"""A population of policies on one node: who plays which env (`Assignment`), each member's
hyper-parameters (`Hyper`), and what each member did (`MemberStats`, gathered over ranks as
`MemberRow`s).

Every node hosts the whole population (population.size members). Each member has its own
learner, optimizer and hyper-parameters (nodes.node); the rollout and policy workers are shared:
each env is played by one member at a time (buffers.env_policy), the policy workers route its
requests to that member's weights, and its trajectories go to that member's learner. An env
changes member only where an episode ends, and the trajectory slot it was filling ends there
(the rest of the slot is not trained on: SlotBatch.lengths), so every trajectory is one member's.
"""
from __future__ import annotations

import collections
import math
from dataclasses import astuple, dataclass, fields

import numpy as np

from nodes.envs.doom_match import MATCH_KEYS
from nodes.run import seeds
from nodes.run.stats import EpisodeFigures, merged_reward


class Assignment:
    """The member playing each env of one rollout worker. population.assign=fixed: env e (its index
    in the rank, of E) always plays member e * size // E: contiguous blocks, so an env group (a
    policy-worker request) is one member's and takes one forward pass, as without a population
    (env e -> e % size put every member in every group: four passes of one or two envs each, and
    P=4 trained at 0.51-0.71x of P=1, measured); episode, and the seats of every match between
    agents (self-play): each episode draws a member uniformly, from the env's own random stream."""

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


def shaping_terms(env_cfg) -> tuple[list[str], list[float]]:
    """The reward-shaping terms a VizDoom env reports in info["terms"] (env.shaping's, then
    env.pickups', in their order) and their configured weights: every member's starting weights."""
    names = [f"shaping.{k}" for k in env_cfg.shaping] + [f"pickups.{k}" for k in env_cfg.pickups]
    return names, [float(w) for w in env_cfg.shaping.values()] + [float(w) for w in env_cfg.pickups.values()]


@dataclass
class Hyper:
    """One member's mutable hyper-parameters (PBT changes them; checkpoints keep them)."""

    lr: float
    entropy_coeff: float
    shaping: list[float]  # weights of shaping_terms(env)

    def as_dict(self) -> dict:
        return {"lr": self.lr, "entropy_coeff": self.entropy_coeff, "shaping": list(self.shaping)}


@dataclass
class MemberRow(EpisodeFigures):
    """One member's figures on one rank, gathered with the rank's row (nodes.run.stats.RankRow): its
    episode figures, then per opponent q (every member, then every self-play snapshot) its recent
    matches against q, wins and frags summed (3 values each)."""

    @staticmethod
    def width(opponents: int) -> int:
        return len(fields(MemberRow)) + 3 * opponents

    def to_floats(self, vs: list[list[float]]) -> list[float]:
        return [float(x) for x in astuple(self)] + [float(x) for row in vs for x in row]

    @classmethod
    def from_floats(cls, values, opponents: int) -> tuple[MemberRow, list[list[float]]]:
        n = len(fields(cls))
        vs = [list(values[n + 3 * q : n + 3 * q + 3]) for q in range(opponents)]
        return cls(*values[:n]), vs


class MemberStats:
    """What one member did on this node: recent episode rewards and match results, and its recent
    matches against each member (who played whom: self-play's table)."""

    def __init__(self, opponents: int, window: int = 100):
        """opponents: the members and the self-play snapshot slots (who can sit in another seat)."""
        self.opponents = opponents
        self.episodes = 0
        self.rewards: collections.deque = collections.deque(maxlen=window)
        self.objectives: collections.deque = collections.deque(maxlen=window)
        self.matches: collections.deque = collections.deque(maxlen=window)
        self.against: collections.deque = collections.deque(maxlen=window)  # (opponent, win, frags)

    def add(self, reward: float, objective: float, match: dict | None, opponents=()) -> None:
        self.episodes += 1
        self.rewards.append(reward)
        self.objectives.append(objective)
        if match is not None:
            self.matches.append(match)
            for q in opponents:
                self.against.append((int(q), float(match["win"]), float(match["frags"])))

    def row(self) -> list[float]:
        r = sum(self.rewards) / len(self.rewards) if self.rewards else math.nan
        means = {k: sum(m[k] for m in self.matches) / len(self.matches) for k in MATCH_KEYS} if self.matches else {}
        vs = [[0.0, 0.0, 0.0] for _ in range(self.opponents)]
        for q, win, frags in self.against:
            vs[q][0] += 1
            vs[q][1] += win
            vs[q][2] += frags
        o = sum(self.objectives) / len(self.objectives) if self.objectives else math.nan
        return MemberRow(float(self.episodes), r, float(len(self.rewards)), float(len(self.matches)),
                         objective=o, **means).to_floats(vs)


def opponent_name(q: int, size: int) -> str:
    """A member's number, or snapshot<s> for self-play snapshot s (seat number size + s)."""
    return str(q) if q < size else f"snapshot{q - size}"


def merge_members(rows_by_rank: list[list[float]], size: int, opponents: int | None = None) -> list[dict]:
    """Every member's figures over all ranks (means weighted by their counts): episodes, reward,
    match figures, and per opponent (opponent_name) {matches, win, frags}."""
    opponents = opponents or size
    out = []
    for p in range(size):
        parts = [MemberRow.from_floats(r[p], opponents) for r in rows_by_rank]
        rows = [row for row, _ in parts]
        n = sum(row.reward_n for row in rows if row.reward_n)
        member = {"episodes": int(sum(row.episodes for row in rows)), "reward": merged_reward(rows),
                  "true_objective": merged_reward(rows, "objective"), "reward_n": int(n)}
        m = sum(row.match_n for row in rows)
        if m:
            member["match"] = {k: sum(getattr(row, k) * row.match_n for row in rows if row.match_n) / m
                               for k in MATCH_KEYS}
            member["match"]["matches"] = int(m)
            vs = {}
            for q in range(opponents):
                games = sum(v[q][0] for _, v in parts)
                if games:
                    vs[opponent_name(q, size)] = {"matches": int(games), "win": sum(v[q][1] for _, v in parts) / games,
                             "frags": sum(v[q][2] for _, v in parts) / games}
            member["against"] = vs
        out.append(member)
    return out
