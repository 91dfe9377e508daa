"""Where a node's time goes: every process's wall time split into named phases.

Each process owns one row of a shared float64 table (Control.profile) and a `Clock` over it:
`clock(PHASE)` ends the current phase and starts another, so every second of the process lands
in exactly one phase and the row sums to its wall time. Nothing travels through a queue; the
node (and the benchmark) reads everyone's split from the table, as the difference of two
snapshots. A tick is two perf_counter reads and one add: cheap enough to stay on in training.

On a GPU the phases are host time: a forward pass is the time to launch its kernels, and the
wait for the device lands in whichever phase first needs a result (the learner's `stats`, where
its one host sync is).
"""
from __future__ import annotations

import os
import time

import numpy as np

from nodes.janitor import descendants

# Phase names per kind of process; a row of the table has MAX_PHASES columns.
LEARNER = ("wait", "forward", "loss", "backward", "allreduce", "optimizer", "obs_norm", "publish", "stats")
BATCHER = ("wait", "copy")
POLICY = ("wait", "weights", "forward", "write", "reply")
ROLLOUT = ("wait", "env_step", "bookkeeping")
MAX_PHASES = max(len(LEARNER), len(BATCHER), len(POLICY), len(ROLLOUT))


def table_rows(num_policy_workers: int, num_workers: int) -> list[tuple[str, tuple[str, ...]]]:
    """(kind, phase names) of every row of a node's table, in row order: the learner (the main
    process), the batcher thread, the policy workers, the rollout workers."""
    return ([("learner", LEARNER), ("batcher", BATCHER)] + [("policy", POLICY)] * num_policy_workers
            + [("rollout", ROLLOUT)] * num_workers)


LEARNER_ROW, BATCHER_ROW = 0, 1


def policy_row(index: int) -> int:
    return 2 + index


def rollout_row(num_policy_workers: int, worker: int) -> int:
    return 2 + num_policy_workers + worker


class Clock:
    """The phase split of one process (or thread) into `row` (a numpy view of its table row, or
    a private one). Phases are indices into the kind's names, e.g. `clock(LEARNER.index("wait"))`;
    modules keep those indices as constants."""

    def __init__(self, row: np.ndarray | None = None, phases: int = MAX_PHASES):
        self.row = row if row is not None else np.zeros(phases)
        self.current = 0
        self.t = time.perf_counter()

    def __call__(self, phase: int) -> None:
        now = time.perf_counter()
        self.row[self.current] += now - self.t
        self.t, self.current = now, phase


def shares(before: np.ndarray, after: np.ndarray, rows: list[tuple[str, tuple[str, ...]]]) -> dict:
    """{kind: {phase: share of the kind's time}} between two snapshots of the table, averaged
    over the processes of a kind (weighted by their time). Kinds whose rows did not move (the
    policy workers of a simulate phase) are left out."""
    delta = after - before
    out: dict[str, dict[str, float]] = {}
    for kind, names in dict(rows).items():
        idx = [i for i, (k, _) in enumerate(rows) if k == kind]
        seconds = delta[idx, : len(names)].sum(0)
        total = float(seconds.sum())
        if total > 0:
            out[kind] = {name: round(float(s) / total, 3) for name, s in zip(names, seconds)}
    return out


def format_shares(split: dict) -> list[str]:
    """One line per kind: `learner: backward 41%, forward 22%, ...` (largest first)."""
    lines = []
    for kind, phases in split.items():
        parts = sorted(phases.items(), key=lambda kv: -kv[1])
        lines.append(f"{kind}: " + ", ".join(f"{name} {share:.0%}" for name, share in parts if share >= 0.005))
    return lines


def cpu_seconds(pids: list[int], tree: bool = True) -> float:
    """User + system CPU seconds used so far by these processes and (tree) all their descendants
    (a rollout worker's VizDoom engines are processes of their own); gone ones count 0."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for root in pids:
        for pid in descendants(root) if tree else [root]:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def cpu_by_kind(pool) -> dict[str, float]:
    """CPU seconds so far of the main process (learner, batcher; alone, without its children),
    the policy workers and the rollout workers (with their engines)."""
    def of(prefix):
        return cpu_seconds([p.pid for p in pool.procs if p.name.startswith(prefix)])
    return {"main": cpu_seconds([os.getpid()], tree=False), "policy": of("policy"), "rollout": of("rollout")}
