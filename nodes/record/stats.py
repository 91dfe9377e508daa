"""Run statistics of one node (`RunStats`), what each rank reports every iteration (`RankRow`),
and the per-rank accounting over a launch (`RankStats`). What reaches TensorBoard and W&B:
nodes.record.scalars."""
from __future__ import annotations

import collections
import math
import time
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields

from nodes.envs.doom_match import MATCH_KEYS


@dataclass
class EpisodeFigures:
    """What a rank's (or a population member's) recent episodes say."""

    episodes: float = 0.0  # episodes it has finished (rank 0: including those before a resume)
    reward: float = math.nan  # mean of its recent episode rewards (nan: none yet)
    reward_n: float = 0.0  # how many recent episodes that mean is over
    # VizDoom matches (env.bots, env.agents): its recent matches' mean frags, deaths, place and
    # win/draw/loss rates, over match_n matches (0: none)
    match_n: float = 0.0
    frags: float = math.nan
    deaths: float = math.nan
    place: float = math.nan
    win: float = math.nan
    draw: float = math.nan
    loss: float = math.nan
    # the mean true objective of the same recent episodes (the unshaped game measure: the env's
    # info["true_objective"], else the episode's game reward) and their mean length in env frames
    objective: float = math.nan
    length: float = math.nan


@dataclass
class RankRow(EpisodeFigures):
    """One rank's figures, gathered from every rank by `peers.gather_stats` every
    sync.stats_every iterations (as a list of floats, the same length on every rank). Totals over
    this launch, not one iteration's: nothing between two gathers is lost."""

    samples: float = 0.0  # samples it trained on in this launch
    sync_s: float = 0.0  # its seconds in the gradient all-reduce in this launch
    partial: float = 0.0  # batches it cut short so far (straggler handling)
    elapsed: float = 0.0  # seconds since it started training
    engine_restarts: float = 0.0  # matches between agents it restarted (an engine died or hung)

    def to_floats(self) -> list[float]:
        return [float(x) for x in astuple(self)]

    @classmethod
    def from_floats(cls, values: Sequence[float]) -> RankRow:
        if len(values) != len(fields(cls)):
            raise ValueError(f"a rank row has {len(fields(cls))} values, got {len(values)}")
        return cls(*values)


RANK_ROW_WIDTH = len(fields(RankRow))  # a population's member rows follow it in the gathered list


def merged_reward(rows: Sequence[EpisodeFigures], key: str = "reward") -> float | None:
    """Mean recent episode reward (or `key`: objective, length) over all ranks, each rank's mean
    weighted by its count of recent episodes."""
    rows = [r for r in rows if r.reward_n > 0 and not math.isnan(getattr(r, key))]
    n = sum(r.reward_n for r in rows)
    return sum(getattr(r, key) * r.reward_n for r in rows) / n if n else None


def merged_match(rows: Sequence[RankRow]) -> dict[str, float] | None:
    """Recent match figures over all ranks (each rank's means weighted by its match count), with
    `matches`, the count; None when no rank has finished a match."""
    rows = [r for r in rows if r.match_n > 0]
    n = sum(r.match_n for r in rows)
    if not n:
        return None
    out = {k: sum(getattr(r, k) * r.match_n for r in rows) / n for k in MATCH_KEYS}
    out["matches"] = n
    return out


class RankStats:
    """Per-rank accounting over this launch, from the rows gathered every sync.stats_every iterations."""

    def __init__(self):
        self.rows: list[RankRow] = []  # the last gathered rows, indexed by rank
        # per rank, samples and all-reduce seconds per iteration between the last two gathers
        self.per_iteration: list[RankRow] = []

    def add(self, rows: list[RankRow], iterations: int) -> None:
        """The rows of a gather `iterations` iterations after the one before."""
        before = self.rows or [RankRow() for _ in rows]
        n = max(iterations, 1)
        self.per_iteration = [RankRow(samples=(r.samples - b.samples) / n, sync_s=(r.sync_s - b.sync_s) / n)
                              for r, b in zip(rows, before)]
        self.rows = rows

    @property
    def samples(self) -> list[float]:
        """Samples each rank contributed this launch."""
        return [r.samples for r in self.rows]

    def sync_shares(self) -> list[float]:
        """Each rank's all-reduce time over its own training time (ranks start their clocks apart)."""
        return [round(r.sync_s / max(r.elapsed, 1e-9), 4) for r in self.rows]


class RunStats:
    def __init__(self, env_frames: int = 0, episodes: int = 0, recent_rewards=(), window: int = 100,
                 recent_matches=(), recent_objectives=None, recent_lengths=None):
        self.env_frames = env_frames  # frames trained on, over all sessions of this run
        self.episodes = episodes
        self.rewards = collections.deque(recent_rewards, maxlen=window)
        # a checkpoint written before the true objective was logged: the rewards stand for it
        self.objectives = collections.deque(recent_rewards if recent_objectives is None else recent_objectives,
                                            maxlen=window)
        self.lengths = collections.deque(recent_lengths or (), maxlen=window)  # env frames
        self.matches = collections.deque(recent_matches, maxlen=window)  # recent match results (VizDoom matches)
        self.start_frames = env_frames
        self.start_time = time.time()
        self._rate_points = collections.deque(maxlen=64)  # (time, frames) for a 10 s rate
        self._rate_points.append((self.start_time, env_frames))
        self.last_train: dict[str, float] = {}

    def add_episode(self, reward: float, length: int, objective: float,
                    match: dict[str, float] | None = None) -> None:
        """A finished episode: its game reward, length in env frames, true objective and, when it
        was a match, its result (MATCH_KEYS)."""
        self.episodes += 1
        self.rewards.append(reward)
        self.lengths.append(length)
        self.objectives.append(objective)
        if match is not None:
            self.matches.append(match)

    def add_frames(self, frames: int) -> None:
        self.env_frames += frames
        self._rate_points.append((time.time(), self.env_frames))

    @property
    def seconds(self) -> float:
        return time.time() - self.start_time

    def fps(self, window_s: float | None = 10.0) -> float:
        now = time.time()
        if window_s is None:
            t0, f0 = self.start_time, self.start_frames
        else:
            t0, f0 = next(((t, f) for t, f in self._rate_points if now - t <= window_s), self._rate_points[-1])
        return (self.env_frames - f0) / max(now - t0, 1e-9)

    def mean_reward(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    @staticmethod
    def _mean(values) -> float:
        return sum(values) / len(values) if values else math.nan

    def row(self, **figures: float) -> RankRow:
        """This node's row: its episodes and recent rewards, plus the iteration's figures."""
        r = self.mean_reward()
        means = {k: sum(m[k] for m in self.matches) / len(self.matches) for k in MATCH_KEYS} if self.matches else {}
        return RankRow(episodes=float(self.episodes), reward=math.nan if r is None else r,
                       reward_n=float(len(self.rewards)), elapsed=self.seconds,
                       match_n=float(len(self.matches)), objective=self._mean(self.objectives),
                       length=self._mean(self.lengths), **means, **figures)

    def status_line(self, rank_rows: Sequence[RankRow] = ()) -> str:
        rows = rank_rows or [self.row()]
        r, o = merged_reward(rows), merged_reward(rows, "objective")
        reward = f"{r:.1f} ({len(self.rewards)} ep)" if r is not None else "n/a (no episode yet)"
        if r is not None and o is not None and abs(o - r) > 1e-6 * max(1.0, abs(r)):
            reward += f" | true objective {o:.2f}"  # only where the env defines one of its own
        lag = self.last_train.get("policy_lag_mean")
        lag_s = f"{lag:.2f} (max {self.last_train.get('policy_lag_max', 0):.0f})" if lag is not None else "n/a"
        line = (f"frames {self.env_frames:,} | fps {self.fps():.0f} (10s) {self.fps(None):.0f} (avg) | "
                f"reward {reward} | policy lag {lag_s} | version {int(self.last_train.get('version', 0))}")
        match = merged_match(rows)
        if match is not None:
            line += (f" | matches: frags {match['frags']:.1f} deaths {match['deaths']:.1f} place {match['place']:.1f} "
                     f"win {match['win']:.0%} ({match['matches']:.0f})")
        if rank_rows and len(rank_rows) > 1:  # each rank's share of this launch's samples
            total = max(sum(x.samples for x in rank_rows), 1)
            shares = "/".join(f"{row.samples / total:.2f}" for row in rank_rows)
            line += f" | nodes {len(rank_rows)} (sample shares {shares}) | sync {self.last_train.get('sync_s', 0):.3f}s"
        return line
