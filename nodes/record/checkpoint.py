"""Checkpoints: plain torch.save dicts, written atomically, loaded with weights_only=True.

Atomic: write to a temp file in the same directory, fsync it, rename over the final name, fsync
the directory. A crash mid-write leaves the previous checkpoint intact (and the temp file, for the
node's janitor to remove; a failed write removes its own). Files are named by
policy version so the newest is found by name; the oldest beyond `keep` are removed.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import socket

import torch

from nodes import faults
from nodes.errors import CheckpointError, one_line

__all__ = ["CheckpointError", "checkpoint_dir", "latest", "list_checkpoints", "load", "save", "save_as", "temp_path"]

FORMAT = "distrl-checkpoint-v1"
_NAME = re.compile(r"checkpoint_(\d{9})\.pt$")


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def save(run_dir: str, state: dict, keep: int) -> str:
    d = checkpoint_dir(run_dir)
    os.makedirs(d, exist_ok=True)
    final = save_as(os.path.join(d, f"checkpoint_{int(state['policy_version']):09d}.pt"), state)
    for old in list_checkpoints(run_dir)[:-keep]:
        with contextlib.suppress(FileNotFoundError):  # another writer (an elastic handover) pruned it first
            os.remove(old)
    return final


def temp_path(final: str) -> str:
    """Where `final` is written before its rename: named by host and pid, so that a writer killed
    mid-write is known by its file (the node's janitor removes it: nodes/janitor.py), and two
    writers of one run (an elastic handover) never share one."""
    return f"{final}.tmp.{socket.gethostname()}.{os.getpid()}"


def save_as(final: str, state: dict) -> str:
    """`state` as the checkpoint file `final`, atomically (a file that is not checkpoint_<version>.pt,
    such as the best evaluated one, is neither the latest nor ever removed)."""
    d = os.path.dirname(final)
    os.makedirs(d, exist_ok=True)
    state = dict(state, format=FORMAT)
    tmp = temp_path(final)
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        faults.at("checkpoint_written")
        os.replace(tmp, final)
    except BaseException:  # a full filesystem, a Ctrl-C: no partial file left (and its space freed)
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    dir_fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def list_checkpoints(run_dir: str):
    paths = [p for p in glob.glob(os.path.join(checkpoint_dir(run_dir), "checkpoint_*.pt")) if _NAME.search(p)]
    return sorted(paths)


def latest(run_dir: str) -> str | None:
    paths = list_checkpoints(run_dir)
    return paths[-1] if paths else None


def load(path: str) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a bad file
        raise CheckpointError(f"checkpoint {path} is unreadable (truncated or not a torch checkpoint): "
                              f"{one_line(exc)}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} is not a {FORMAT} checkpoint of this trainer")
    return state


def saved_identities(run_dir: str) -> tuple[str, list[str | None]]:
    """(path, each member's model identity) of the run's latest checkpoint, read memory-mapped (the
    launcher's check of a resume, before anything starts); ("", []) when there is none or it is
    unreadable (the node then says so)."""
    path = latest(run_dir)
    if path is None:
        return "", []
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - an unreadable checkpoint is the node's to report (it may try an older one)
        return "", []
    members = state.get("population", [state]) if isinstance(state, dict) else []
    return path, [m.get("model_identity") for m in members if isinstance(m, dict)]

