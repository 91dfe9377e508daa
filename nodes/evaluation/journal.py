"""What a run keeps of its evaluation rounds (`Journal`): run_dir/eval.jsonl, one round a line, and
checkpoints/best.pt, the run state of the best round so far.

A round's score is its best member's mean true objective; a round that beats every one before
writes its state copy as best.pt (launch.enjoy enjoy.checkpoint=best plays it). A relaunch, or a
rank that becomes the writer, reads eval.jsonl back: the rounds so far, the best and the last.

A line is appended in one write, so a write cut short (a full disk, a crash) tears the last line
only: `read_jsonl` cuts a torn last line off the file (a warning says so) and the rounds before it
go on; a line that does not parse anywhere else is not a torn write, and is an error.
"""
from __future__ import annotations

import json
import logging
import os

from nodes.errors import one_line
from nodes.record import checkpoint as ckpt

log = logging.getLogger("nodes")

JOURNAL = "eval.jsonl"
BEST = "best.pt"


class JournalError(ValueError):
    """A line of a journal that is not JSON and not its last: one line naming the file and the line."""


def best_path(run_dir: str) -> str:
    return os.path.join(ckpt.checkpoint_dir(run_dir), BEST)


def read_jsonl(path: str) -> list[dict]:
    """The entries of the JSON-lines file `path` (none when it does not exist). A last line that
    does not parse is cut off the file, with a warning; a complete last line without its newline
    gets one: either way the next line appended starts on a line of its own. JournalError (one
    line) for a line before the last that does not parse."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")  # the last piece: b"" after a final newline, else an unfinished line
    entries, offset = [], 0
    for number, line in enumerate(lines, 1):
        try:
            if line.strip():
                entries.append(json.loads(line))
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            if any(rest.strip() for rest in lines[number:]):
                raise JournalError(f"{path} line {number} is not a JSON line ({one_line(exc)}); only the last line of "
                                   "a journal may be cut short: fix or remove that line") from None
            log.warning("%s: its last line (line %d) was cut short, a write that did not finish (a full disk, a "
                        "crash): dropped (%d bytes)", path, number, len(data) - offset)
            os.truncate(path, offset)
            return entries
        offset += len(line) + 1
    if data and not data.endswith(b"\n"):
        with open(path, "ab") as f:
            f.write(b"\n")
    return entries


class Journal:
    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.rounds = 0  # rounds journaled (the next round's number)
        self.best: dict | None = None  # the best round's entry: its state is in best.pt
        self.last: dict | None = None
        self.loaded = False  # eval.jsonl read back

    def load(self) -> list[dict]:
        """The entries of eval.jsonl, counted in (none when the file does not exist; a torn last
        line cut off: `read_jsonl`)."""
        self.loaded = True
        entries = read_jsonl(os.path.join(self.run_dir, JOURNAL))
        for entry in entries:
            self._count(entry)
        return entries

    def _count(self, entry: dict) -> None:
        self.rounds = max(self.rounds, entry["round"] + 1)
        self.last = entry
        if self._beats_best(entry):
            self.best = entry

    def _beats_best(self, entry: dict) -> bool:
        return self.best is None or entry["score"] > self.best["score"]

    def add(self, entry: dict, state: dict) -> None:
        """A finished round: best.pt first when it beats every round before (from `state`, the
        run state the round played), then the round counted and its line in eval.jsonl. A failed
        write of best.pt raises before either: the best stays the round whose state best.pt holds."""
        if self._beats_best(entry):
            ckpt.save_as(best_path(self.run_dir), state)
        self._count(entry)
        with open(os.path.join(self.run_dir, JOURNAL), "a") as f:
            f.write(json.dumps(entry) + "\n")
