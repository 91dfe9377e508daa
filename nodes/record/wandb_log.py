"""Weights & Biases output of the writer rank (logger=[...,wandb]; nodes.config.tools.WandbConfig).

The same scalars TensorBoard gets, one W&B history row per step with `env_frames` as its x axis
(TensorBoard's step), the resolved config at the start and summary.json's figures as the run's
summary. One W&B run per run directory: its id is made once and kept in run_dir/wandb/run_id, so a
relaunch (a requeued job, a resume) or a new writer rank (elastic membership) continues the same
W&B run. W&B writes its files under run_dir/wandb/ (offline mode: `wandb sync` them later).
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import string

RUN_ID_FILE = "run_id"


def run_id(wandb_dir: str) -> str:
    """The run directory's W&B run id: made on the first call, read back on every later one."""
    path = os.path.join(wandb_dir, RUN_ID_FILE)
    if os.path.isfile(path):
        with open(path) as f:
            return f.read().strip()
    os.makedirs(wandb_dir, exist_ok=True)
    new = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))  # W&B's own form
    with open(path + ".tmp", "w") as f:
        f.write(new + "\n")
    os.replace(path + ".tmp", path)
    return new


def run_name(run_dir: str) -> str:
    """The run directory's last two parts: `doom_basic/2026-11-25_17-00-00`, or a sweep's
    `2026-11-25_17-00-00/3`."""
    return "/".join(os.path.normpath(run_dir).split(os.sep)[-2:])


def summary_of(summary: dict, prefix: str = "") -> dict:
    """summary.json's numbers and words, nested keys joined with '/' (lists are left to the file)."""
    out = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            out.update(summary_of(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float, str)):
            out[prefix + key] = value
    return out


class WandbWriter:
    """add_scalar(tag, value, step) as TensorBoard's SummaryWriter takes it; a step's scalars are
    logged as one row when the next step begins (or at close)."""

    def __init__(self, cfg):
        import wandb

        w = cfg.wandb
        wandb_dir = os.path.join(cfg.run_dir, "wandb")
        self.run = wandb.init(
            project=w.project, entity=w.entity or None, mode=w.mode or None, group=w.group or None,
            tags=list(w.tags) or None, name=run_name(cfg.run_dir), id=run_id(wandb_dir), resume="allow",
            dir=cfg.run_dir, config=dataclasses.asdict(cfg),
            settings=wandb.Settings(console="off"))  # our log lines stay ours (train.log, stdout)
        self.run.define_metric("env_frames")
        self.run.define_metric("*", step_metric="env_frames")
        self.step: int | None = None
        self.row: dict[str, float] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        if step != self.step:
            self.flush()
            self.step = step
        self.row[tag] = float(value)

    def flush(self) -> None:
        if self.row:
            self.run.log({**self.row, "env_frames": self.step})
            self.row = {}

    def summary(self, summary: dict) -> None:
        self.run.summary.update(summary_of(summary))

    def close(self) -> None:
        self.flush()
        self.run.finish()
