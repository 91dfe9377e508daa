"""Run statistics of one node: frames, episodes, recent rewards, rates; TensorBoard output."""
from __future__ import annotations

import collections
import time
from typing import Dict, Optional


# Per-rank row gathered every iteration (nodes.node.Node._share_stats), by index.
SAMPLES, SYNC_S, STEP_S, LAG, EPISODES, REWARD, REWARD_N, STOP, PARTIAL, ELAPSED = range(10)


def merged_reward(rank_rows) -> Optional[float]:
    """Mean recent episode reward over all nodes, each node's mean weighted by its episode count."""
    rows = [row for row in rank_rows if row[REWARD_N] > 0 and row[REWARD] == row[REWARD]]
    n = sum(row[REWARD_N] for row in rows)
    return sum(row[REWARD] * row[REWARD_N] for row in rows) / n if n else None


class RunStats:
    def __init__(self, env_frames: int = 0, episodes: int = 0, recent_rewards=(), window: int = 100):
        self.env_frames = env_frames  # frames trained on, over all sessions of this run
        self.episodes = episodes
        self.rewards = collections.deque(recent_rewards, maxlen=window)
        self.lengths = collections.deque(maxlen=window)
        self.start_frames = env_frames
        self.start_time = time.time()
        self._rate_points = collections.deque(maxlen=64)  # (time, frames) for a 10 s rate
        self._rate_points.append((self.start_time, env_frames))
        self.last_train: Dict[str, float] = {}

    def add_episode(self, reward: float, length: int) -> None:
        self.episodes += 1
        self.rewards.append(reward)
        self.lengths.append(length)

    def add_frames(self, frames: int) -> None:
        self.env_frames += frames
        self._rate_points.append((time.time(), self.env_frames))

    @property
    def seconds(self) -> float:
        return time.time() - self.start_time

    def fps(self, window_s: Optional[float] = 10.0) -> float:
        now = time.time()
        if window_s is None:
            t0, f0 = self.start_time, self.start_frames
        else:
            t0, f0 = next(((t, f) for t, f in self._rate_points if now - t <= window_s), self._rate_points[-1])
        return (self.env_frames - f0) / max(now - t0, 1e-9)

    def mean_reward(self) -> Optional[float]:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    def status_line(self, rank_rows=None) -> str:
        r = merged_reward(rank_rows) if rank_rows else self.mean_reward()
        reward = f"{r:.1f} ({len(self.rewards)} ep)" if r is not None else "n/a (no episode yet)"
        lag = self.last_train.get("policy_lag_mean")
        lag_s = f"{lag:.2f} (max {self.last_train.get('policy_lag_max', 0):.0f})" if lag is not None else "n/a"
        line = (f"frames {self.env_frames:,} | fps {self.fps():.0f} (10s) {self.fps(None):.0f} (avg) | "
                f"reward {reward} | policy lag {lag_s} | version {int(self.last_train.get('version', 0))}")
        if rank_rows and len(rank_rows) > 1:
            total = max(sum(x[SAMPLES] for x in rank_rows), 1)
            shares = "/".join(f"{row[SAMPLES] / total:.2f}" for row in rank_rows)
            line += f" | nodes {len(rank_rows)} (sample shares {shares}) | sync {self.last_train.get('sync_s', 0):.3f}s"
        return line


class TensorBoard:
    """Scalars for TensorBoard; created only on the node that writes logs."""

    def __init__(self, log_dir: str):
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(log_dir=log_dir)

    def write(self, stats: RunStats, train: Dict[str, float], rank_rows=None) -> None:
        step = stats.env_frames
        w = self.writer
        w.add_scalar("perf/fps", stats.fps(), step)
        w.add_scalar("perf/sync_s", train.get("sync_s", 0.0), step)
        for rank, row in enumerate(rank_rows or []):
            if len(rank_rows) > 1:
                w.add_scalar(f"nodes/samples_rank{rank}", row[SAMPLES], step)
                w.add_scalar(f"nodes/sync_s_rank{rank}", row[SYNC_S], step)
        for k in ("loss", "policy_loss", "value_loss", "entropy", "grad_norm", "ratio_dev",
                  "policy_lag_mean", "policy_lag_max", "step_s"):
            if k in train:
                w.add_scalar(f"train/{k}", train[k], step)
        r = merged_reward(rank_rows) if rank_rows else stats.mean_reward()
        if r is not None:
            w.add_scalar("episode/reward", r, step)
            w.add_scalar("episode/length", sum(stats.lengths) / max(len(stats.lengths), 1), step)

    def close(self) -> None:
        self.writer.close()
