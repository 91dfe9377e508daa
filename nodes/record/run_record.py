"""RunRecord: what a run leaves in its directory, written by the writer rank (rank 0).

Checkpoints (nodes.record.checkpoint: atomic, fsync'd), `summary.json`, the scalars (TensorBoard, W&B:
`logger`), `pbt.jsonl` (one PBT replacement a line) and the population's part of the status line.
A checkpoint during training is written off the lockstep: the loop takes a CPU copy of the run
state (a memory copy) and a thread writes it (torch.save + fsync), so at scale on a shared
filesystem no rank waits for the write; the next checkpoint, and the final one, wait for the one
before.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import threading

import torch

from nodes.record import checkpoint as ckpt
from nodes.record.scalars import Scalars, open_loggers

log = logging.getLogger("nodes")


def to_cpu(obj):
    """A copy of a state dict whose tensors are CPU copies (the live ones change with the next step)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


class RunRecord:
    def __init__(self, cfg, is_writer: bool):
        self.cfg, self.run_dir = cfg, cfg.run_dir
        self.is_writer = False
        self.scalars: Scalars | None = None
        self._writing: threading.Thread | None = None
        self._write_error: BaseException | None = None
        self.set_writer(is_writer)

    def set_writer(self, is_writer: bool) -> None:
        """This rank writes (or no longer does: elastic, rank 0 changed): the loggers follow."""
        self.is_writer = is_writer
        if is_writer and self.scalars is None:
            self.scalars = Scalars(open_loggers(self.cfg))
        elif not is_writer and self.scalars is not None:
            self.scalars.close()
            self.scalars = None

    # ------------------------------------------------------------------ checkpoints
    def restore(self, state, episodes_here: bool) -> str | None:
        """The latest checkpoint into `state` (CheckpointError when it does not fit); its path, or None."""
        path = ckpt.latest(self.run_dir)
        if path is None:
            return None
        state.load_state_dict(ckpt.load(path), path, episodes_here)
        log.info("resumed from %s: %d env frames, policy version %d", path, state.stats.env_frames,
                 state.learners[0].version)
        most = self.cfg.train.max_env_frames
        if most and state.stats.env_frames >= most:  # a relaunch of a finished run: say why nothing trains
            log.warning("the run already reached train.max_env_frames=%d: nothing left to train (raise it to "
                        "train on)", most)
        return path

    def checkpoint(self, state_dict: dict, wait: bool = False) -> None:
        """Write `state_dict` (the run state's, with episodes over all ranks): off the loop in a
        thread from a CPU copy, or now (`wait`: the final one). A failed write raises here, at the
        next checkpoint or the final one."""
        if not self.is_writer:
            return
        self.wait_written()
        snapshot = to_cpu(state_dict)
        if wait:
            self._write(snapshot)
            self._raise_write_error()
            return
        # not a daemon: the interpreter's exit (launch.process.exits.exit_now too) waits for the write
        self._writing = threading.Thread(target=self._write, args=(snapshot,), name="checkpoint")
        self._writing.start()

    def _write(self, snapshot: dict) -> None:
        try:
            path = ckpt.save(self.run_dir, snapshot, self.cfg.train.keep_checkpoints)
            log.info("checkpoint %s", path)
        except BaseException as exc:  # noqa: BLE001 - raised in the loop's thread (_raise_write_error)
            self._write_error = exc

    def wait_written(self) -> None:
        """The checkpoint being written, done (its error raised)."""
        if self._writing is not None:
            self._writing.join()
            self._writing = None
        self._raise_write_error()

    def _raise_write_error(self) -> None:
        """The writer thread's error, as it was raised there (its traceback goes to the log): an
        unwritable checkpoint is an unexpected failure of the run, as it was when the loop wrote."""
        exc, self._write_error = self._write_error, None
        if exc is not None:
            raise exc

    # ------------------------------------------------------------------ logs
    def iteration(self, stats, train: dict, ranks, members, member_trains: list[dict], events: list[dict]) -> None:
        """An iteration's TensorBoard scalars (`ranks`: the rows when they were gathered after it, else
        None) and its PBT replacements in pbt.jsonl."""
        if self.scalars:
            self.scalars.write(stats, train, ranks)
            if members.tracked:
                self.scalars.write_members(stats.env_frames, member_trains, members, ranks is not None)
        if events and self.is_writer:
            with open(os.path.join(self.run_dir, "pbt.jsonl"), "a") as f:
                for e in events:
                    f.write(json.dumps(e) + "\n")

    def eval_round(self, entry: dict) -> None:
        """A finished evaluation round (nodes.evaluation.evaluator) under eval/*, at the frames it was taken:
        the best member's figures, and each member's under eval/member<p>/ in a population."""
        if not self.scalars:
            return
        step, members = entry["env_frames"], entry["members"]
        keys = ("true_objective", "reward", "length", "true_objective_std")
        for key in keys:
            self.scalars.add_scalar(f"eval/{key}", members[entry["member"]][key], step)
        for p, figures in enumerate(members if len(members) > 1 else ()):
            for key in keys:
                self.scalars.add_scalar(f"eval/member{p}/{key}", figures[key], step)

    def membership(self, frames: int, world_size: int, changes: int) -> None:
        if self.scalars:
            self.scalars.write_membership(frames, world_size, changes)

    def summary(self, summary: dict) -> None:
        """run_dir/summary.json, atomically."""
        if not self.is_writer:
            return
        path = os.path.join(self.run_dir, "summary.json")
        tmp = ckpt.temp_path(path)
        try:
            with open(tmp, "w") as f:
                json.dump(summary, f, indent=2)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        if self.scalars:
            self.scalars.summary(summary)

    def close(self) -> None:
        """The loggers closed, and the checkpoint being written waited for (its error logged: the
        run's outcome is decided; the file it was to be is absent, the one before it intact)."""
        try:
            self.wait_written()
        except Exception as exc:  # noqa: BLE001 - any write error, reported and not raised
            log.warning("the last checkpoint written off the loop failed: %s", exc)
        finally:
            if self.scalars:
                self.scalars.close()
                self.scalars = None


def members_line(members, objective: str) -> str:
    """A population's part of the status line: each member's recent reward (or win rate) over all
    ranks, and the PBT replacements so far."""
    if not members.tracked or not members.merged:
        return ""
    win = objective == "win"
    parts = []
    for m in members.merged:
        if win and "match" in m:
            parts.append(f"{m['match']['win']:.0%}")
        else:
            parts.append("n/a" if m["reward"] is None else f"{m['reward']:.1f}")
    return f" | members {'win' if win else 'reward'} {' / '.join(parts)} | pbt replacements {len(members.pbt.events)}"
