"""What a run keeps of its evaluation rounds (`Journal`): run_dir/eval.jsonl, one round a line, and
checkpoints/best.pt, the run state of the best round so far.

A round's score is its best member's mean true objective; a round that beats every one before
writes its state copy as best.pt (launch.enjoy enjoy.checkpoint=best plays it). A relaunch, or a
rank that becomes the writer, reads eval.jsonl back: the rounds so far, the best and the last.
"""
from __future__ import annotations

import json
import os

from nodes.record import checkpoint as ckpt

JOURNAL = "eval.jsonl"
BEST = "best.pt"


def best_path(run_dir: str) -> str:
    return os.path.join(ckpt.checkpoint_dir(run_dir), BEST)


class Journal:
    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.rounds = 0  # rounds journaled (the next round's number)
        self.best: dict | None = None  # the best round's entry
        self.last: dict | None = None
        self.loaded = False  # eval.jsonl read back

    def load(self) -> list[dict]:
        """The entries of eval.jsonl, counted in (none when the file does not exist)."""
        self.loaded = True
        path = os.path.join(self.run_dir, JOURNAL)
        if not os.path.isfile(path):
            return []
        with open(path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
        for entry in entries:
            self._count(entry)
        return entries

    def _count(self, entry: dict) -> None:
        self.rounds = max(self.rounds, entry["round"] + 1)
        self.last = entry
        if self.best is None or entry["score"] > self.best["score"]:
            self.best = entry

    def add(self, entry: dict, state: dict) -> None:
        """A finished round: best.pt first when it beats every round before (from `state`, the
        run state the round played), then its line in eval.jsonl."""
        improved = self.best is None or entry["score"] > self.best["score"]
        self._count(entry)
        if improved:
            ckpt.save_as(best_path(self.run_dir), state)
        with open(os.path.join(self.run_dir, JOURNAL), "a") as f:
            f.write(json.dumps(entry) + "\n")
