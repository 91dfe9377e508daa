"""The run's scalars (`Scalars`): the figures of nodes.record.stats, each under its TensorBoard tag, to
every logger the run names (`logger`), on the node that writes logs only."""
from __future__ import annotations

import os

from nodes.envs.doom_match import MATCH_KEYS
from nodes.record.stats import RankStats, RunStats, merged_match, merged_reward


def open_loggers(cfg) -> list:
    """A writer per logger the run names: TensorBoard's (run_dir/tb), W&B's (nodes.record.wandb_log)."""
    writers = []
    if "tensorboard" in cfg.logger:
        from torch.utils.tensorboard import SummaryWriter
        writers.append(SummaryWriter(log_dir=os.path.join(cfg.run_dir, "tb")))
    if "wandb" in cfg.logger:
        from nodes.record.wandb_log import WandbWriter
        writers.append(WandbWriter(cfg))
    return writers


class Scalars:
    """The run's scalars, to each logger the run names (`logger`: TensorBoard's SummaryWriter,
    nodes.record.wandb_log.WandbWriter; both take add_scalar(tag, value, step)); created only on the node
    that writes logs."""

    def __init__(self, writers: list):
        self.writers = writers

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        for writer in self.writers:
            writer.add_scalar(tag, value, step)

    def summary(self, summary: dict) -> None:
        """summary.json's figures, to the loggers that keep a run summary (W&B)."""
        for writer in self.writers:
            if hasattr(writer, "summary"):
                writer.summary(summary)

    def write_membership(self, frames: int, world_size: int, changes: int) -> None:
        """Elastic: the world's size and the count of changes so far, at each change."""
        self.add_scalar("membership/world_size", world_size, frames)
        self.add_scalar("membership/changes", changes, frames)

    def write(self, stats: RunStats, train: dict[str, float], ranks: RankStats | None = None) -> None:
        """ranks: when this iteration gathered every rank's row (the merged reward, each rank's
        samples and all-reduce seconds per iteration since the gather before); None between
        gathers, when the episode scalars wait for the next one rather than repeat stale rows."""
        step = stats.env_frames
        w = self
        w.add_scalar("perf/fps", stats.fps(), step)
        w.add_scalar("perf/sync_s", train.get("sync_s", 0.0), step)
        for k in ("loss", "policy_loss", "value_loss", "entropy", "grad_norm", "ratio_dev", "kl",
                  "policy_lag_mean", "policy_lag_max", "step_s", "lr"):
            if k in train:
                w.add_scalar(f"train/{k}", train[k], step)
        if ranks is None:
            return
        for rank, row in enumerate(ranks.per_iteration if len(ranks.per_iteration) > 1 else ()):
            w.add_scalar(f"nodes/samples_rank{rank}", row.samples, step)
            w.add_scalar(f"nodes/sync_s_rank{rank}", row.sync_s, step)
        rows = ranks.rows or [stats.row()]
        for key, tag in (("reward", "reward"), ("objective", "true_objective"), ("length", "length")):
            value = merged_reward(rows, key)  # over all ranks; length in env frames
            if value is not None:
                w.add_scalar(f"episode/{tag}", value, step)
        match = merged_match(ranks.rows) if ranks.rows else None
        for k in MATCH_KEYS if match is not None else ():
            w.add_scalar(f"match/{k}", match[k], step)
        if ranks.rows and any(row.engine_restarts for row in ranks.rows):
            w.add_scalar("match/engine_restarts", sum(row.engine_restarts for row in ranks.rows), step)

    def write_members(self, step: int, trains: list[dict], members, gathered: bool) -> None:
        """A population: each member's learner figures under member<p>/, and after a gather its
        reward (and match figures) over all ranks and its current hyper-parameters."""
        for p, train in enumerate(trains):
            if train.get("global_samples"):
                for k in ("loss", "entropy", "policy_lag_mean"):
                    self.add_scalar(f"member{p}/{k}", train[k], step)
        if not gathered:
            return
        for p, (m, h) in enumerate(zip(members.merged, members.hypers)):
            self._member(step, p, m, h, members.pbt.shaping_names)
        if members.pbt.enabled:
            self.add_scalar("pbt/replacements", len(members.pbt.events), step)
        if members.snapshots:
            self.add_scalar("selfplay/snapshots_taken", members.snapshots_taken, step)

    def _member(self, step: int, p: int, merged: dict, hyper, shaping_names: list[str]) -> None:
        """Member p's figures over all ranks and its hyper-parameters."""
        w = self
        for key in ("reward", "true_objective"):
            if merged[key] is not None:
                w.add_scalar(f"member{p}/{key}", merged[key], step)
        for k in ("frags", "win") if "match" in merged else ():
            w.add_scalar(f"member{p}/{k}", merged["match"][k], step)
        w.add_scalar(f"member{p}/lr", hyper.lr, step)
        w.add_scalar(f"member{p}/entropy_coeff", hyper.entropy_coeff, step)
        for name, weight in zip(shaping_names, hyper.shaping):
            w.add_scalar(f"member{p}/{name}", weight, step)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
